"""`rankstream demo` (interim): the digits CBIR evaluation, a table and DIR/report.json.

Stands in until the embedded streaming pipeline exists; it reuses `eval cbir` whole.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="report", help="directory for report.json")
    parser.add_argument(
        "--triplets", type=int, default=None, help="training triplet rows (default 200,000)"
    )
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    from rankstream.commands.eval_cbir import print_result, run_evaluation

    evaluation_args = argparse.Namespace(
        dataset="digits", seed=args.seed, train_rows=args.triplets, max_queries=None
    )
    result = run_evaluation(evaluation_args)
    print_result(result)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0
