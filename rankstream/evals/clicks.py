"""Learning from clicks vs learning from judgments, on simulated users (`eval clicks`).

For a collection (`simulators.catalog`), a click model (`simulators.clicks`) and each
seed, `impressions` queries go through the §5.5 loop (`simulators.feedback.run_arms`),
in process, no Kafka: every arm ranks the same query's 300 candidates, shows its top 50,
is scored on what it showed by the true NDCG@50 (the collection's grades), and learns
(`simulators.click_feedback`):

* Uni-Con, which never learns (the baseline every gain is paired against);
* OPAR-I and AROW learning from judged feedback on their own top 50 (the paper's
  setting: the ceiling of what clicks can give);
* the same learners on naive click pairs, and on IPS-weighted pairs of each click with
  every other shown result (Propensity SVM-Rank's pairs) whose propensities their own
  randomized interventions estimate online;
* PDGD, serving Plackett-Luce samples;
* and a control: OPAR-I and AROW judged on the top 3 shown only ("judged@3",
  `click_feedback.CLICK_DEPTH`), judged feedback as deep as cascade users read.

Every learner, judged or not, starts from Uni-Con's direction (`click_arms`): the click
pair arms at the hinge margin's scale (`click_feedback.margin_scale`, fitted on the same
calibration queries as the scaler), the others at Uni-Con's own.

Reported per arm (paired with Uni-Con on the same impressions of the same seed):
the NDCG@50 gain over all impressions (the online measure the paper's Fig. 3 plots
cumulatively), and "final": over the last `FINAL_SHARE` of the impressions (where a
learner ends); the JSON defines both (`GAINS`) and names the one the share target reads
(`TARGET_GAIN`). Over seeds: mean, sample std, min, max (`evals.cbir.spread`). And the
issue's comparisons: per learner family and per gain, the best click arm's gain as a
share of the judged arm's, among the family's own click arms (naive, IPS: "same_family",
the target's reading) and with PDGD beside them ("with_pdgd": PDGD has no judged form);
IPS minus naive at the end; the worst click arm's final gain; and per family the
judged@3 control's gains as shares of the judged arm's ("judged_at_click_depth").

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
from rankstream.plots import plot_ndcg
from rankstream.ranking import learners
from rankstream.simulators.catalog import check_name, load_collection
from rankstream.simulators.click_feedback import (
    CLICK_DEPTH,
    DEFAULT_DISPLAY,
    RELEVANCE_GRADES,
    click_arms,
    margin_scale,
)
from rankstream.simulators.clicks import click_model
from rankstream.simulators.feedback import BASELINE, CALIBRATION_QUERIES, experiment_setup, run_arms

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


def run_clicks(
    collection: str,
    seed: int,
    model: str,
    cache_dir: str | os.PathLike,
    impressions: int,
    progress: bool = False,
    options: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One collection, click model and seed: (the run's JSON, per-impression NDCG@50)."""
    served = load_collection(check_name(collection), cache_dir, progress, **(options or {}))
    users = click_model(model, RELEVANCE_GRADES)
    sim, scaler, arms = experiment_setup(served.collection, seed, served.index, CALIBRATION_QUERIES)
    calibration = sim.calibration_phi(CALIBRATION_QUERIES)
    per_query = calibration.reshape(-1, sim.n_candidates, calibration.shape[1])
    scale = margin_scale(per_query, scaler, DEFAULT_DISPLAY)
    arms.update(
        click_arms(
            tuple(learners.click_hyperparameters()), users, scaler, sim.n_judged, seed, scale
        )
    )
    label = f"{collection}, {model}, seed {seed}" if progress else False
    ndcg = run_arms(sim, arms, impressions, label)["ndcg"]
    tail = max(1, round(impressions * FINAL_SHARE))
    base = ndcg[BASELINE]
    run = {
        "collection": collection,
        "images": served.collection.n_images,
        "click_model": model,
        "seed": seed,
        "impressions": impressions,
        "click_scale": scale,
        "uni_con": {
            "ndcg_at_50": float(base.mean()),
            "final_ndcg_at_50": float(base[-tail:].mean()),
        },
        "arms": {
            name: {
                "ndcg_at_50": float(values.mean()),
                "ndcg_gain": float((values - base).mean()),
                "final_ndcg_at_50": float(values[-tail:].mean()),
                "final_ndcg_gain": float((values[-tail:] - base[-tail:]).mean()),
            }
            for name, values in ndcg.items()
            if name != BASELINE
        },
    }
    return run, ndcg


def _family(name: str) -> tuple[str, str]:
    """("opar1", "ips") from "opar1 ips"; ("pdgd", "clicks") for PDGD."""
    learner, _, feedback = name.partition(" ")
    return learner, feedback or "clicks"


def summarise(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per arm the gains over seeds, and the issue's comparisons (module docstring)."""
    names = list(runs[0]["arms"])

    def values(name: str, key: str) -> list[float]:
        return [run["arms"][name][key] for run in runs]

    arms = {
        name: {key: spread(values(name, key)) for key in ("ndcg_gain", "final_ndcg_gain")}
        for name in names
    }
    click_arms_ = [n for n in names if not _family(n)[1].startswith("judged")]
    families: dict[str, Any] = {}
    for learner in learners.click_hyperparameters():
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
                "with_pdgd": _share(arms, judged, [*same_family, "pdgd"], key),
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
        "uni_con": {
            key: spread([run["uni_con"][key] for run in runs])
            for key in ("ndcg_at_50", "final_ndcg_at_50")
        },
        "arms": arms,
        "families": families,
        "worst_click_arm_final": {"arm": worst, **arms[worst]["final_ndcg_gain"]},
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
) -> dict[str, Any]:
    """Every seed (module docstring); JSON-ready, with the plot's path when drawn.

    `jobs` > 1 runs that many seeds at once in worker processes (spawned); a seed's run
    is the same either way (its own generators), only the progress bars go."""
    if not seeds:
        raise ValueError("need at least one seed")
    if impressions < 10:
        raise ValueError(f"impressions must be >= 10, got {impressions}")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    click_model(model, RELEVANCE_GRADES)  # refuse an unknown model before loading anything
    args = [(collection, seed, model, cache_dir, impressions) for seed in seeds]
    if jobs > 1 and len(seeds) > 1:
        context = multiprocessing.get_context("spawn")  # no fork of a threaded parent
        with ProcessPoolExecutor(min(jobs, len(seeds)), mp_context=context) as pool:
            done = list(
                pool.map(run_clicks, *zip(*args, strict=True), repeat(False), repeat(options))
            )
    else:
        done = [run_clicks(*a, progress, options) for a in args]
    runs = [run for run, _ in done]
    curves = [ndcg for _, ndcg in done]
    result: dict[str, Any] = {
        "collection": collection,
        "click_model": model,
        "impressions": impressions,
        "final_share": FINAL_SHARE,
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
