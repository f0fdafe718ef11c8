"""Counterfactual click-DCG@k of stored models over a recording (`eval counterfactual`).

A recording's impressions and clicks (`rankstream record`) are joined as the click join
joins them, by its own window (`stream.click_window.ClickWindow`, the deployment's
RANKSTREAM_CLICK_WINDOW_SECONDS and _GRACE_SECONDS): a click after its impression's window
or after its session-over row is `late`, one naming an impression the recording does not
hold is `unknown_impression`, one on a candidate its impression did not show is
`unknown_candidate`; each is skipped and counted by its reason. The two streams are fed to
the window merged by event time (an impression's time, a click's time or its message's
timestamp), impressions first on a tie, and every session is closed at the end.

Each joined impression is then reranked by every policy under evaluation: `logged` (the
order the users saw) or a stored model (`name` for its newest version, `name@version` for
a kept one) scoring the impression's phi (`selection.scoring`: the scorer serve uses; a
Plackett-Luce model's deterministic ranking by its scores, not its sampled one), and
`ranking.counterfactual` gives its IPS and SNIPS click-DCG@k with intervals, and each
policy's paired difference from a baseline.

Propensities: the stored `propensities` model (what the click join estimated and
published), or estimated from the recording's own randomized impressions by a
`PropensityEstimator` with the join's defaults (a first pass over the recording); `auto`
takes the stored one when the store has it.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rankstream.ranking.click_pairs import DEFAULT_MIN_PROPENSITY
from rankstream.ranking.counterfactual import (
    DEFAULT_K,
    DEFAULT_LEVEL,
    Terms,
    difference,
    estimate,
    policy_terms,
    rerank,
)
from rankstream.ranking.propensity import PropensityEstimator
from rankstream.selection.live_estimates import LOGGED  # the logged order's one name
from rankstream.selection.scoring import Scorer, scorer_for
from rankstream.stream.click_schema import decode_clicks, decode_impressions
from rankstream.stream.click_window import ClickWindow, Closed, PendingClick
from rankstream.stream.recording_reader import ReadCounts, iter_messages
from rankstream.stream.store import ModelStore
from rankstream.workers.click_join import PROPENSITIES_MODEL  # the join's published estimate
from rankstream.workers.click_join_options import JoinOptions

PROPENSITY_SOURCES = ("auto", "store", "recording")
_CHUNK = 4096  # sessions reranked per policy_terms call


@dataclass
class Skipped:
    """What was left out, by stream and reason."""

    clicks: Counter = field(default_factory=Counter)
    impressions: Counter = field(default_factory=Counter)

    def as_dict(self, reads: dict[str, ReadCounts]) -> dict[str, Any]:
        damaged = {
            kind: {"bad_rows": counts.bad_rows, "bad_files": counts.bad_files}
            for kind, counts in reads.items()
        }
        return {
            "clicks": dict(sorted(self.clicks.items())),
            "impressions": dict(sorted(self.impressions.items())),
            "damaged": damaged,
        }


def _events(directory: Path | str, width: int, skip_bad: bool, skipped: Skipped, reads: dict):
    """The recording's impressions and clicks merged by event time (impressions first)."""

    def impressions() -> Iterator[tuple]:
        for m in iter_messages(
            directory, "impressions", width=width, skip_bad=skip_bad, counts=reads["impressions"]
        ):
            decoded = decode_impressions(m.value, width=width)
            for _, reason, _ in decoded.rejects:
                skipped.impressions[reason] += 1
            for row, impression in enumerate(decoded.records):
                source = (m.topic, m.partition, m.offset, row)
                yield (impression.time, 0, impression, source)

    def clicks() -> Iterator[tuple]:
        for m in iter_messages(
            directory, "clicks", width=width, skip_bad=skip_bad, counts=reads["clicks"]
        ):
            decoded = decode_clicks(m.value)
            for _, reason, _ in decoded.rejects:
                skipped.clicks[reason] += 1
            for row, click in enumerate(decoded.records):
                at = click.time if click.time is not None else m.timestamp_ms / 1000.0
                pending = PendingClick(
                    click.candidate_id, at, (m.topic, m.partition, m.offset, row)
                )
                yield (at, 1, click.impression_id, pending)

    order = itertools.count()  # ties keep each stream's own order
    merged = heapq.merge(
        ((t, kind, next(order), a, b) for t, kind, a, b in impressions()),
        ((t, kind, next(order), a, b) for t, kind, a, b in clicks()),
    )
    yield from ((kind, a, b) for _, kind, _, a, b in merged)


def joined_sessions(
    directory: Path | str,
    width: int,
    window_s: float,
    grace_s: float,
    skipped: Skipped,
    reads: dict[str, ReadCounts],
    skip_bad: bool = False,
) -> Iterator[Closed]:
    """The recording's sessions as the click join closes them (module docstring); what
    cannot join is counted in `skipped` by reason."""
    window = ClickWindow(window_s, grace_s)

    def refused(rejected: Sequence) -> None:
        for r in rejected:
            skipped.clicks[r.reason] += 1

    for kind, first, second in _events(directory, width, skip_bad, skipped, reads):
        if kind == 0:
            if window.knows(first.impression_id):
                skipped.impressions["duplicate_impression"] += 1
                continue
            refused(window.add_impression(first, second))
        else:
            refused(window.add_click(first, second))
        refused(window.unknown())
        for closed in window.ready():
            refused(closed.rejects)
            yield closed
    refused(window.close_all())
    for closed in window.ready():
        refused(closed.rejects)
        yield closed


@dataclass(frozen=True)
class Policy:
    """A ranking under evaluation: `logged`, or a stored model's version as a scorer."""

    name: str
    scorer: Scorer | None  # None: the logged order

    def ranks(self, phi: np.ndarray) -> np.ndarray:
        if self.scorer is None:
            return np.arange(phi.shape[0], dtype=np.int64)
        return rerank(self.scorer.score(phi))


def resolve_policies(
    store: ModelStore, names: Sequence[str] | None, width: int
) -> tuple[list[Policy], dict[str, str]]:
    """The policies named (`logged`, `name`, `name@version`), or without names `logged`
    and every stored model's newest version that has a scorer; and the stored models left
    out, with why. A named model that is missing or cannot score raises ValueError."""
    if names:
        policies = []
        for name in names:
            if name == LOGGED:
                policies.append(Policy(LOGGED, None))
                continue
            model, _, version = name.partition("@")
            if version and not version.isdigit():
                raise ValueError(f"{name!r}: a version is a number (name@3)")
            stored = store.load_version(model, int(version)) if version else store.load(model)
            if stored is None:
                raise ValueError(f"no stored model {name}")
            policies.append(Policy(f"{model}@{stored.version}", scorer_for(stored, width)))
        return policies, {}
    policies, left_out = [Policy(LOGGED, None)], {}
    for model in sorted(store.latest_versions()):
        stored = store.load(model)
        if stored is None:
            continue
        try:
            policies.append(Policy(f"{model}@{stored.version}", scorer_for(stored, width)))
        except ValueError as exc:
            left_out[model] = str(exc)
    return policies, left_out


def stored_propensities(store: ModelStore) -> PropensityEstimator | None:
    """The click join's published estimate (its counts), or None if the store has none."""
    stored = store.load(PROPENSITIES_MODEL)
    if stored is None or "estimator" not in stored.meta:
        return None
    return PropensityEstimator.from_state(stored.meta["estimator"])


@dataclass(frozen=True)
class CounterfactualOptions:
    """How to join, what to estimate, and from which propensities."""

    width: int
    window_s: float
    grace_s: float
    k: int = DEFAULT_K
    level: float = DEFAULT_LEVEL
    min_propensity: float = DEFAULT_MIN_PROPENSITY
    propensities: str = "auto"
    baseline: str = LOGGED
    skip_bad: bool = False

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if not 0 < self.level < 1:
            raise ValueError(f"level must lie in (0, 1), got {self.level}")
        if not 0 < self.min_propensity <= 1:
            raise ValueError(f"min_propensity must lie in (0, 1], got {self.min_propensity}")
        if self.propensities not in PROPENSITY_SOURCES:
            raise ValueError(f"propensities must be one of {PROPENSITY_SOURCES}")


def evaluate_recording(
    directory: Path | str,
    store: ModelStore,
    options: CounterfactualOptions,
    models: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Every policy's estimate over the recording, their differences from the baseline,
    the propensities used and what was skipped (one JSON-able dict)."""
    policies, left_out = resolve_policies(store, models, options.width)
    names = [p.name for p in policies]
    if options.baseline == LOGGED and LOGGED not in names:
        policies.insert(0, Policy(LOGGED, None))
    chosen = [n for n in names if options.baseline in (n, n.partition("@")[0])]
    if options.baseline != LOGGED and len(chosen) != 1:
        raise ValueError(f"baseline {options.baseline!r} names none or several of {names}")
    base = chosen[0] if options.baseline != LOGGED else LOGGED
    estimator, source = None, options.propensities
    if source in ("auto", "store"):
        estimator = stored_propensities(store)
        if estimator is None and source == "store":
            raise ValueError(f"the model store has no {PROPENSITIES_MODEL!r} model")
        source = "store" if estimator is not None else "recording"
    sessions = lambda skipped, reads: joined_sessions(  # noqa: E731
        directory, options.width, options.window_s, options.grace_s, skipped, reads,
        options.skip_bad,
    )  # fmt: skip
    if estimator is None:  # a first pass: the recording's own randomized impressions
        defaults = JoinOptions()
        estimator = PropensityEstimator(defaults.depth, defaults.prior_eta, defaults.prior_clicks)
        for closed in sessions(Skipped(), _reads()):
            estimator.observe(closed.impression.intervention, closed.clicked)
    skipped, reads = Skipped(), _reads()
    terms = _policy_terms(sessions(skipped, reads), policies, estimator, options)
    baseline = terms[base]
    longest = max((len(t.x) for t in terms.values()), default=0)
    result: dict[str, Any] = {
        "recording": str(directory),
        "k": options.k,
        "level": options.level,
        "interval": "CLT on per-impression terms (SNIPS: delta method); differences paired "
        "per impression",
        "min_propensity": options.min_propensity,
        "propensities": {
            "source": source,
            "values": [round(p, 6) for p in estimator.propensities(options.k).tolist()],
            "randomized_impressions": estimator.intervened,
        },
        "impressions": longest,
        "clicks": int(baseline.c.sum()) if len(baseline) else 0,
        "skipped": skipped.as_dict(reads),
        "models_left_out": left_out,
        "policies": {},
        "differences": {},
    }
    if not len(baseline):
        result["policies"] = {name: None for name in terms}
        return result
    for name, t in terms.items():
        result["policies"][name] = estimate(t, options.level).as_dict()
        if name != base:
            paired = difference(t, baseline, options.level)
            result["differences"][f"{name} - {base}"] = paired.as_dict()
    return result


def _reads() -> dict[str, ReadCounts]:
    return {"impressions": ReadCounts(), "clicks": ReadCounts()}


def _policy_terms(
    sessions: Iterator[Closed],
    policies: Sequence[Policy],
    estimator: PropensityEstimator,
    options: CounterfactualOptions,
) -> dict[str, Terms]:
    """Each policy's terms over the sessions, reranked a chunk at a time."""
    parts: dict[str, list[Terms]] = {p.name: [] for p in policies}
    cache: dict[int, np.ndarray] = {}

    def propensities(n: int) -> np.ndarray:
        if n not in cache:
            cache[n] = estimator.propensities(n)
        return cache[n]

    def flush(chunk: list[Closed]) -> None:
        longest = max(len(c.clicked) for c in chunk)
        p = propensities(longest)
        clicked = [c.clicked for c in chunk]
        for policy in policies:
            ranks = [policy.ranks(c.impression.phi) for c in chunk]
            parts[policy.name].append(
                policy_terms(clicked, ranks, p, options.k, options.min_propensity)
            )

    for chunk in _batches(sessions, _CHUNK):
        flush(chunk)
    return {name: _concatenate(found) for name, found in parts.items()}


def _batches(items: Iterator[Closed], size: int) -> Iterator[list[Closed]]:
    while batch := list(itertools.islice(items, size)):
        yield batch


def _concatenate(parts: list[Terms]) -> Terms:
    if not parts:
        empty = np.zeros(0)
        return Terms(empty, empty, np.zeros(0, dtype=np.int64), 0)
    return Terms(
        np.concatenate([t.x for t in parts]),
        np.concatenate([t.w for t in parts]),
        np.concatenate([t.c for t in parts]),
        sum(t.clipped for t in parts),
    )
