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
(`selection.pins`) are not models and are left out; the model they pin says `pinned: true`.
The engine's own ranking (`selection.engine_ranking`: kind "engine", one version, it
learns nothing) is listed once it has arrived, servable (for requests carrying its
scores), `pinned` while the kill switch holds it, with its races and rolling scores like
any model.
"""

from __future__ import annotations

from typing import Any

from rankstream.selection.engine_ranking import ENGINE
from rankstream.selection.pins import is_pin_record
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
    }


def models_listing(snapshot: Snapshot) -> dict[str, Any]:
    names = sorted(n for n in snapshot.stored if not is_pin_record(n))
    return {
        "champion": snapshot.champion,
        "window": snapshot.scores.get("window"),
        "queries_evaluated": snapshot.scores.get("queries_evaluated", 0),
        "race": _settings(snapshot.scores.get("race", {})),
        "interleaving": _settings(snapshot.scores.get("interleaving", {})),
        "champion_decision": snapshot.scores.get("champion_decision"),
        "models": [model_entry(snapshot, name) for name in names],
    }


def _settings(race: dict[str, Any]) -> dict[str, Any]:
    """A race's incumbent and test settings, without its per-challenger entries."""
    return {k: v for k, v in race.items() if k != "challengers"}
