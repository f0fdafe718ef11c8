"""Direct replay: train online rankers straight from a recorded log (a back-test).

The models are `workers.checkpoint.TrackedModel`s, the very objects the online worker
updates, fed the same rows in the same order, so their weights are bit-identical to
a worker's that consumed the log through a transport:

* while a model's scaler is not yet fitted it is fed one recorded message at a time,
  because which whole messages are held back to fit the scaler is part of the result;
* after that, spans of whole messages (up to 64k rows) go to all models in one compiled
  pass (`workers.checkpoint.learn_together`, as the worker does per message). The
  rules are sequential per row, so one call over many messages computes exactly what
  one call per message does; the only difference would be a batch a ranker refuses
  (weights that would become non-finite), and such a span is re-fed to that model
  message by message with the worker's rule (the refused message is skipped).

Reading overlaps learning: a thread decodes the next row groups (pyarrow releases the
GIL) while the learners, and before them numba's start-up, run on the main thread.
`workers.checkpoint` (which imports numba: +0.17 s of it at import, `python -X importtime`)
is therefore imported only after that thread has started.

A recorded row that could not have come from the recorder (NaN/Inf phi, tied
relevance) raises RecordingError naming file and row; `skip_bad` drops and counts it.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rankstream.ranking import learners
from rankstream.stream.recording_files import RecordingError
from rankstream.stream.recording_reader import (
    ReadCounts,
    TripletChunk,
    iter_triplet_chunks,
    nonfinite_rows,
)
from rankstream.stream.settings import DEFAULT_PHI_DIM
from rankstream.stream.store import StoredModel
from rankstream.workers.online_worker_options import DEFAULT_SCALER_ROWS

if TYPE_CHECKING:
    from rankstream.workers.checkpoint import TrackedModel

_PREFETCH_CHUNKS = 3
# Rows per compiled pass once scalers are fitted. The loop gathers each row from the
# chunk's image table itself, so a span costs no memory of its own; spans only bound
# how much a refused batch (weights that would become non-finite) must re-feed.
_SPAN_ROWS = 65_536


@dataclass(frozen=True)
class DirectOptions:
    """The hyper-parameters a back-test varies; defaults match `rankstream worker online`."""

    algos: tuple[str, ...] = field(default_factory=learners.worker_defaults)
    hyper: Mapping[str, float] = field(default_factory=dict)  # ranking.learners.HYPERPARAMETERS
    scaler_rows: int = DEFAULT_SCALER_ROWS
    skip_bad: bool = False
    width: int = DEFAULT_PHI_DIM  # the deployment's phi width; a log of another is refused

    def __post_init__(self) -> None:
        learners.check_names(self.algos)
        object.__setattr__(self, "hyper", learners.hyperparameters(self.hyper))
        if self.scaler_rows < 1:
            raise ValueError(f"scaler_rows must be >= 1, got {self.scaler_rows}")


@dataclass
class DirectResult:
    models: list[TrackedModel]
    counts: ReadCounts = field(default_factory=ReadCounts)

    def summaries(self) -> dict[str, dict[str, Any]]:
        """{name: `model show`'s summary} of every model (version 0: never stored)."""
        return {m.name: model_summary(m) for m in self.models}


def model_summary(model: TrackedModel) -> dict[str, Any]:
    """`workers.checkpoint.summarize` of the model as a worker would save it."""
    from rankstream.workers.checkpoint import MODEL_KIND, summarize

    if model.ranker is None:  # fewer rows than scaler_rows: a worker would not save it
        return {
            "name": model.name,
            "version": 0,
            "n_updates": 0,
            "triplets_seen": 0,
            "offsets": {},
            "weights_sha256": None,
        }
    meta, arrays = model.to_state()
    return summarize(
        StoredModel(
            name=model.name,
            version=0,
            kind=MODEL_KIND,
            meta=meta,
            arrays=arrays,
            offsets=model.offsets,
            created_ms=0,
        )
    )


def train_from_log(
    directory: Path | str,
    options: DirectOptions | None = None,
    on_rows: Callable[[int], None] | None = None,
) -> DirectResult:
    """Feed every recorded triplet to fresh models; `on_rows(n)` reports progress."""
    options = options or DirectOptions()
    counts = ReadCounts()
    chunks = _prefetch(
        iter_triplet_chunks(
            directory, width=options.width, skip_bad=options.skip_bad, counts=counts
        )
    )
    from rankstream.workers.checkpoint import TrackedModel

    models = [
        TrackedModel(name=a, algo=a, params=dict(options.hyper), scaler_rows=options.scaler_rows)
        for a in options.algos
    ]
    for chunk in chunks:
        _learn_chunk(models, chunk, options.skip_bad, counts)
        if on_rows is not None:
            on_rows(len(chunk))
    return DirectResult(models, counts)


def _prefetch(chunks: Iterator[TripletChunk]) -> Iterator[TripletChunk]:
    """Run `chunks` on a thread a few items ahead; its exceptions re-raise here."""
    pipe: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=_PREFETCH_CHUNKS)

    def produce() -> None:
        try:
            for chunk in chunks:
                pipe.put(("chunk", chunk))
            pipe.put(("done", None))
        except BaseException as exc:  # handed to the consumer, which re-raises it
            pipe.put(("error", exc))

    threading.Thread(target=produce, name="log-reader", daemon=True).start()

    def consume() -> Iterator[TripletChunk]:
        while True:
            what, item = pipe.get()
            if what == "done":
                return
            if what == "error":
                raise item
            yield item

    return consume()


def _learn_chunk(
    models: list[TrackedModel], chunk: TripletChunk, skip_bad: bool, counts: ReadCounts
) -> None:
    """Scaler phase message by message, then the rest of the chunk in spans."""
    start = 0
    if any(m.ranker is None for m in models):
        bounds = chunk.message_bounds()
        for a, b in itertools.pairwise(bounds):
            if all(m.ranker is not None for m in models):
                break
            _learn_span(models, chunk, int(a), int(b), skip_bad, counts)
            start = int(b)
    for a in range(start, len(chunk), _SPAN_ROWS):
        _learn_span(models, chunk, a, min(a + _SPAN_ROWS, len(chunk)), skip_bad, counts)


def _learn_span(
    models: list[TrackedModel],
    chunk: TripletChunk,
    a: int,
    b: int,
    skip_bad: bool,
    counts: ReadCounts,
) -> None:
    """Rows a..b (whole messages) to every model, offsets advanced to the span's end."""
    from rankstream.workers.checkpoint import learn_together

    topic, last = chunk.topic, b - 1
    results = learn_together(
        models,
        topic,
        int(chunk.partition[last]),
        int(chunk.offset[last]),
        chunk.block.select(slice(a, b)),
    )
    refused = [m for m, r in zip(models, results, strict=True) if isinstance(r, ValueError)]
    if refused:
        bad = nonfinite_rows(chunk.select(_mask(len(chunk), a, b)))
        if bad.size:  # a NaN/Inf row stops every model's pass, so none has learned the span
            if not skip_bad:
                raise RecordingError(
                    chunk.path, "phi holds NaN or Inf", chunk.first_row + a + int(bad[0])
                ) from None
            counts.bad_rows += bad.size
            counts.rows -= bad.size
            keep = np.ones(len(chunk), bool)
            keep[a + bad] = False
            keep[:a] = keep[b:] = False
            _learn_span(models, chunk.select(keep), 0, int(keep.sum()), skip_bad, counts)
            return
        for model in refused:
            _learn_messages(model, chunk, a, b)
    for model in models:
        if all(model is not r for r in refused):
            _advance_other_partitions(model, chunk, a, b)


def _learn_messages(model: TrackedModel, chunk: TripletChunk, a: int, b: int) -> None:
    """The worker's rule for a refused batch: per message, skipping refused ones."""
    from rankstream.workers.checkpoint import learn_together

    sub = chunk.select(_mask(len(chunk), a, b))
    for s, e in itertools.pairwise(sub.message_bounds()):
        topic, p, o = chunk.topic, int(sub.partition[s]), int(sub.offset[s])
        result = learn_together([model], topic, p, o, sub.block.select(slice(int(s), int(e))))[0]
        if isinstance(result, ValueError):
            model.skip(topic, p, o)


def _advance_other_partitions(model: TrackedModel, chunk: TripletChunk, a: int, b: int) -> None:
    """`learn` advanced the last row's partition; move the span's others past their rows."""
    parts = chunk.partition[a:b]
    if parts[0] == parts[-1] and (parts == parts[0]).all():
        return
    offsets = chunk.offset[a:b]
    for p in np.unique(parts):
        if p != parts[-1]:
            model.skip(chunk.topic, int(p), int(offsets[parts == p].max()))


def _mask(n: int, a: int, b: int) -> np.ndarray:
    keep = np.zeros(n, bool)
    keep[a:b] = True
    return keep
