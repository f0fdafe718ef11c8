"""`rankstream record --out DIR`: write the triplet (and judged-query) streams to Parquet.

Resumable: a restart continues after the last message in DIR's committed files, so an
interrupted recording has neither gaps nor duplicates (see `stream.recording_writer`).
"""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument, print_json

KIND_TOPICS = {"triplets": "triplets_topic", "queries": "queries_topic"}  # -> Settings attr


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="DIR", help="recording directory")
    parser.add_argument(
        "--topics",
        default="triplets,queries",
        help="streams to record: triplets,queries (default both)",
    )
    parser.add_argument(
        "--exit-when-idle",
        type=float,
        default=None,
        metavar="S",
        help="commit and exit when no message arrived for S seconds",
    )
    parser.add_argument(
        "--messages-per-file",
        type=int,
        default=500,
        metavar="N",
        help="roll to a new file after N messages (default 500)",
    )
    parser.add_argument(
        "--roll-seconds",
        type=float,
        default=10.0,
        metavar="T",
        help="commit buffered messages at least every T seconds (default 10)",
    )
    add_json_argument(parser, "at exit: the messages and rows recorded")


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from rankstream.commands._choices import parse_choices
    from rankstream.commands._usage import options_checked
    from rankstream.stream.settings import Settings
    from rankstream.workers.recorder import Recorder, RecorderOptions
    from rankstream.workers.structured_log import configure_logging, get_logger, log_event

    kinds = parse_choices(args.topics, KIND_TOPICS, "--topics")
    with options_checked():
        options = RecorderOptions(
            messages_per_file=args.messages_per_file,
            roll_seconds=args.roll_seconds,
            exit_when_idle=args.exit_when_idle,
        )
    configure_logging()
    log = get_logger("rankstream.record")
    settings = Settings.from_env()
    topics = {kind: getattr(settings, KIND_TOPICS[kind]) for kind in kinds}

    def committed(path, counts) -> None:
        log_event(log, "file committed", path=str(path), messages=counts.messages, rows=counts.rows)

    recorder = Recorder(settings, args.out, topics, options, on_commit=committed)
    recorder.install_signal_handlers()
    log_event(
        log,
        "recording",
        out=args.out,
        topics=topics,
        resume_from={t: w.positions for t, w in recorder.writers.items()},
    )
    recorder.run()
    summary = {topic: asdict(c) for topic, c in recorder.counts.items()}
    log_event(log, "recording stopped", **{"counts": summary})
    if args.json:
        print_json({"out": args.out, "topics": summary})
    return 0
