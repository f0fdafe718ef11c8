"""Scale-out: several online workers in one consumer group, one model per partition, mixed.

Why per-partition models. A model's stream position lives *with* the model, so the
unit whose ownership moves in a rebalance must be the unit that carries a position.
In a consumer group every partition has exactly one owner at a time, so each
partition k gets its own models `{algo}.p{k}` (the store's names allow no "@"), and
each is checkpointed with that partition's offset only:

* on assignment a worker loads `{algo}.p{k}` with its offset and seeks partition k
  there (`on_assign`); a partition with no stored model starts at its beginning;
* on revocation it checkpoints them before the partition is released (`on_revoke`),
  then forgets them; a worker killed without a revocation (SIGKILL) leaves its last
  checkpoint, which the next owner resumes from, re-learning only what was unsaved;
* saves stay fenced (`workers.checkpoint.save_checkpoint`): an owner that lost its
  partition without noticing (a zombie after a session timeout) is refused as soon
  as the new owner has saved, and stops.

So each partition's triplets count exactly once, and each `{algo}.p{k}` is
bit-identical to one uninterrupted worker reading partition k alone in offset order,
whatever the rebalances: its scaler is fitted on partition k's first `scaler_rows`
triplets and its updates are sequential within the partition.

The served model `{algo}` is the *parameter mix* of the partition models (McDonald,
Hall and Mann 2010, "Distributed training strategies for the structured perceptron":
the average of the shards' weight vectors, weighted by how many examples each saw):

    v = sum_k (n_k / N) w_k / s_k,   N = sum_k n_k

where n_k is `triplets_seen` of `{algo}.p{k}`, w_k its weights and s_k its scaler's std.
Models learn on standardized phi, so each w_k is first brought to raw-phi space
(w_k / s_k; the scaler's mean cancels in a pair difference) before averaging: the
same x then gets the same margin from the mix as the weighted mean of the partition
models' margins. The mix is published with scaler std s = sum_k (n_k/N) s_k and mean
sum_k (n_k/N) m_k and weights s * v, so `OnlineRanker.score` of the mix equals
sum_k (n_k/N) score_k plus a per-query constant (same ranking). A learner's extra state
is mixed as its spec's `mix_state` says (AROW's covariance the same way:
`ranking.learners.mix_covariances`). Partitions whose model has no scaler yet are left
out (n_k = 0).

Which mix: the one-shot mix above, recomputed from the *stored* partition models
every `mix_seconds`, not McDonald's iterative variant that feeds the mix back into
every shard: feeding it back would make each partition model depend on when mixes
happened, losing exact per-partition replay. The mix covers the offsets of its
inputs (reported as its offsets) and names them in meta `mixed_from`.

Who mixes: the worker that owns partition 0 (its `workers.online_worker.OnlineHandler` for
that partition, run by the runtime's `PerPartition`). The mix is a pure function of stored
inputs, and its save is fenced on the `{algo}` version that worker read just before,
so during a rebalance two would-be mixers cannot interleave: the loser of a race skips
that round (its content would have been identical) and nothing is published twice for
the same inputs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

import numpy as np

from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.stream.store import FencingError, ModelStore, StoredModel
from rankstream.telemetry.structured_log import get_logger, log_event
from rankstream.workers.checkpoint import MODEL_KIND

log = get_logger("rankstream.worker.scaleout")
MIXER_PARTITION = 0
_PARTITION_NAME = re.compile(r"^(?P<algo>[a-z0-9_]+)\.p(?P<partition>\d+)$")


def partition_model_name(algo: str, partition: int) -> str:
    """`{algo}.p{k}`: the model that learns partition k alone."""
    if partition < 0:
        raise ValueError(f"partition must be >= 0, got {partition}")
    return f"{algo}.p{partition}"


def parse_partition_model_name(name: str) -> tuple[str, int] | None:
    """(algo, partition) for a per-partition model's name, else None."""
    match = _PARTITION_NAME.match(name)
    return None if match is None else (match["algo"], int(match["partition"]))


# --- the mix ---------------------------------------------------------------------------


def mix_rankers(rankers: Sequence[OnlineRanker]) -> OnlineRanker:
    """The triplet-weighted parameter mix of rankers of one algorithm (see module doc)."""
    if not rankers:
        raise ValueError("nothing to mix: no partition model has learned anything yet")
    algos = {r.algo for r in rankers}
    if len(algos) != 1:
        raise ValueError(f"cannot mix different algorithms: {sorted(algos)}")
    if any(r.scaler is None or r.scaler.std_ is None for r in rankers):
        raise ValueError("every mixed ranker needs its fitted scaler")
    dims = {r.width for r in rankers}
    if len(dims) != 1:
        raise ValueError(f"cannot mix rankers of different widths: {sorted(map(str, dims))}")
    seen = np.array([r.n_seen for r in rankers], dtype=np.float64)
    if not (seen > 0).all():
        raise ValueError(f"every mixed ranker must have seen triplets, got {seen.tolist()}")
    share = seen / seen.sum()
    stds = np.stack([r.scaler.std_ for r in rankers])  # type: ignore[union-attr]
    means = np.stack([r.scaler.mean_ for r in rankers])  # type: ignore[union-attr]
    raw = np.stack([r.weights for r in rankers]) / stds  # each w_k in raw-phi space
    std, mean = share @ stds, share @ means
    scaler = Standardizer()
    scaler.mean_, scaler.std_ = mean, std
    first = rankers[0]
    mixed = OnlineRanker(
        algo=first.algo, **first.params, scaler=scaler, warm_start=std * (share @ raw)
    )
    states = [r._state for r in rankers]
    if any(states):
        if first.spec.mix_state is None:
            raise ValueError(f"learner {first.algo!r} declares no mix_state for its state")
        mixed._state.update(first.spec.mix_state(states, share, stds, std))
    mixed.n_seen = int(seen.sum())
    mixed.n_updates = int(sum(r.n_updates for r in rankers))
    if not np.isfinite(mixed.weights).all():
        raise ValueError("the mix is not finite; a partition model holds a non-finite value")
    return mixed


def publish_mix(
    store: ModelStore, topic: str, algo: str, partitions: Sequence[int], writer: str
) -> int | None:
    """Mix the stored `{algo}.p{k}` and save `{algo}`; its new version, or None if skipped.

    Skipped when no partition model is stored yet, when the stored mix already has
    exactly these inputs, or when another mixer saved `{algo}` between our read and
    our write (fenced: it published the same function of the same kind of inputs).
    """
    inputs: list[StoredModel] = []
    for partition in partitions:
        stored = store.load(partition_model_name(algo, partition))
        if stored is not None:
            inputs.append(stored)
    if not inputs:
        return None
    mixed_from = {m.name: m.version for m in inputs}
    current = store.load(algo)
    if current is not None and current.meta.get("mixed_from") == mixed_from:
        return None
    ranker = mix_rankers([OnlineRanker.from_state(m.meta, m.arrays) for m in inputs])
    meta, arrays = ranker.to_state()
    meta.update(
        triplets_seen=int(ranker.n_seen),
        mixed_from=mixed_from,
        writer=writer,
        checkpoint_ms=time.time_ns() // 1_000_000,
        scaler_rows=int(inputs[0].meta.get("scaler_rows", 0)),
    )
    offsets = {topic: {p: o for m in inputs for p, o in m.offsets.get(topic, {}).items()}}
    try:
        return store.save(
            algo,
            kind=MODEL_KIND,
            meta=meta,
            arrays=arrays,
            offsets=offsets,
            expected_version=0 if current is None else current.version,
        )
    except FencingError as exc:
        log_event(
            log,
            "mix skipped: another mixer published first",
            model=algo,
            expected=exc.expected,
            actual=exc.actual,
        )
        return None
