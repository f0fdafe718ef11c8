import sys

from rankstream.cli import main

sys.exit(main())
