"""What GET /v1/models tells about each stored model, read from one registry snapshot.

Each entry: name, kind, newest stored version, the version served by default (the pin
when pinned), triplets seen by that version, and the evaluator's rolling NDCG@50 / MAP
and how many judged queries they cover (a trend), and for each challenger its race
against the champion (`selection.judged_race`): paired queries, mean NDCG@50 difference with
its always-valid confidence interval, the test's statistic and its decision; beside it
`interleaving`, its race on click traffic (`selection.click_race`: impressions, wins,
losses, ties, statistic, threshold, decision, and `refused`: the version it was refused
at while it is not drafted), published by the click join. `collapsed` (true/false) flags a
model whose click race put it far below the champion (`selection.click_race`: refused,
and its mean preference margin at or below -0.2): it is not drafted, and it
stays in the store for the operator to look at, not silently kept serving. Pin records
(`selection.pins`) and the workers' own records (the champion, the evaluator's scores, the
races' evidence, the join's state and estimates, reservoirs: any kind no scorer reads) are
not models and are left out; the model they pin says `pinned: true`.
The engine's own ranking (`selection.engine_ranking`: kind "engine", one version, it
learns nothing) is listed once it has arrived, servable (for requests carrying its
scores), `pinned` while the kill switch holds it, with its races and rolling scores like
any model. `counterfactual` is its live counterfactual click-DCG@10 from the logged
impressions and their clicks (`selection.live_estimates`, published by the click join):
IPS and SNIPS with 95% intervals, the impressions and versions it covers, and its paired
differences `vs_logged` (from the order users saw) and `vs_engine` (from the engine's
order, on the impressions that carry it); null before the join has estimated it. The
listing's `counterfactual` holds the estimator's settings and the logged order's own.
"""

from __future__ import annotations

from typing import Any

from rankstream.selection.engine_ranking import ENGINE
from rankstream.selection.live_estimates import LOGGED
from rankstream.selection.scoring import SCORERS
from rankstream.serve.registry import Snapshot


def model_entry(snapshot: Snapshot, name: str) -> dict[str, Any]:
    scores = snapshot.scores
    loaded = snapshot.models.get(name)
    race = scores.get("interleaving", {}).get("challengers", {}).get(name)
    engine = name == ENGINE  # served from the request's engine_scores, never loaded
    return {
        "name": name,
        "kind": snapshot.kinds.get(name),
        "version": snapshot.stored.get(name),
        "servable": loaded is not None or engine,
        "served_version": snapshot.stored.get(name)
        if engine
        else (None if loaded is None else loaded.version),
        "pinned": snapshot.engine_pinned if engine else loaded is not None and loaded.pinned,
        "champion": name == snapshot.champion,
        "triplets_seen": None if loaded is None else loaded.triplets_seen,
        "rolling_ndcg_at_50": scores.get("rolling_ndcg", {}).get(name),
        "rolling_map": scores.get("rolling_map", {}).get(name),
        "scored_queries": scores.get("counts", {}).get(name),
        "race": scores.get("race", {}).get("challengers", {}).get(name),
        "interleaving": race,
        "collapsed": bool(race and race.get("collapsed")),
        "counterfactual": _estimate(scores.get("counterfactual", {}), name),
    }


def models_listing(snapshot: Snapshot) -> dict[str, Any]:
    names = sorted(n for n in snapshot.stored if is_model(snapshot, n))
    return {
        "champion": snapshot.champion,
        "window": snapshot.scores.get("window"),
        "queries_evaluated": snapshot.scores.get("queries_evaluated", 0),
        "race": _settings(snapshot.scores.get("race", {})),
        "interleaving": _settings(snapshot.scores.get("interleaving", {})),
        "champion_decision": snapshot.scores.get("champion_decision"),
        "counterfactual": _estimator(snapshot.scores.get("counterfactual", {})),
        "models": [model_entry(snapshot, name) for name in names],
    }


def is_model(snapshot: Snapshot, name: str) -> bool:
    """A stored name that ranks: its kind has a scorer (servable or not at this width), or
    it is the engine's own ranking."""
    return name == ENGINE or snapshot.kinds.get(name) in SCORERS


def _settings(race: dict[str, Any]) -> dict[str, Any]:
    """A race's incumbent and test settings, without its per-challenger entries."""
    return {k: v for k, v in race.items() if k != "challengers"}


def _estimate(estimates: dict[str, Any], name: str) -> dict[str, Any] | None:
    """A policy's live estimate and its paired differences from logged and the engine."""
    found = estimates.get("policies", {}).get(name)
    if found is None:
        return None
    differences = estimates.get("differences", {})
    return {
        **found,
        "vs_logged": differences.get(f"{name} - {LOGGED}"),
        "vs_engine": differences.get(f"{name} - {ENGINE}"),
    }


def _estimator(estimates: dict[str, Any]) -> dict[str, Any]:
    """The estimator's settings and the logged order's estimate (the baseline)."""
    return {
        **{k: v for k, v in estimates.items() if k not in ("policies", "differences")},
        LOGGED: estimates.get("policies", {}).get(LOGGED),
    }
