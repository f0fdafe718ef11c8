"""The engine's own ranking as a model named `engine`: scored by the request, not stored.

An engine that already ranks sends its own scores with a query (`engine_scores`, one
number per candidate, higher first; an engine with only an order sends e.g. -position):
the engine's order is those scores sorted from high to low, ties in the request's order
(`selection.scoring.served_order`, a stable sort). That order is a model like any other
for serving, the races and the estimates, except that it lives in the request: its
`EngineScorer` returns the request's scores, and it learns nothing (it has no versions).

The store holds one record `engine` (kind "engine", `ENGINE_KIND`; no scorer is
registered for the kind, so nothing tries to rebuild it), written once, by the first
ranking request that carries engine_scores (`adopt_engine`). It is what lists the
engine in `GET /v1/models`, what `rankstream model pin engine 1` pins (the kill switch,
`selection.what_serves`), and the marker that the engine has arrived: its arrival makes
the engine the champion (the record `champion`, decided_by "engine", compare-and-set on
the champion then), since no learned model has yet been shown to beat *it*; from then on
only the races move the champion (`selection.judged_race`, `selection.click_race`), and
a later request with engine_scores does not re-adopt it.

Racing it. While the engine is the champion, serve interleaves challengers with its order
(the click race) and the evaluator pairs every model with it on feedback carrying its
scores (the judged race); the champion leaves the engine only when a challenger's
switch test says so. The guardrail: while a learned model is the champion, the engine is
one of its challengers on every request that carries engine_scores, raced by the same
test; if it wins, serving goes back to it, the switch's evidence marked `guardrail: true`
(`guardrail_evidence`) and logged as a warning. A refused engine (not delta better than
the champion) is not drafted, like any refused challenger; since the engine never
changes, its race re-opens when the *champion* has learned `REOPEN_FACTOR` times what it
had at the refusal (the click join; its refusal records the champion's version and count).
The kill switch, the engine pinned, answers with the engine's order at once
(`selection.what_serves`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from rankstream.ranking.baselines import UNI_CON
from rankstream.selection.judged_race import publish_champion, stored_champion
from rankstream.stream.store import Fence, FencingError, ModelStore, fenced_save
from rankstream.telemetry.structured_log import get_logger, log_event

ENGINE = ENGINE_KIND = "engine"  # the model name and the store record's kind
ENGINE_ARRIVED = "engine"  # the champion record's decided_by when the engine arrived
ENGINE_VERSION = 1  # the engine learns nothing: its one version (the record's first)

log = get_logger("rankstream.engine")


class EngineScorer:
    """The engine's scores of one request's candidates as a `selection.scoring.Scorer`:
    `score(phi)` returns them whatever the phi (its rows only checked for number)."""

    plackett_luce = False  # shown as ranked

    def __init__(self, scores: np.ndarray) -> None:
        self.scores = np.asarray(scores, dtype=np.float64)

    def score(self, phi: np.ndarray) -> np.ndarray:
        if np.shape(phi)[0] != self.scores.shape[0]:
            raise ValueError(
                f"the engine scored {self.scores.shape[0]} candidates, not {np.shape(phi)[0]}"
            )
        return self.scores


def engine_order(scores: np.ndarray) -> np.ndarray:
    """The engine's order: indices of `scores` from high to low, ties in the given order."""
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")


def adopt_engine(store: ModelStore, source: str) -> bool:
    """The engine's arrival (module docstring): store its record and make it the champion
    (compare-and-set on the champion now). False when the record was there already (or a
    concurrent server stored it first): the engine has arrived before, nothing changes."""
    if store.load(ENGINE) is not None:
        return False
    meta = {"arrived": time.time(), "source": source, "learns": False}
    try:
        fenced_save(store, ENGINE, Fence(), kind=ENGINE_KIND, meta=meta, arrays={}, offsets={})
    except FencingError:
        return False  # another server adopted it first
    previous = stored_champion(store) or UNI_CON
    champion, landed = publish_champion(
        store, ENGINE, previous=previous, decided_by=ENGINE_ARRIVED,
        evidence={"reason": "the engine's first ranking request with engine_scores"},
    )  # fmt: skip
    log_event(log, "engine arrived", level=logging.INFO, previous=previous,
              champion=champion, landed=landed, source=source)  # fmt: skip
    return True


def guardrail_evidence(
    incumbent: str, challenger: str, evidence: dict[str, Any], decided_by: str
) -> dict[str, Any]:
    """A race's switch `evidence`, marked and logged as the guardrail when the engine won
    it back from a learned champion (`docs/concepts/champion.md`, "The engine as the
    incumbent"): `guardrail: true` in the champion record, and a warning naming both."""
    if challenger != ENGINE or incumbent == ENGINE:
        return evidence
    log_event(log, "guardrail: the engine beat the champion; serving goes back to the engine",
              level=logging.WARNING, champion=incumbent, decided_by=decided_by,
              **{k: v for k, v in evidence.items() if k != "challenger"})  # fmt: skip
    return {**evidence, "guardrail": True}
