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
order the users saw), `engine` (the engine's own order, from the `engine_scores` logged with
the impression: `selection.engine_ranking.engine_order`, higher first, ties in the order the
impression holds them, its displayed order, since the request's own order is not logged) or
a stored model (`name` for its newest version, `name@version` for a kept one) scoring the
impression's phi (`selection.scoring`: the scorer serve uses; a Plackett-Luce model's
deterministic ranking by its scores, not its sampled one), and `ranking.counterfactual`
gives its IPS and SNIPS click-DCG@k with intervals, and each policy's paired difference
from a baseline.

The engine is a policy only where the engine's scores were logged. Rule: its estimate
covers the impressions that carry `engine_scores`, and a difference with it is paired on
those impressions alone (the other policy's terms there); the impressions without them are
counted under `undefined` (`{"engine": {"impressions": n, "reason": ...}}`), never
dropped silently. It is in the default set of policies when at least one joined impression
carries engine scores; named (`--model engine`, `--baseline engine`) it is always reported,
null where it covers no impression. The store's `engine` record (the engine's arrival) is
not a stored model here: it has no scorer, the impressions hold its scores.

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
from rankstream.selection.engine_ranking import ENGINE, engine_order
from rankstream.selection.live_estimates import LOGGED  # the logged order's one name
from rankstream.selection.scoring import Scorer, scorer_for
from rankstream.stream.click_schema import Impression, decode_clicks, decode_impressions
from rankstream.stream.click_window import ClickWindow, Closed, PendingClick
from rankstream.stream.recording_reader import ReadCounts, iter_messages
from rankstream.stream.store import ModelStore
from rankstream.workers.click_join import PROPENSITIES_MODEL  # the join's published estimate
from rankstream.workers.click_join_options import JoinOptions

PROPENSITY_SOURCES = ("auto", "store", "recording")
ENGINE_UNDEFINED = "no engine_scores logged with the impression"
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
    """A ranking under evaluation: `logged`, `engine`, or a stored model's version as a
    scorer."""

    name: str
    scorer: Scorer | None  # None: the logged order, or the engine's (by name)

    def ranks(self, impression: Impression) -> np.ndarray | None:
        """The policy's 0-based rank of each shown result (displayed order in); None where
        the policy is undefined: the engine on an impression without engine_scores."""
        if self.name == ENGINE and self.scorer is None:
            if impression.engine_scores is None:
                return None
            return np.argsort(engine_order(impression.engine_scores))  # order -> ranks
        if self.scorer is None:
            return np.arange(impression.phi.shape[0], dtype=np.int64)
        return rerank(self.scorer.score(impression.phi))


def resolve_policies(
    store: ModelStore, names: Sequence[str] | None, width: int
) -> tuple[list[Policy], dict[str, str]]:
    """The policies named (`logged`, `engine`, `name`, `name@version`), or without names
    `logged`, `engine` and every stored model's newest version that has a scorer; and the
    stored models left out, with why. A named model that is missing or cannot score raises
    ValueError."""
    if names:
        policies = []
        for name in names:
            if name in (LOGGED, ENGINE):
                policies.append(Policy(name, None))
                continue
            model, _, version = name.partition("@")
            if version and not version.isdigit():
                raise ValueError(f"{name!r}: a version is a number (name@3)")
            stored = store.load_version(model, int(version)) if version else store.load(model)
            if stored is None:
                raise ValueError(f"no stored model {name}")
            policies.append(Policy(f"{model}@{stored.version}", scorer_for(stored, width)))
        return policies, {}
    policies, left_out = [Policy(LOGGED, None), Policy(ENGINE, None)], {}
    for model in sorted(store.latest_versions()):
        stored = None if model == ENGINE else store.load(model)
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
    if options.baseline in (LOGGED, ENGINE) and options.baseline not in names:
        policies.insert(0, Policy(options.baseline, None))
    chosen = [n for n in names if options.baseline in (n, n.partition("@")[0])]
    if options.baseline not in (LOGGED, ENGINE) and len(chosen) != 1:
        raise ValueError(f"baseline {options.baseline!r} names none or several of {names}")
    base = chosen[0] if options.baseline not in (LOGGED, ENGINE) else options.baseline
    engine_named = options.baseline == ENGINE or (models is not None and ENGINE in models)
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
    found = _policy_terms(sessions(skipped, reads), policies, estimator, options)
    if ENGINE in found.terms and not engine_named and not len(found.terms[ENGINE]):
        del found.terms[ENGINE]  # default set: no impression carries the engine's scores
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
        "impressions": found.impressions,
        "clicks": found.clicks,
        "skipped": skipped.as_dict(reads),
        "models_left_out": left_out,
        "undefined": {},
        "policies": {},
        "differences": {},
    }
    if ENGINE in found.terms:
        unscored = found.impressions - len(found.terms[ENGINE])
        result["undefined"][ENGINE] = {"impressions": unscored, "reason": ENGINE_UNDEFINED}
    if not found.impressions:
        result["policies"] = {name: None for name in found.terms}
        return result
    for name, t in found.terms.items():
        result["policies"][name] = estimate(t, options.level).as_dict() if len(t) else None
        if name != base:
            a, b = found.paired(name, base)
            paired = difference(a, b, options.level).as_dict() if len(a) else None
            result["differences"][f"{name} - {base}"] = paired
    return result


def _reads() -> dict[str, ReadCounts]:
    return {"impressions": ReadCounts(), "clicks": ReadCounts()}


@dataclass
class PolicyTerms:
    """Every policy's terms over the joined impressions: a total policy's on all of them,
    the engine's on those that carry engine_scores (`scored`, their indices)."""

    terms: dict[str, Terms]
    scored: np.ndarray  # indices of the impressions carrying engine_scores
    impressions: int
    clicks: int

    def paired(self, a: str, b: str) -> tuple[Terms, Terms]:
        """Both policies' terms on the impressions where both are defined (the engine's
        when either is the engine: clipping depends on the displayed ranks alone, so the
        engine's clipped count is any policy's there)."""
        ta, tb = self.terms[a], self.terms[b]
        if ENGINE not in (a, b) or a == b:
            return ta, tb
        engine = ta if a == ENGINE else tb

        def there(t: Terms) -> Terms:
            if t is engine:
                return t
            rows = self.scored
            return Terms(t.x[rows], t.w[rows], t.c[rows], engine.clipped)

        return there(ta), there(tb)


def _policy_terms(
    sessions: Iterator[Closed],
    policies: Sequence[Policy],
    estimator: PropensityEstimator,
    options: CounterfactualOptions,
) -> PolicyTerms:
    """Each policy's terms over the sessions, reranked a chunk at a time; a policy
    undefined on an impression (the engine without its scores) has no term there."""
    parts: dict[str, list[Terms]] = {p.name: [] for p in policies}
    cache: dict[int, np.ndarray] = {}
    scored: list[np.ndarray] = []
    seen = {"impressions": 0, "clicks": 0}

    def propensities(n: int) -> np.ndarray:
        if n not in cache:
            cache[n] = estimator.propensities(n)
        return cache[n]

    def flush(chunk: list[Closed]) -> None:
        longest = max(len(c.clicked) for c in chunk)
        p = propensities(longest)
        carries = [c.impression.engine_scores is not None for c in chunk]
        scored.append(seen["impressions"] + np.flatnonzero(carries))
        seen["impressions"] += len(chunk)
        seen["clicks"] += sum(int(c.clicked.sum()) for c in chunk)
        for policy in policies:
            ranked = [(c.clicked, policy.ranks(c.impression)) for c in chunk]
            defined = [(c, r) for c, r in ranked if r is not None]
            if defined:
                clicked, ranks = zip(*defined, strict=True)
                parts[policy.name].append(
                    policy_terms(list(clicked), list(ranks), p, options.k, options.min_propensity)
                )

    for chunk in _batches(sessions, _CHUNK):
        flush(chunk)
    return PolicyTerms(
        {name: _concatenate(found) for name, found in parts.items()},
        np.concatenate([np.zeros(0, dtype=np.int64), *scored]).astype(np.int64),
        seen["impressions"],
        seen["clicks"],
    )


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
