"""Learning from clicks vs learning from judgments, on simulated users (`eval clicks`).

For a collection (`simulators.catalog`), a click model (`simulators.click_models`) and each
seed, `impressions` queries go through the §5.5 loop (`simulators.judged_feedback.run_arms`):
every arm ranks the same query's 300 candidates, shows its top 50, is scored on what it
showed by the true NDCG@50 and NDCG@10 (the collection's grades), and learns:

* Uni-Con, which never learns (the baseline every gain is paired against);
* OPAR-I and AROW learning from judged feedback on their own top 50 (the paper's
  setting: the ceiling of what clicks can give), from Uni-Con's weights;
* and a control: the same judged on the top 3 shown only ("judged@3", `CLICK_DEPTH`),
  judged feedback as deep as cascade users read;
* the click arms, each the product learning from its own users' clicks
  (`evals.click_deployment.ClickDeployment`: the simulated engine serving the learner as
  champion with serve's randomized logging policy, the click join, the online worker, on
  an embedded transport and store, with the product's options): "<learner> ips", the
  join's defaults (its pair set, its IPS weights from its own propensity estimate, its
  clip); "<learner> naive", the same join told `losers skips` and `min_propensity 1`
  (every pair weight 1: naive click pairs); "pdgd", PDGD taught by the join; and
  "pdgd perfect", the same PDGD deployment whose users click perfectly
  (`REFERENCE_MODEL`): the literature's reading of a click model, the same learner under
  the clicks measured and under perfect ones, on the same queries.

The judged arms are simulation (nobody judges in the product); everything that learns
from clicks is the product's code: its pairs, weights, propensity estimate (from the
interventions `RANKSTREAM_INTERVENTION` makes on `intervention_share` of the rankings,
as serve makes them), its scaler handling (the online worker fits each model's scaler on
its first triplets), its start (zero weights; PDGD at the stored Uni-Con) and its
hyper-parameters (the learners' defaults, `ranking.learners`). What the figures say is
what a deployment with these settings does.

Reported per arm (paired with Uni-Con on the same impressions of the same seed):
the NDCG@50 gain over all impressions (the online measure the paper's Fig. 3 plots
cumulatively), and "final": over the last `FINAL_SHARE` of the impressions (where a
learner ends); the JSON defines both (`GAINS`) and names the one the share target reads
(`TARGET_GAIN`). Over seeds: mean, sample std, min, max (`evals.cbir.spread`), and each
arm's final NDCG@10 and NDCG@50 with a bootstrap 95% interval (`bootstrap_mean`). And
the comparisons: per learner family and per gain, the best click arm's gain as a share
of the judged arm's, among the family's own click arms (naive, IPS: "same_family") and
with PDGD beside them ("with_pdgd"); IPS minus naive at the end; the worst click arm's
final gain; per family the judged@3 control's gains as shares of the judged arm's
("judged_at_click_depth"); and "pdgd_against_perfect_clicks": PDGD's final NDCG@10 and
NDCG@50 under these clicks and under perfect ones, and their difference paired by seed.

The propensity estimators alone are measured by `evals.propensities`.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

from rankstream.evals.cbir import spread
from rankstream.evals.click_deployment import ClickDeployment, eval_settings
from rankstream.plots import plot_ndcg
from rankstream.ranking import learners
from rankstream.ranking.baselines import UniCon
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.simulators.catalog import check_name, load_collection
from rankstream.simulators.click_feedback import (
    CLICK_DEPTH,
    DEFAULT_INTERVENTION_SHARE,
    RELEVANCE_GRADES,
)
from rankstream.simulators.click_models import click_model
from rankstream.simulators.judged_feedback import (
    BASELINE,
    CALIBRATION_QUERIES,
    Arm,
    JudgedArm,
    experiment_setup,
    run_arms,
)
from rankstream.telemetry.structured_log import configure_logging
from rankstream.workers.click_join_options import JoinOptions

CLICK_LEARNERS = learners.click_eval_learners()  # OPAR-I, AROW: judged, naive, IPS arms
IMPRESSION_LEARNER = learners.impression_learners()[0]  # PDGD, taught by the join
REFERENCE_MODEL = "perfect"
"""The users of the reference arm "pdgd perfect"."""
NAIVE = {"losers": "skips", "min_propensity": 1.0}
"""The join's options for naive click pairs: a click over the skipped results above and
the next below, every weight 1 (a propensity clipped at 1). "ips" is the join's defaults."""
FINAL_SHARE = 0.1  # "at the end": the last 10% of the impressions
GAINS = {
    "ndcg_gain": "mean over all impressions of (arm's NDCG@50 - Uni-Con's) on the same "
    "impression: what learning cost and gave along the way (the paper's Fig. 3 measure)",
    "final_ndcg_gain": "the same mean over the last final_share of the impressions: "
    "where the arm ends",
}
TARGET_GAIN = "ndcg_gain"
"""The gain the issue's "share of the judged gain" target reads: over all impressions
(the share over the final impressions is reported beside it)."""
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP = (
    "percentile bootstrap of the mean over seeds: the seeds resampled with replacement "
    f"{BOOTSTRAP_RESAMPLES:,} times (generator seed 0), the 2.5% and 97.5% quantiles of "
    "the resampled means; a difference is resampled as its per-seed values (paired)"
)


def judged_arms(scaler: Standardizer, judged: int, seed: int) -> dict[str, Arm]:
    """Per learner in `CLICK_LEARNERS` its judged arm (the ceiling, "<learner> judged")
    and the control judged on the top `CLICK_DEPTH` shown ("<learner> judged@3"), both
    from Uni-Con's weights with the learner's defaults. The judged arm's judge draws
    from child 3i of the seed's stream [seed, 2], the control's from child i of
    [seed, 3] (the streams they had beside the click arms, so their figures stand)."""
    start = UniCon(scaler=scaler).weights_
    judges = np.random.SeedSequence([seed, 2]).spawn(3 * len(CLICK_LEARNERS))
    controls = np.random.SeedSequence([seed, 3]).spawn(len(CLICK_LEARNERS))
    arms: dict[str, Arm] = {}
    for i, algo in enumerate(CLICK_LEARNERS):
        for name, depth, stream in (
            (f"{algo} judged", judged, judges[3 * i]),
            (f"{algo} judged@{CLICK_DEPTH}", CLICK_DEPTH, controls[i]),
        ):
            ranker = OnlineRanker(algo=algo, scaler=scaler, warm_start=start)
            arms[name] = JudgedArm(ranker, depth, np.random.default_rng(stream))
    return arms


def click_deployments(
    model: str, seed: int, impressions: int, intervention_share: float, served: Any
) -> dict[str, ClickDeployment]:
    """The click arms (module docstring), each the product on its own transport and store."""
    settings = eval_settings(intervention_share)
    common = {
        "collection": served.collection,
        "index": served.index,
        "seed": seed,
        "impressions": impressions,
        "settings": settings,
    }
    feedback = f"clicks:{model}"
    arms: dict[str, ClickDeployment] = {}
    for algo in CLICK_LEARNERS:
        naive = JoinOptions(**NAIVE)  # type: ignore[arg-type]
        arms[f"{algo} naive"] = ClickDeployment(algo, feedback, join=naive, **common)
        arms[f"{algo} ips"] = ClickDeployment(algo, feedback, join=JoinOptions(), **common)
    arms[IMPRESSION_LEARNER] = ClickDeployment(IMPRESSION_LEARNER, feedback, **common)
    reference = f"clicks:{REFERENCE_MODEL}"
    arms[f"{IMPRESSION_LEARNER} {REFERENCE_MODEL}"] = ClickDeployment(
        IMPRESSION_LEARNER, reference, **common
    )
    return arms


def run_clicks(
    collection: str,
    seed: int,
    model: str,
    cache_dir: str | os.PathLike,
    impressions: int,
    progress: bool = False,
    options: Mapping[str, Any] | None = None,
    intervention_share: float = DEFAULT_INTERVENTION_SHARE,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One collection, click model and seed: (the run's JSON, per-impression NDCG@50)."""
    configure_logging("WARNING")  # the workers log every checkpoint at INFO
    served = load_collection(check_name(collection), cache_dir, progress, **(options or {}))
    sim, scaler, arms = experiment_setup(served.collection, seed, served.index, CALIBRATION_QUERIES)
    judged = judged_arms(scaler, sim.n_judged, seed)
    deployed = click_deployments(model, seed, impressions, intervention_share, served)
    arms.update({**judged, **deployed})
    arms = {BASELINE: arms[BASELINE], **{name: arms[name] for name in _arm_order(arms)}}
    label = f"{collection}, {model}, seed {seed}" if progress else False
    try:
        scores = run_arms(sim, arms, impressions, label)
    finally:
        for deployment in deployed.values():
            deployment.close()
    ndcg, ndcg10 = scores["ndcg"], scores["ndcg10"]
    tail = max(1, round(impressions * FINAL_SHARE))
    base, base10 = ndcg[BASELINE], ndcg10[BASELINE]
    run = {
        "collection": collection,
        "images": served.collection.n_images,
        "click_model": model,
        "reference_click_model": REFERENCE_MODEL,
        "seed": seed,
        "impressions": impressions,
        "intervention_share": intervention_share,
        "uni_con": {
            "ndcg_at_50": float(base.mean()),
            "final_ndcg_at_50": float(base[-tail:].mean()),
            "ndcg_at_10": float(base10.mean()),
            "final_ndcg_at_10": float(base10[-tail:].mean()),
        },
        "arms": {
            name: {
                "ndcg_at_50": float(values.mean()),
                "ndcg_gain": float((values - base).mean()),
                "final_ndcg_at_50": float(values[-tail:].mean()),
                "final_ndcg_gain": float((values[-tail:] - base[-tail:]).mean()),
                "ndcg_at_10": float(ndcg10[name].mean()),
                "final_ndcg_at_10": float(ndcg10[name][-tail:].mean()),
            }
            for name, values in ndcg.items()
            if name != BASELINE
        },
        "product": {name: d.summary() for name, d in deployed.items()},
    }
    return run, ndcg


def _arm_order(arms: Mapping[str, Any]) -> list[str]:
    """Per learner its judged, judged@3, naive and IPS arms, then PDGD and its reference."""
    names = [
        f"{algo} {kind}"
        for algo in CLICK_LEARNERS
        for kind in ("judged", f"judged@{CLICK_DEPTH}", "naive", "ips")
    ]
    names += [IMPRESSION_LEARNER, f"{IMPRESSION_LEARNER} {REFERENCE_MODEL}"]
    return [n for n in names if n in arms]


def _family(name: str) -> tuple[str, str]:
    """("opar1", "ips") from "opar1 ips"; ("pdgd", "clicks") for PDGD."""
    learner, _, feedback = name.partition(" ")
    return learner, feedback or "clicks"


def bootstrap_mean(values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES) -> dict[str, Any]:
    """The mean of `values` (one per seed) and its 95% interval (`BOOTSTRAP`); one value
    has no interval (None)."""
    array = np.asarray(values, dtype=np.float64)
    cell: dict[str, Any] = {"mean": float(array.mean()), "seeds": int(array.size)}
    if array.size < 2:
        return cell | {"low": None, "high": None}
    rng = np.random.default_rng(0)
    means = array[rng.integers(0, array.size, (resamples, array.size))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return cell | {"low": float(low), "high": float(high)}


def against_perfect_clicks(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """PDGD's final NDCG@10 and NDCG@50 under the run's clicks and under perfect ones,
    and the difference paired by seed (same queries), each with its bootstrap interval."""
    measured, reference = IMPRESSION_LEARNER, f"{IMPRESSION_LEARNER} {REFERENCE_MODEL}"
    found: dict[str, Any] = {"arms": [measured, reference], "over": "final_share"}
    for key, label in (("final_ndcg_at_10", "ndcg_at_10"), ("final_ndcg_at_50", "ndcg_at_50")):
        ours = [run["arms"][measured][key] for run in runs]
        theirs = [run["arms"][reference][key] for run in runs]
        found[label] = {
            measured: bootstrap_mean(ours),
            reference: bootstrap_mean(theirs),
            "difference": bootstrap_mean([a - b for a, b in zip(ours, theirs, strict=True)]),
        }
    return found


def summarise(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per arm the gains over seeds, and the issue's comparisons (module docstring)."""
    names = list(runs[0]["arms"])

    def values(name: str, key: str) -> list[float]:
        return [run["arms"][name][key] for run in runs]

    arms = {
        name: {key: spread(values(name, key)) for key in ("ndcg_gain", "final_ndcg_gain")}
        | {
            key: bootstrap_mean(values(name, key))
            for key in ("final_ndcg_at_10", "final_ndcg_at_50")
        }
        for name in names
    }
    reference = f"{IMPRESSION_LEARNER} {REFERENCE_MODEL}"
    click_arms_ = [n for n in names if not _family(n)[1].startswith("judged") and n != reference]
    families: dict[str, Any] = {}
    for learner in CLICK_LEARNERS:
        judged = arms[f"{learner} judged"]
        same_family = [f"{learner} naive", f"{learner} ips"]
        ips_minus_naive = [
            ips - naive
            for ips, naive in zip(
                values(f"{learner} ips", "final_ndcg_gain"),
                values(f"{learner} naive", "final_ndcg_gain"),
                strict=True,
            )
        ]
        families[learner] = {
            key: {
                "same_family": _share(arms, judged, same_family, key),
                "with_pdgd": _share(arms, judged, [*same_family, IMPRESSION_LEARNER], key),
            }
            for key in GAINS
        } | {"final_ips_minus_naive": spread(ips_minus_naive)}
        control = f"{learner} judged@{CLICK_DEPTH}"
        if control in arms:
            families[learner]["judged_at_click_depth"] = {
                "arm": control,
                **{key: _share(arms, judged, [control], key) for key in GAINS},
            }
    worst = min(click_arms_, key=lambda n: arms[n]["final_ndcg_gain"]["mean"])
    return {
        "seeds": [run["seed"] for run in runs],
        "gains": GAINS,
        "target_reads": TARGET_GAIN,
        "bootstrap": BOOTSTRAP,
        "uni_con": {
            key: spread([run["uni_con"][key] for run in runs])
            for key in ("ndcg_at_50", "final_ndcg_at_50", "ndcg_at_10", "final_ndcg_at_10")
        },
        "arms": arms,
        "families": families,
        "worst_click_arm_final": {"arm": worst, **arms[worst]["final_ndcg_gain"]},
        "pdgd_against_perfect_clicks": against_perfect_clicks(runs),
    }


def _share(
    arms: Mapping[str, Any], judged: Mapping[str, Any], candidates: list[str], key: str
) -> dict[str, Any]:
    """The best of `candidates` by the mean gain `key`, and its share of the judged arm's
    (None when judged feedback gained nothing: a ratio to a loss reads backwards)."""
    best = max(candidates, key=lambda n: arms[n][key]["mean"])
    judged_gain, gain = judged[key]["mean"], arms[best][key]["mean"]
    return {
        "judged_gain": judged_gain,
        "best_click_arm": best,
        "best_click_gain": gain,
        "best_click_share_of_judged_gain": gain / judged_gain if judged_gain > 0 else None,
    }


def evaluate_clicks(
    collection: str,
    model: str,
    seeds: Sequence[int],
    cache_dir: str | os.PathLike,
    impressions: int = 20_000,
    progress: bool = False,
    options: Mapping[str, Any] | None = None,
    plot_path: str | Path | None = None,
    jobs: int = 1,
    intervention_share: float = DEFAULT_INTERVENTION_SHARE,
) -> dict[str, Any]:
    """Every seed (module docstring); JSON-ready, with the plot's path when drawn.
    `intervention_share`: the share of rankings serve randomizes
    (`RANKSTREAM_INTERVENTION_SHARE` of the deployments; 0 leaves the join's estimate at
    its prior).

    `jobs` > 1 runs that many seeds at once in worker processes (spawned); a seed's run
    is the same either way (its own generators), only the progress bars go."""
    if not seeds:
        raise ValueError("need at least one seed")
    if impressions < 10:
        raise ValueError(f"impressions must be >= 10, got {impressions}")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    click_model(model, RELEVANCE_GRADES)  # refuse an unknown model before loading anything
    eval_settings(intervention_share)  # and a share that is not one
    args = [(collection, seed, model, cache_dir, impressions) for seed in seeds]
    if jobs > 1 and len(seeds) > 1:
        context = multiprocessing.get_context("spawn")  # no fork of a threaded parent
        with ProcessPoolExecutor(min(jobs, len(seeds)), mp_context=context) as pool:
            done = list(
                pool.map(
                    run_clicks,
                    *zip(*args, strict=True),
                    repeat(False),
                    repeat(options),
                    repeat(intervention_share),
                )
            )
    else:
        done = [run_clicks(*a, progress, options, intervention_share) for a in args]
    runs = [run for run, _ in done]
    curves = [ndcg for _, ndcg in done]
    result: dict[str, Any] = {
        "collection": collection,
        "click_model": model,
        "impressions": impressions,
        "final_share": FINAL_SHARE,
        "intervention_share": intervention_share,
        "runs": runs,
        "summary": summarise(runs),
    }
    if plot_path is not None:
        result["plot"] = str(plot_curves(curves, model, collection, plot_path))
    return result


def plot_curves(
    curves: Sequence[Mapping[str, np.ndarray]], model: str, collection: str, path: str | Path
) -> Path:
    """Learning curves (`plots.plot_ndcg`) of the per-impression NDCG@50, mean over seeds."""
    mean = {name: np.mean([c[name] for c in curves], axis=0) for name in curves[0]}
    title = f"Learning from {model} clicks on {collection} (NDCG@50, mean of {len(curves)} seeds)"
    return plot_ndcg(mean, path, title=title)
