"""A §5.1-style learning-to-rank test bed for any image collection with graded relevance.

The online-LTR paper (§5.1) builds each learning-to-rank test bed the same way, and so
does `build_testbed` here, whatever the collection (`simulators.digits`; the synthetic
ImageCLEF/Flickr-like collection and Fashion-MNIST through `served_testbed`, which ranks
what the §5.5 stream's first stage retrieves, or `sampled_testbed`, which ranks a sample
of the whole database as the paper's standard datasets do):

* a *candidate source* gives each query image its candidates and their graded
  relevance (0 = irrelevant; higher = more relevant), and optionally their phi;
  phi(q, p) is the 36-d query-dependent feature vector;
* the query images are split at random into five folds: one fold's images are the test
  queries, one fold's the validation queries, the other three folds' the training
  queries (the paper rotates the folds; one rotation is enough to compare methods);
* training data: pairs (a, b) of one training query's candidates with
  rel(a) > rel(b), each a row x = phi(q, a) - phi(q, b), y = +1; a random half of the
  rows is flipped to (-x, -1) so both labels occur. The total is a budget (200,000 rows
  by default, as the paper's standard-dataset runs) spread evenly over the training
  queries that have a pair at all (a query whose candidates are all equally relevant,
  e.g. 300 retrieved trousers for a trouser, gives none), so the budget is met. Within
  a query, every candidate that is more relevant than some other is
  used once per cycle (a random subset when the share is smaller than that set), each
  against a random candidate of lower relevance: so every differently-relevant pair
  can occur, and the scarce relevant images are all used before any repeats;
* validation and test queries keep all their candidates with graded relevance: NDCG
  gains are 2^rel - 1 and AP counts rel > 0 as relevant (`ranking.metrics`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from rankstream.simulators.collection import load_served
from rankstream.simulators.judged_feedback import SERVED_CANDIDATES

if TYPE_CHECKING:
    from rankstream.simulators.images import ImageCollection, ServedCollection

N_FOLDS = 5
DEFAULT_TRAIN_ROWS = 200_000

PhiFunction = Callable[[int, np.ndarray], np.ndarray]
"""phi(query image id, candidate ids (k,)) -> (k, d) features."""


class RankedQuery(NamedTuple):
    """One judged query: phi of every candidate (m, d) and its graded relevance (m,)."""

    phi: np.ndarray
    relevance: np.ndarray


class QueryCandidates(NamedTuple):
    """What a candidate source returns for one query image.

    `phi` may be None when the source does not compute it; the test bed then computes
    phi only for the candidates it uses.
    """

    ids: np.ndarray
    relevance: np.ndarray
    phi: np.ndarray | None = None


CandidateSource = Callable[[int], QueryCandidates]


@dataclass(frozen=True)
class CBIRTestBed:
    """Training triplet rows plus validation and test queries of one CBIR collection.

    `train_triplets[i] = (query, p1, p2)` image ids with
    `train_X[i] = phi(query, p1) - phi(query, p2)`; `train_phi` holds phi of every
    (training query, candidate) pair the rows were built from, for fitting a scaler on
    training data only.
    """

    name: str
    feature_names: list[str]
    train_X: np.ndarray  # noqa: N815 (the task and scikit-learn spell it so)
    train_y: np.ndarray
    train_triplets: np.ndarray
    train_phi: np.ndarray
    val_queries: list[RankedQuery]
    test_queries: list[RankedQuery]
    train_query_ids: np.ndarray
    val_query_ids: np.ndarray
    test_query_ids: np.ndarray
    phi: PhiFunction = field(repr=False)

    @property
    def query_counts(self) -> dict[str, int]:
        return {
            "train": int(self.train_query_ids.size),
            "val": int(self.val_query_ids.size),
            "test": int(self.test_query_ids.size),
        }


def fold_split(
    query_ids: np.ndarray, rng: np.random.Generator, max_val: int | None, max_test: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Five random folds of `query_ids`: fold 0 -> test, fold 1 -> validation, rest -> train."""
    folds = np.array_split(rng.permutation(np.asarray(query_ids)), N_FOLDS)
    test, val = folds[0][:max_test], folds[1][:max_val]
    train = np.concatenate(folds[2:])
    return np.sort(train), np.sort(val), np.sort(test)


def sample_graded_pairs(
    relevance: np.ndarray, quota: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`quota` index pairs (a, b) with relevance[a] > relevance[b] (see module docstring).

    Empty when every candidate has the same relevance. With binary relevance this is
    "every relevant image once per cycle against a random irrelevant one".
    """
    rel = np.asarray(relevance)
    upper = np.flatnonzero(rel > rel.min()) if rel.size else np.empty(0, dtype=np.int64)
    if quota < 1 or upper.size == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    if quota <= upper.size:
        first = rng.choice(upper, size=quota, replace=False)
    else:
        first = np.resize(rng.permutation(upper), quota)
    second = np.empty(quota, dtype=np.int64)
    for level in np.unique(rel[first]):
        chosen = rel[first] == level
        lower = np.flatnonzero(rel < level)
        n = int(chosen.sum())
        second[chosen] = rng.choice(lower, size=n, replace=n > lower.size)
    return first.astype(np.int64), second


def _even_quotas(total: int, n: int) -> np.ndarray:
    quotas = np.full(n, total // n)
    quotas[: total % n] += 1
    return quotas


def _ranked_query(phi: PhiFunction, source: CandidateSource, query: int) -> RankedQuery:
    found = source(query)
    values = phi(query, found.ids) if found.phi is None else found.phi
    return RankedQuery(np.asarray(values, dtype=np.float32), np.asarray(found.relevance, np.int8))


def build_testbed(
    name: str,
    feature_names: Sequence[str],
    phi: PhiFunction,
    source: CandidateSource,
    query_ids: np.ndarray,
    seed: int = 0,
    train_rows: int = DEFAULT_TRAIN_ROWS,
    max_val_queries: int | None = None,
    max_test_queries: int | None = None,
) -> CBIRTestBed:
    """The §5.1 test bed over `query_ids`, candidates and relevance from `source`."""
    query_ids = np.asarray(query_ids)
    if query_ids.ndim != 1 or query_ids.size < 2 * N_FOLDS:
        raise ValueError(f"need a 1-d array of at least {2 * N_FOLDS} query ids")
    if train_rows < 1:
        raise ValueError(f"train_rows must be >= 1, got {train_rows}")
    rng = np.random.default_rng(seed)
    train_ids, val_ids, test_ids = fold_split(query_ids, rng, max_val_queries, max_test_queries)

    found_by_query = [(int(query), source(int(query))) for query in train_ids]
    usable = [(q, found) for q, found in found_by_query if np.ptp(found.relevance) > 0]
    if not usable:
        raise ValueError("no training query has candidates of differing relevance")
    rows, triplets, phi_blocks = [], [], []
    for (query, found), quota in zip(usable, _even_quotas(train_rows, len(usable)), strict=True):
        if quota == 0:
            continue
        first, second = sample_graded_pairs(found.relevance, int(quota), rng)
        used, inverse = np.unique(np.concatenate([first, second]), return_inverse=True)
        if found.phi is None:
            values = np.asarray(phi(int(query), found.ids[used]), dtype=np.float64)
        else:
            values = np.asarray(found.phi[used], dtype=np.float64)
        rows.append(values[inverse[:quota]] - values[inverse[quota:]])
        triplets.append(
            np.column_stack([np.full(quota, query), found.ids[first], found.ids[second]])
        )
        phi_blocks.append(values.astype(np.float32))
    train_X = np.vstack(rows)
    train_triplets = np.vstack(triplets)
    flip = rng.random(train_X.shape[0]) < 0.5
    train_X[flip] *= -1.0
    train_triplets[flip] = train_triplets[flip][:, [0, 2, 1]]
    train_y = np.where(flip, -1.0, 1.0)

    return CBIRTestBed(
        name=name,
        feature_names=list(feature_names),
        train_X=train_X,
        train_y=train_y,
        train_triplets=train_triplets,
        train_phi=np.vstack(phi_blocks),
        val_queries=[_ranked_query(phi, source, int(q)) for q in val_ids],
        test_queries=[_ranked_query(phi, source, int(q)) for q in test_ids],
        train_query_ids=train_ids,
        val_query_ids=val_ids,
        test_query_ids=test_ids,
        phi=phi,
    )


def labelled_source(labels: np.ndarray) -> CandidateSource:
    """Candidates = every other image; relevance = same label (1) or not (0)."""
    labels = np.asarray(labels)
    everyone = np.arange(labels.size)

    def source(query: int) -> QueryCandidates:
        ids = np.delete(everyone, query)
        return QueryCandidates(ids, (labels[ids] == labels[query]).astype(np.int8))

    return source


def build_cbir_testbed(
    name: str,
    descriptors: dict[str, np.ndarray],
    labels: np.ndarray,
    seed: int = 0,
    train_rows: int = DEFAULT_TRAIN_ROWS,
    max_val_queries: int | None = None,
    max_test_queries: int | None = None,
) -> CBIRTestBed:
    """The test bed of a labelled collection: phi from its descriptor matrices
    (`simulators.similarity.PhiMap`), every other image a candidate, binary relevance."""
    # the numba similarity kernels: +1 s at import; only building phi needs them
    from rankstream.simulators.similarity import PhiMap

    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size < 2 * N_FOLDS:
        raise ValueError(f"labels must be 1-d with at least {2 * N_FOLDS} images")
    phi_map = PhiMap().fit(descriptors)
    if phi_map.n_images != labels.size:
        raise ValueError(f"{phi_map.n_images} descriptor rows but {labels.size} labels")
    return build_testbed(
        name,
        phi_map.feature_names,
        phi_map.phi,
        labelled_source(labels),
        np.arange(labels.size),
        seed,
        train_rows,
        max_val_queries,
        max_test_queries,
    )


SYNTHETIC_IMAGES = 20_000


def served_testbed(
    served: ServedCollection,
    seed: int = 0,
    train_rows: int = DEFAULT_TRAIN_ROWS,
    max_val_queries: int | None = None,
    max_test_queries: int | None = None,
    candidates: int = SERVED_CANDIDATES,
) -> CBIRTestBed:
    """A collection the feedback loop serves (`simulators.catalog`) as a test bed.

    Query images are the collection's ground-truth images, as in the feedback stream;
    each query's candidates are the `candidates` images its first-stage retrieval
    returns (`FeedbackSimulator.retrieve`), with their phi and graded relevance, so the
    test bed ranks exactly what the §5.5 stream serves. The collection is fixed data;
    `seed` drives the folds and the pair sampling.
    """
    collection = served.collection
    if not 1 <= candidates < collection.n_images:
        raise ValueError(f"need 1 <= candidates < {collection.n_images}, got {candidates}")

    def source(query: int) -> QueryCandidates:
        """`FeedbackSimulator.retrieve`'s candidates and relevance; phi only where used."""
        ids = served.index.candidates(query, candidates)
        return QueryCandidates(ids, collection.relevance(query, ids))

    return _collection_testbed(
        collection, source, seed, train_rows, max_val_queries, max_test_queries
    )


DATABASE_SAMPLE = 1_000


def sampled_testbed(
    collection: ImageCollection,
    seed: int = 0,
    train_rows: int = DEFAULT_TRAIN_ROWS,
    max_val_queries: int | None = None,
    max_test_queries: int | None = None,
    sample_size: int = DATABASE_SAMPLE,
) -> CBIRTestBed:
    """The paper's standard-dataset test bed (Table 2) on a collection too big to rank whole.

    On Holiday, Caltech101, ImageCLEF and Corel the paper ranks the whole database for
    each query. Here each query ranks a uniform random sample of `sample_size` other
    images instead (its own sample, from `seed` and the query): precision at each
    recall level, and so AP, is preserved in expectation under uniform sampling, so
    the test mAP estimates the whole-database mAP at a fraction of the memory (phi of
    70,000 candidates for each of 2,250 queries would be 23 GB). Training pairs come
    from the training queries' samples, so they hold relevant images against a
    random choice of the rest, as the paper's "all relevant images and a sample of
    the irrelevant ones". Query images are the ground-truth images.
    """
    n = collection.n_images
    if not 1 <= sample_size < n:
        raise ValueError(f"need 1 <= sample_size < {n}, got {sample_size}")

    def source(query: int) -> QueryCandidates:
        rng = np.random.default_rng([seed, query])
        ids = rng.choice(n - 1, size=sample_size, replace=False)
        ids[ids >= query] += 1  # every image but the query itself
        return QueryCandidates(ids, collection.relevance(query, ids))

    return _collection_testbed(
        collection, source, seed, train_rows, max_val_queries, max_test_queries
    )


def _collection_testbed(
    collection: ImageCollection,
    source: CandidateSource,
    seed: int,
    train_rows: int,
    max_val_queries: int | None,
    max_test_queries: int | None,
) -> CBIRTestBed:
    """`build_testbed` over a collection's ground-truth images, its phi and its names."""
    return build_testbed(
        collection.name,
        collection.feature_names,
        collection.phi,
        source,
        collection.ground_truth_ids,
        seed,
        train_rows,
        max_val_queries,
        max_test_queries,
    )


def load_synthetic_testbed(
    seed: int = 0,
    train_rows: int = DEFAULT_TRAIN_ROWS,
    max_val_queries: int | None = None,
    max_test_queries: int | None = None,
    n_images: int = SYNTHETIC_IMAGES,
    candidates: int = SERVED_CANDIDATES,
    collection_seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
    progress: Callable[[str], None] | None = None,
) -> CBIRTestBed:
    """The synthetic collection (`simulators.collection`) as a graded-relevance test bed.

    The collection and its candidate index are built once per `collection_seed` and
    cached under `cache_dir`, which it needs (`simulators.collection.load_served`);
    see `served_testbed` for queries and candidates (relevance: 2 same topic, 1 same
    super-topic, 0 otherwise).
    """
    if cache_dir is None:
        raise ValueError("the synthetic test bed needs a cache_dir for its collection")
    if progress is not None:
        progress(f"synthetic collection of {n_images:,} images and its index")
    served = load_served(
        cache_dir, progress=False, n_images=n_images, collection_seed=collection_seed
    )
    return served_testbed(
        served, seed, train_rows, max_val_queries, max_test_queries, candidates=candidates
    )
