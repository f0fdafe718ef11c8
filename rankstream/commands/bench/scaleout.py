"""`rankstream bench scaleout`: throughput of 1, 2, 4... per-partition online workers."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import print_json
from rankstream.commands._options import options_arguments
from rankstream.commands._real_services import on_real_services
from rankstream.harness.bench_options import ScaleoutBenchOptions

add_arguments = options_arguments(ScaleoutBenchOptions)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankstream.harness.pipeline_bench import summarize_runs
    from rankstream.harness.scaleout_bench import run_once

    options, settings = on_real_services("bench scaleout", ScaleoutBenchOptions, args)
    err = Console(stderr=True)
    results = {}
    for workers in options.workers:
        runs = []
        for repeat in range(options.repeats):
            label = f"{workers} worker(s), run {repeat + 1}/{options.repeats}"
            try:
                with err.status(f"{label}: starting") as status:
                    result = run_once(
                        settings,
                        options.triplets,
                        workers,
                        partitions=options.partitions,
                        seed=repeat,
                        progress=lambda text, s=status, lb=label: s.update(f"{lb}: {text}"),
                    )
            except RuntimeError as exc:  # a worker or producer failed; the run cleaned up
                err.print(f"{label} failed: {exc}")
                return 1
            runs.append(result)
            err.print(
                f"{label}: {result.triplets_per_s:,.0f} triplets/s "
                f"({result.seconds:.2f} s, lost {result.lost}, "
                f"duplicated {result.duplicated})"
            )
        summary = summarize_runs(runs)
        results[str(workers)] = {
            key: summary[key] for key in ("seconds", "triplets_per_s", "lost", "duplicated")
        }
    report = {"triplets": options.triplets, "partitions": options.partitions, "results": results}
    if args.json:
        print_json(report)
    else:
        for workers, row in results.items():
            print(f"workers={workers}  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    clean = all(row["lost"] == 0 and row["duplicated"] == 0 for row in results.values())
    return 0 if clean else 1
