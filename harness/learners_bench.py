"""The learners benchmark (`rankstream bench learners`): sequential throughput of the
online learners, against C.

Times exactly the path the online worker and direct replay take: one learner's
`learn_many_together` over N triplets in the normalized form a decoded block has (a
float32 image table phi, int32 rows p1 and p2, float64 labels), from a fresh model each
pass. The data is shaped like the simulator's stream: 50 candidates per judged query,
123 triplets per query (the demo's 246,747 triplets from 2,000 queries), random labels so
the passive-aggressive rules and AROW update on nearly every row (the slow case). The
table holds 400 queries' candidates (20,000 images, 2.9 MB) and query q's triplets read
table query q mod 400: a worker learns a block right after decoding it, so its table is
in cache; a 3M-triplet table would measure memory, not the learner.

A C loop of the same rule over the same arrays (`harness.learner_c_reference`, built with `cc -O3
-march=native -ffast-math` when a compiler is present) runs in the same process, its
passes alternating with the learner's so both see the same machine; each learner's
`ratio_to_c` is C's median seconds over its own (>= 1: as fast as C or faster), wall
and CPU. Before timing, both run the first 10,000 triplets and must agree on the
weights (the C reference is the same rule). Data generation, model construction and
the first (compiling or cache-loading) call are outside the timed region; the latter is
reported on its own as compile_seconds. Wall and CPU time (of this process) are both
reported: on a shared machine the CPU time is the steadier measure.

The linear rules run on the ahead-of-time build of their kernel when there is one
(`ranking.aot`, what the worker and replay then run too; `--kernels jit` for numba's
JIT; the report's `linear_kernel` says which), AROW on the JIT.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from rankstream.ranking import DEFAULT_PHI_DIM

WARMUP_ROWS = 1000
CHECK_ROWS = 10_000
CANDIDATES = 50  # per judged query (the demo's top 50)
TRIPLETS_PER_QUERY = 123  # the demo's stream: 246,747 triplets from 2,000 queries
TABLE_QUERIES = 400  # queries whose candidates the table holds (cache-resident)


def make_stream(n: int, seed: int):  # type: ignore[no-untyped-def]
    """(phi, p1, p2, y): n triplets over a table of candidates, as described above."""
    import numpy as np

    rng = np.random.default_rng(seed)
    phi = rng.standard_normal((TABLE_QUERIES * CANDIDATES, DEFAULT_PHI_DIM)).astype(np.float32)
    phi.setflags(write=False)  # like a decoded block's table
    query = (np.arange(n) // TRIPLETS_PER_QUERY) % TABLE_QUERIES
    first = rng.integers(0, CANDIDATES, n)
    second = (first + rng.integers(1, CANDIDATES, n)) % CANDIDATES  # another candidate
    p1 = (query * CANDIDATES + first).astype(np.int32)
    p2 = (query * CANDIDATES + second).astype(np.int32)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return phi, p1, p2, y


def _timed(run) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    start, cpu_start = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - start, time.process_time() - cpu_start


def bench_algo(algo: str, stream, repeats: int, reference) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Median wall/CPU seconds of the learner's passes (and of C's, interleaved)."""
    import numpy as np

    from rankstream.ranking.learners import hyperparameters, learner
    from rankstream.ranking.online import OnlineRanker, learn_many_together

    phi, p1, p2, y = stream
    n = len(y)
    compile_seconds, _ = _timed(
        lambda: learn_many_together(
            [OnlineRanker(algo)], phi, p1[:WARMUP_ROWS], p2[:WARMUP_ROWS], y[:WARMUP_ROWS]
        )
    )
    c_pass = None if reference is None else reference.learner(learner(algo), hyperparameters())
    if c_pass is not None:
        _check_agreement(algo, stream, c_pass)
    ours: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    for _ in range(repeats):
        ranker = OnlineRanker(algo, dim=DEFAULT_PHI_DIM)
        ours.append(_timed(lambda r=ranker: learn_many_together([r], phi, p1, p2, y)))
        if c_pass is not None:
            theirs.append(_timed(lambda: c_pass(phi, p1, p2, y)))
    seconds, cpu_seconds = (float(np.median([t[k] for t in ours])) for k in (0, 1))
    result: dict[str, Any] = {
        "seconds": seconds,
        "triplets_per_s": n / seconds,
        "cpu_seconds": cpu_seconds,
        "cpu_triplets_per_s": n / cpu_seconds if cpu_seconds > 0 else None,
        "compile_seconds": compile_seconds,
        "c_seconds": None,
        "c_triplets_per_s": None,
        "ratio_to_c": None,
        "cpu_ratio_to_c": None,
    }
    if theirs:
        c_seconds, c_cpu = (statistics.median(t[k] for t in theirs) for k in (0, 1))
        result.update(
            c_seconds=c_seconds,
            c_triplets_per_s=n / c_seconds,
            ratio_to_c=c_seconds / seconds,
            cpu_ratio_to_c=c_cpu / cpu_seconds if cpu_seconds > 0 else None,
        )
    return result


def _check_agreement(algo: str, stream, c_pass) -> None:  # type: ignore[no-untyped-def]
    """The C reference must compute the learner's rule: the same weights up to the
    rounding its reordered sums allow. The update counts may differ by a few: a repeated
    pair lands on a margin of exactly 1 after a passive-aggressive step, give or take a
    rounding, and the next step is then 0 or a vanishing one."""
    import numpy as np

    from rankstream.ranking.online import OnlineRanker, learn_many_together

    phi, p1, p2, y = (a[:CHECK_ROWS] if a.ndim == 1 else a for a in stream)
    ranker = OnlineRanker(algo, dim=DEFAULT_PHI_DIM)
    learn_many_together([ranker], phi, p1, p2, y)
    weights, updates = c_pass(phi, p1, p2, y)
    scale = max(float(np.abs(ranker.weights).max()), 1.0)
    apart = float(np.abs(weights - ranker.weights).max()) / scale
    if apart > 1e-6 or abs(updates - ranker.n_updates) > max(2, ranker.n_updates // 1000):
        raise RuntimeError(
            f"the C reference of {algo} disagrees with the learner on the first {len(y)} "
            f"triplets: weights {apart:.1e} apart, {updates} vs {ranker.n_updates} updates"
        )


def c_reference() -> tuple[Any, str]:
    """(the C reference, what the report says of it); (None, why not) without a compiler."""
    from rankstream.harness import learner_c_reference

    built = learner_c_reference.build()
    if isinstance(built, str):
        return None, built
    return built, f"{built.command}, same process and data"


def learners_report(
    stream: Any,
    reference: Any,
    c_note: str,
    repeats: int,
    linear_kernel: str,
    progress: Callable[[str], None] = lambda algo: None,
) -> dict[str, Any]:
    """Every learner's `bench_algo` on `stream`; `progress(algo)` before each."""
    from rankstream.ranking.learners import names

    results = {}
    for algo in names():
        progress(algo)
        results[algo] = bench_algo(algo, stream, repeats, reference)
    return {
        "triplets": len(stream[3]),
        "dim": DEFAULT_PHI_DIM,
        "images": int(stream[0].shape[0]),
        "c_reference": c_note,
        "linear_kernel": linear_kernel,  # AROW's is always the JIT's
        "results": results,
    }
