"""`--kernels`: which build of the linear kernel a command's learners run (`ranking.aot`)."""

from __future__ import annotations

import argparse

from rankstream.ranking import aot  # numpy-free at import: read while the parser is built


def add_kernels_argument(parser: argparse.ArgumentParser, scope: str = "") -> None:
    parser.add_argument(
        "--kernels",
        choices=aot.MODES,
        default="auto",
        help=f"{scope}the linear rules' kernel: its ahead-of-time build (`python -m "
        "rankstream.ranking.aot`) when there is one (auto), required (aot), or numba's JIT "
        "(jit); the same weights either way (default %(default)s)",
    )


def use_kernels(mode: str) -> str:
    """Set the process's kernel mode; returns what the linear rules will run on (for a
    call matching an exported layout): "aot" or "jit". A missing required build is a
    UsageError naming how to build it."""
    from rankstream.commands._usage import UsageError

    try:
        aot.set_mode(mode)
    except aot.AotUnavailableError as exc:
        raise UsageError(str(exc)) from None
    return "jit" if mode == "jit" or aot.load() is None else "aot"
