"""`rankstream replay DIR`: feed a recorded log back into the stream, or train from it.

Into the configured transport (Kafka, or the embedded log): at the recorded pace by
default, `--speed F` times faster, or `--as-fast-as-possible`; order and keys kept.
With `--direct`: train fresh online rankers straight from the files (a back-test of
other algorithms or hyper-parameters) and print their summaries as `model show` does,
{name: {...}}. Either way the same log gives bit-identical weights.

The direct path is the hot path of `rankstream bench replay`, so it imports only what
it uses (no Kafka, Redis, Prometheus or rich unless stderr is a terminal).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.commands._kernels import add_kernels_argument, use_kernels
from rankstream.commands._shared_args import add_skip_bad_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rankstream.ranking import learners  # numpy-free, like everything imported here
    from rankstream.workers.options import add_hyperparameter_arguments

    parser.add_argument("directory", metavar="DIR", help="a directory written by `record`")
    pace = parser.add_mutually_exclusive_group()
    pace.add_argument(
        "--speed",
        type=float,
        default=None,
        metavar="F",
        help="replay F times faster than recorded (default: recorded pace)",
    )
    pace.add_argument(
        "--as-fast-as-possible", action="store_true", help="send without waiting between messages"
    )
    pace.add_argument(
        "--direct", action="store_true", help="train from the files instead of sending them"
    )
    parser.add_argument(
        "--topics",
        default="triplets,queries,impressions,clicks",
        help="streams to send back (default %(default)s; the click join turns impressions "
        "and clicks into weighted triplets again, which recordings leave out)",
    )
    parser.add_argument(
        "--algo",
        default=",".join(learners.worker_defaults()),
        help=f"--direct: comma-separated learners, from {', '.join(learners.names())} "
        "(default %(default)s)",
    )
    add_hyperparameter_arguments(parser)
    parser.add_argument(
        "--scaler-rows",
        type=int,
        default=2000,
        metavar="N",
        help="--direct: triplets that fit each model's scaler (as the worker)",
    )
    add_kernels_argument(parser, "--direct: ")
    add_skip_bad_argument(parser)
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if not Path(args.directory).is_dir():
        print(f"no recording at {args.directory}", file=sys.stderr)
        return 2
    return _run_direct(args) if args.direct else _run_into_transport(args)


@contextmanager
def _reading_log(description: str, directory: str) -> Iterator[Callable[[int], None]]:
    """A progress bar over the log's triplets; a log that cannot be read (another width, a
    damaged file) as a CommandError, a value the options refuse as a UsageError."""
    from rankstream.commands._usage import CommandError, UsageError
    from rankstream.stream.recording_files import RecordingError, WidthMismatchError

    try:
        with _Progress(description, _log_rows(directory)) as advance:
            yield advance
    except WidthMismatchError as exc:
        raise CommandError(f"wrong width: {exc}") from exc
    except RecordingError as exc:
        raise CommandError(f"damaged log: {exc} (use --skip-bad to skip and count)") from exc
    except ValueError as exc:
        raise UsageError(f"bad option: {exc}") from exc


def _run_direct(args: argparse.Namespace) -> int:
    from rankstream.cli import batch_job

    if batch_job() and "numpy" not in sys.modules:
        # Nothing here calls BLAS, but numpy's OpenBLAS would start a thread pool at
        # import: ~0.1 s of CPU for nothing.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        # numba's first compile or cache load imports scipy.linalg (~0.17 s of CPU, a
        # third of numba's start-up) only to find out whether compiled code may call
        # BLAS (np.dot); the learners' kernels never do, so this one-shot process
        # blocks that import and numba records "no BLAS" (same weights, bit for bit).
        sys.modules.setdefault("scipy.linalg", None)  # type: ignore[arg-type]
    from rankstream.stream.settings import Settings
    from rankstream.workers.direct_replay import DirectOptions, train_from_log
    from rankstream.workers.options import hyperparameter_values

    algos = tuple(a.strip() for a in args.algo.split(",") if a.strip())
    use_kernels(args.kernels)
    with _reading_log("training from the log", args.directory) as advance:
        options = DirectOptions(
            algos=algos,
            hyper=hyperparameter_values(args),
            scaler_rows=args.scaler_rows,
            skip_bad=args.skip_bad,
            width=Settings.from_env().phi_dim,
        )
        result = train_from_log(args.directory, options, on_rows=advance)
    summaries = result.summaries()
    counts = result.counts
    if counts.bad_rows or counts.bad_files:
        print(
            f"skipped {counts.bad_rows} bad rows and {counts.bad_files} bad files", file=sys.stderr
        )
    if args.json:
        print_json(summaries)
        return 0
    _print_table(summaries, f"trained from {args.directory} ({counts.rows:,} triplets)")
    return 0


def _run_into_transport(args: argparse.Namespace) -> int:
    from rankstream.commands._choices import parse_choices
    from rankstream.commands.record import KIND_TOPICS
    from rankstream.stream.connect import open_transport
    from rankstream.stream.recording_replay import replay_log
    from rankstream.stream.settings import Settings

    kinds = parse_choices(args.topics, KIND_TOPICS, "--topics")
    speed = None if args.as_fast_as_possible else (1.0 if args.speed is None else args.speed)
    settings = Settings.from_env()
    topics = {kind: getattr(settings, KIND_TOPICS[kind]) for kind in kinds}
    transport = open_transport(settings)
    try:
        with _reading_log(
            f"replaying into {', '.join(topics.values())}", args.directory
        ) as advance:
            counts = replay_log(
                transport,
                args.directory,
                topics,
                speed=speed,
                width=settings.phi_dim,
                skip_bad=args.skip_bad,
                on_message=lambda m: advance(m.rows if m.kind == "triplets" else 0),
            )
    finally:
        transport.close()
    report = {
        "messages": counts.messages,
        "triplets": counts.rows,
        "seconds": counts.seconds,
        "bad_rows": counts.read.bad_rows,
        "bad_files": counts.read.bad_files,
    }
    if args.json:
        print_json(report)
    else:
        print(
            f"sent {counts.messages} messages ({counts.rows:,} triplets) to "
            f"{', '.join(topics.values())} in {counts.seconds:.2f}s",
            file=sys.stderr,
        )
    return 0


def _log_rows(directory: str) -> int:
    """Triplets in the log's footers (for the progress bar); 0 if unreadable."""
    from rankstream.stream.recording_files import RecordingError, log_paths, read_log_file

    total = 0
    for path in log_paths(directory, "triplets"):
        try:
            total += read_log_file(path, "triplets").records
        except RecordingError:
            continue
    return total


class _Progress:
    """A rich progress bar on stderr when it is a terminal; a no-op (no import) otherwise."""

    def __init__(self, description: str, total: int) -> None:
        self._description, self._total = description, total
        self._bar = None

    def __enter__(self):
        if not sys.stderr.isatty():
            return lambda n: None
        from rich.console import Console
        from rich.progress import Progress

        self._bar = Progress(console=Console(stderr=True), transient=True)
        self._bar.start()
        task = self._bar.add_task(self._description, total=self._total or None)
        return lambda n: self._bar.advance(task, n)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


def _print_table(summaries: dict, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("model", "triplets_seen", "n_updates", "weights_sha256"):
        table.add_column(column)
    for name, s in summaries.items():
        table.add_row(
            name, f"{s['triplets_seen']:,}", f"{s['n_updates']:,}", str(s["weights_sha256"])[:16]
        )
    Console().print(table)
