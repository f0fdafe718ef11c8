"""`rankstream eval counterfactual DIR`: stored models' click-DCG@k from a recording.

Replays the recording's impressions and clicks (`rankstream record`), joined by the click
join's rules, against stored models (the configured model store: RANKSTREAM_REDIS_URL), the
engine's own order (from the engine_scores logged with each impression; undefined, and
counted, on impressions without them) or the logged ranking itself, and prints each one's
IPS and SNIPS estimate with its interval, its paired difference from `--baseline`, the
propensities used, the impressions and clicks used, and what was skipped and why
(`rankstream.evals.counterfactual_eval`; the estimator and what it assumes:
`rankstream.ranking.counterfactual`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rankstream.commands._json_output import add_json_argument, print_report
from rankstream.commands._shared_args import add_skip_bad_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", help="a directory written by `record`")
    parser.add_argument(
        "--model",
        dest="models",
        action="append",
        default=None,
        metavar="NAME[@VERSION]",
        help="a policy to estimate, repeatable: a stored model (its newest version, or a kept "
        "one), `logged`, the order the users saw, or `engine`, the engine's own order from the "
        "engine_scores logged with each impression (default: logged, every stored model with a "
        "scorer, and engine when impressions carry its scores)",
    )
    parser.add_argument(
        "--baseline",
        default="logged",
        metavar="NAME",
        help="differences are each policy minus this one, paired per impression: logged, engine "
        "(on the impressions that carry its scores) or a stored model (default: logged)",
    )
    parser.add_argument("--k", type=int, default=10, help="DCG@k's cut-off")
    parser.add_argument("--level", type=float, default=0.95, help="the intervals' level")
    parser.add_argument(
        "--min-propensity",
        type=float,
        default=None,
        help="propensities are clipped below at this (default: the click join's, 0.1)",
    )
    parser.add_argument(
        "--propensities",
        choices=("auto", "store", "recording"),
        default="auto",
        help="the stored `propensities` model (the click join's estimate), or estimated from "
        "the recording's randomized impressions; auto: the stored one if there is one",
    )
    add_skip_bad_argument(parser)
    add_json_argument(parser)


def print_summary(report: dict[str, Any]) -> None:
    """One line per policy and per difference, then what was used and skipped."""
    for heading, rows in (("policies", report["policies"]), ("differences", report["differences"])):
        for name, found in rows.items():
            if found is None:
                print(f"{name}: no impressions")
                continue
            low_high = found["ips_interval"] or [float("nan")] * 2
            snips = "-" if found["snips"] is None else f"{found['snips']:.4f}"
            print(
                f"{heading[:-1] if heading == 'differences' else 'policy'} {name}: "
                f"IPS {found['ips']:.4f} [{low_high[0]:.4f}, {low_high[1]:.4f}]  SNIPS {snips}"
            )
    for name, found in report["undefined"].items():
        print(f"{name}: undefined on {found['impressions']} impressions ({found['reason']})")
    p = report["propensities"]
    print(
        f"{report['impressions']} impressions, {report['clicks']} clicks; DCG@{report['k']}; "
        f"propensities from {p['source']}; skipped {report['skipped']}",
        file=sys.stderr,
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rankstream.commands._usage import CommandError, UsageError
    from rankstream.commands.model._store import configured_store
    from rankstream.evals.counterfactual_eval import CounterfactualOptions, evaluate_recording
    from rankstream.ranking.click_pairs import DEFAULT_MIN_PROPENSITY
    from rankstream.stream.recording_files import RecordingError, WidthMismatchError
    from rankstream.stream.settings import Settings

    if not Path(args.directory).is_dir():
        raise CommandError(f"no recording at {args.directory}")
    settings = Settings.from_env()
    try:
        options = CounterfactualOptions(
            width=settings.phi_dim,
            window_s=settings.click_window_s,
            grace_s=settings.click_grace_s,
            k=args.k,
            level=args.level,
            min_propensity=(
                DEFAULT_MIN_PROPENSITY if args.min_propensity is None else args.min_propensity
            ),
            propensities=args.propensities,
            baseline=args.baseline,
            skip_bad=args.skip_bad,
        )
        with configured_store() as store:
            report = evaluate_recording(args.directory, store, options, args.models)
    except WidthMismatchError as exc:
        raise CommandError(f"wrong width: {exc}") from exc
    except RecordingError as exc:
        raise CommandError(f"damaged log: {exc} (use --skip-bad to skip and count)") from exc
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return print_report(args, report, print_summary)
