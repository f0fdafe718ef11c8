"""`rankstream demo`: the whole pipeline in one process, no services (`rankstream.demo_pipeline`).

Writes DIR/report.json, DIR/ndcg_at_50.png (the paper's Fig. 3) and
DIR/learning_time.png (Fig. 4), and prints a table of the results (with `--json`, the
report instead); the online learners'
first call (numba's compile or cache load) is its own row, not part of any learner's
learning time.

`--feedback clicks:MODEL` runs the click demo instead (`rankstream.click_demo`): no
judgment is sent, the interleaving race on the simulated users' clicks moves the
champion. It writes DIR/report.json, DIR/click_demo.png (the true NDCG@50 of what was
shown, and each challenger's test statistic against its threshold, with the switches)
and DIR/learning_time.png, and prints the champion's history and the interleaving
evidence.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rankstream.commands._collection_args import add_collection_arguments, collection_fields
from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.commands._shared_args import add_seed_argument
from rankstream.simulators.click_models import CLICK_MODELS, FEEDBACK_JUDGED
from rankstream.simulators.engine_rankers import ENGINE_RANKER_METAVAR, NO_ENGINE
from rankstream.workers.options import add_hyperparameter_arguments, hyperparameter_values

if TYPE_CHECKING:
    from rankstream.click_demo import ClickDemoResult
    from rankstream.demo_pipeline import DemoResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        default="report",
        metavar="DIR",
        help="directory for report.json and the plots (default ./report)",
    )
    parser.add_argument(
        "--queries",
        type=int,
        default=2000,
        metavar="Q",
        help="queries to serve (default 2000, as in the paper; with clicks: impressions)",
    )
    parser.add_argument(
        "--triplets",
        type=int,
        default=None,
        metavar="N",
        help="also stop once at least N triplets were produced",
    )
    add_collection_arguments(parser)
    add_seed_argument(parser, "query stream seed (default 0)")
    parser.add_argument(
        "--refit-every",
        type=int,
        default=None,
        metavar="K",
        help="queries between batch refits (default 500)",
    )
    parser.add_argument(
        "--feedback",
        default=FEEDBACK_JUDGED,
        metavar="judged|clicks:MODEL",
        help="judged (default): the paper's setting, the served top 50 graded; "
        f"clicks:MODEL: the click demo, users of click model MODEL ({', '.join(CLICK_MODELS)}) "
        "click, no judgment is sent and the interleaving race on clicks picks the champion",
    )
    parser.add_argument(
        "--interleaving-share",
        type=float,
        default=None,
        metavar="S",
        help="clicks: the share of rankings served interleaved (default 0.5: "
        "rankstream.demo_pipeline.CLICK_DEMO_INTERLEAVING_SHARE)",
    )
    parser.add_argument(
        "--engine-ranker",
        default=NO_ENGINE,
        metavar=ENGINE_RANKER_METAVAR,
        help="the simulated engine's own production ranker, sent as its engine_scores "
        "(default none; rankstream.simulators.engine_rankers): single-descriptor[:J] ranks "
        "by phi column J alone (weaker than Uni-Con), grades-noise[:SIGMA] by the true "
        "grades plus noise (stronger than every learner); the report adds its true NDCG@50",
    )
    add_hyperparameter_arguments(parser)
    add_json_argument(parser, "instead of the table: the report (as DIR/report.json)")


def run(args: argparse.Namespace) -> int:
    from rankstream.click_demo import run_click_demo
    from rankstream.commands._usage import options_checked
    from rankstream.demo_pipeline import DemoOptions, run_demo
    from rankstream.simulators.fashion_mnist import FashionMNISTMissingError

    given = {"refit_every": args.refit_every, "interleaving_share": args.interleaving_share}
    with options_checked():
        options = DemoOptions(
            queries=args.queries,
            triplets=args.triplets,
            seed=args.seed,
            hyper=hyperparameter_values(args),
            feedback=args.feedback,
            engine_ranker=args.engine_ranker,
            **collection_fields(args),
            **{name: value for name, value in given.items() if value is not None},
        )
    try:
        if options.clicks:
            return _report_clicks(run_click_demo(options), Path(args.out), args.json)
        result = run_demo(options)
    except FashionMNISTMissingError as exc:  # names the Debian package to install
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = result.report()
    report["plots"] = _plot(result, out, served := _served(report))
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        print_json(report)
    else:
        _print_table(report, served)
    print(
        f"champion {report['champion']} ({report['champion_switches']} switches), "
        f"{report['refits']} batch refits; the online learners' first call (numba's "
        f"compile or cache load, not counted as learning) took "
        f"{report['learners_first_call']['cpu_seconds']:.3f} s CPU; "
        f"wrote {out / 'report.json'} and plots",
        file=sys.stderr,
    )
    return 0


def _print_table(report: dict, served: str) -> None:
    """One row per model: NDCG@50, mAP, their gains over Uni-Con, learning time, served."""
    from rankstream.plots import model_label
    from rankstream.tables import print_method_table

    rows = {
        model_label(m): {
            "NDCG@50": report["ndcg_at_50"][m],
            "vs Uni-Con": report["improvement_over_uni_con"].get(m),
            "mAP": report["map"][m],
            "mAP vs Uni-Con": report["map_improvement_over_uni_con"].get(m),
            "queries scored": report["scored_queries"][m],
            "learning s": report["learning_seconds"][m],
            "served": report["served_by"].get(m, 0),
        }
        for m in report["ndcg_at_50"]  # every model of the run, in its order
    }
    rows["first call"] = {"learning s": report["learners_first_call"]["cpu_seconds"]}
    print_method_table(
        f"rankstream demo: {report['queries']} queries, {report['triplets']:,} triplets, "
        f"{served}, {report['seconds']} s",
        rows,
        formats={"vs Uni-Con": "+.4f", "mAP vs Uni-Con": "+.4f", "learning s": ".3f"},
    )


def _served(report: dict) -> str:
    """What the run served, for titles: "fashion-mnist, 70,000 images"."""
    return f"{report['collection']}, {report['images']:,} images"


def _plot(result: DemoResult, out: Path, served: str) -> dict[str, str]:
    """Fig. 3 and Fig. 4 of the run under `out`, titled with the collection served."""
    from rankstream.plots import plot_learning_time, plot_ndcg

    ndcg = plot_ndcg(
        result.ndcg,
        out / "ndcg_at_50.png",
        title=f"Online cumulative retrieval performance (NDCG@50): {served}",
    )
    learning = plot_learning_time(
        result.learning_seconds,
        out / "learning_time.png",
        title=f"Online cumulative time cost: {served}",
    )
    return {"ndcg_at_50": str(ndcg), "learning_time": str(learning)}


def _report_clicks(result: ClickDemoResult, out: Path, as_json: bool) -> int:
    """The click demo's report, plots and table (or the report on stdout with --json)."""
    from rankstream.plots import plot_click_demo, plot_learning_time

    out.mkdir(parents=True, exist_ok=True)
    report = result.report()
    served = _served(report)
    history = result.history
    report["plots"] = {
        "click_demo": str(
            plot_click_demo(
                history.shown_ndcg,
                history.statistics,
                [
                    (s["decided_at_impression"], s["champion"])
                    for s in report["champions"]
                    if "decided_at_impression" in s
                ],
                history.threshold,
                out / "click_demo.png",
                title=f"Click demo ({report['feedback']}, no judgments): {served}",
            )
        ),
        "learning_time": str(
            plot_learning_time(
                result.learning_seconds,
                out / "learning_time.png",
                title=f"Online cumulative time cost: {served}",
            )
        ),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    if as_json:
        print_json(report)
    else:
        _print_clicks(report)
    print(
        f"champion {report['champion']} ({report['champion_switches']} switches on clicks), "
        f"{report['judged']['queries_sent']} judged queries sent; "
        f"wrote {out / 'report.json'} and plots",
        file=sys.stderr,
    )
    return 0


def _print_clicks(report: dict) -> None:
    """The champion's history, then each race that decided a switch and the race now."""
    from rankstream.plots import model_label
    from rankstream.tables import print_method_table

    truth = report["true_ndcg_at_50"]
    spells = {
        f"{i + 1}. {model_label(s['champion'])}": {
            "from impression": s["first_impression"],
            "to": s["last_impression"],
            "decided by": s.get("decided_by", "-"),
            "true NDCG@50 shown": s["true_ndcg_at_50_shown"],
            "its own lists": s["true_ndcg_at_50_champion_lists"],
        }
        for i, s in enumerate(report["champions"])
    }
    print_method_table(
        f"rankstream demo --feedback {report['feedback']}: {report['impressions']:,} "
        f"impressions ({report['interleaved_impressions']:,} interleaved at share "
        f"{report['interleaving_share']:g}), {report['clicks']:,} clicks, click-through rate "
        f"{report['click_through_rate']:.3f}, judged queries sent "
        f"{report['judged']['queries_sent']}; {_served(report)}, {report['seconds']} s",
        spells,
    )
    races = [
        (
            f"race that made {model_label(s['champion'])} champion at impression "
            f"{s['decided_at_impression']}",
            s["race"],
        )
        for s in report["champions"]
        if "decided_at_impression" in s  # the engine's arrival is no race's decision
    ]
    races.append((f"race now, against {model_label(report['champion'])}",
                  report["interleaving"].get("challengers", {})))  # fmt: skip
    for title, race in races:
        rows = {
            model_label(m): {
                "interleaved": e["impressions"],
                "wins": e["wins"],
                "losses": e["losses"],
                "ties": e["ties"],
                "log statistic": e["log_statistic"],
                "threshold": e["threshold"],
                "decision": e["decision"],
            }
            for m, e in race.items()
        }
        if rows:
            print_method_table(title, rows, formats={"log statistic": ".2f", "threshold": ".2f"})
    print(f"true NDCG@50: {truth['note']}")
