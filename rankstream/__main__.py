from rankstream.cli import program

program()
