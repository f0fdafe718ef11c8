"""Reservoir triplets -> training sets -> fitted cMDS-DML / RankMKL -> stored state -> scorers.

The batch worker keeps a uniform sample of triplet records; this module is everything
between that sample and a model the evaluator and the simulator can rank with. It knows
nothing of Kafka or Redis: a fit returns the (meta, arrays) a store saves, and a scorer
is rebuilt from exactly that (meta, arrays), so what is served is what was fitted.

Points. phi(q, p) is query-dependent (the d similarities between query q and image
p; d = 36 in the paper), so a *point* is a (query, image) pair, not an image: the same
image under two queries has two different phi rows and possibly two different
relevance grades. The sample's triplets (a `TripletBlock` from the batch worker's
`ranking.reservoir.TripletReservoir`) are therefore turned into points deduplicated by
(query_id, image id) (the first occurrence wins: the p1 points in sample order, then
the p2 points; a (query, image) pair always carries the same phi and grade). Its
graded relevance is an ordinal label of that phi row: a higher grade means "more
similar to what the user was looking for", which is exactly the kind of ordinal target
cMDS-DML learns a metric for.

Both models see phi through a `Standardizer` fitted on the deduplicated reservoir
points, stored with the model (DESIGN: the feature scaling travels in the meta/arrays).
Every fit stores the width it was trained on (meta `phi_dim`, `ranking.WIDTH_KEY`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.ranking import DEFAULT_PHI_DIM, WIDTH_KEY
from rankstream.ranking.baselines import UniCon
from rankstream.ranking.scaling import Standardizer
from rankstream.ranking.triplets import TripletBlock
from rankstream.ranking.validation import as_float_matrix

MEASURES_PER_DESCRIPTOR = 4
CMDS_DML, RANKMKL = "cmds_dml", "rankmkl"
BATCH_KINDS = (CMDS_DML, RANKMKL)


def descriptor_groups(width: int) -> tuple[slice, ...]:
    """RankMKL's kernels: one per descriptor, i.e. per run of 4 consecutive phi columns.

    simulators.collection.Collection.feature_names is descriptor-major: columns 4g..4g+3
    are descriptor g under the four similarity measures (the paper's 9 x 4 = 36). Any
    other width is read the same way, its last group holding the remaining columns.
    """
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    step = MEASURES_PER_DESCRIPTOR
    return tuple(slice(g, min(g + step, width)) for g in range(0, width, step))


def descriptor_group_sizes(width: int) -> tuple[int, ...]:
    """RankMKL's `group_sizes` at `width`: the sizes of `descriptor_groups(width)`."""
    return tuple(g.stop - g.start for g in descriptor_groups(width))


# --- training sets -------------------------------------------------------------------
def check_sample(sample: TripletBlock) -> TripletBlock:
    """The reservoir's sample, checked once: finite phi, untied grades, some triplets."""
    if len(sample) == 0:
        raise ValueError("the sample holds no triplets")
    as_float_matrix(sample.phi, "phi", sample.dim)  # finiteness
    if np.any(np.asarray(sample.rel1) == np.asarray(sample.rel2)):
        raise ValueError("tied relevance (rel1 == rel2) in the sample; ties carry no order")
    return sample


@dataclass(frozen=True)
class RankedPoints:
    """Distinct (query, image) points with grades, and the sample's pairs over them."""

    phi: np.ndarray  # (m, d) float64
    labels: np.ndarray  # (m,) float64 graded relevance
    keys: np.ndarray  # (m, 2) int64 (query_id, image id)
    pairs: np.ndarray  # (n, 2) int64 point indices (more relevant, less relevant)


def ranked_points(sample: TripletBlock) -> RankedPoints:
    """Deduplicate phi rows by (query, image) and orient every triplet as (better, worse)."""
    check_sample(sample)
    n = len(sample)
    keys = np.concatenate(
        [
            np.column_stack([sample.query_id, sample.p1_id]),
            np.column_stack([sample.query_id, sample.p2_id]),
        ]
    ).astype(np.int64)
    phi = np.concatenate([sample.phi1, sample.phi2]).astype(np.float64)
    labels = np.concatenate([sample.rel1, sample.rel2]).astype(np.float64)
    unique_keys, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    left, right = inverse[:n], inverse[n:]
    first_better = np.asarray(sample.rel1) > np.asarray(sample.rel2)
    pairs = np.column_stack(
        [np.where(first_better, left, right), np.where(first_better, right, left)]
    ).astype(np.int64)
    return RankedPoints(phi[first], labels[first], unique_keys, pairs)


# --- state helpers -------------------------------------------------------------------
def _prefixed(prefix: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {f"{prefix}.{k}": v for k, v in arrays.items()}


def _unprefixed(prefix: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    start = f"{prefix}."
    return {k[len(start) :]: v for k, v in arrays.items() if k.startswith(start)}


def _check_kind(meta: dict[str, Any], kind: str) -> None:
    if meta.get("kind") != kind:
        raise ValueError(f"state kind {meta.get('kind')!r} is not {kind!r}")


# --- cMDS-DML ------------------------------------------------------------------------
@dataclass(frozen=True)
class CMDSDMLParams:
    """The grid a refit validates on held-out reservoir queries, and the descent's budget.

    Why validate (and not fix numbers): on generator version 2 the former fixed choice
    (s = 3 from the first three phi columns, K = 15, 300 iterations) scored NDCG@50 0.61
    against Uni-Con's 0.80. Two causes, measured on the demo's refit samples (seed 0):
    (1) eq. (10)'s free scale c collapses (c 1 -> 0.06 in 5 iterations, < 0.003 by 300,
    sometimes negative): pooled over queries the grades are a weak linear function of
    phi, so the fitting term is least at c -> 0, and every further iteration moves L
    away from the neighbourhoods (s = 36 from the identity: 0.833 at 0 iterations, 0.822
    at 30, 0.647 at 300); (2) the scorer's kNN mean over K = 15 grades pooled from other
    queries is too noisy: Euclidean kNN on standardized phi: 0.833 / 0.853 / 0.859 / 0.857
    at K = 15 / 50 / 150 / 400 on synthetic, 0.816 / 0.828 / 0.842 / 0.851 at K = 15 / 50 /
    150 / 400 on Fashion-MNIST (Uni-Con 0.801 / 0.848). And s = 3 keeps too little
    (principal axes, no descent: 0.761). So s = the full width (L0 = the identity, which
    the descent leaves only where held-out queries say it helps), the stopping rule
    `tols` (1.0 stops before the first step) and the scorer's K `score_neighbors` are
    chosen per refit by held-out pair accuracy (`validate_cmds_dml`), the kNN MAE of
    `rankstream eval dml` being no guide here (it rises with K on synthetic while
    NDCG@50 rises too, and is flat on Fashion-MNIST). `n_neighbors` is the DML's target
    neighbours (S3); `max_iter` bounds the refit's one descent. The Armijo trials start
    from the paper's fixed gamma (`adaptive_gamma=False`): the Barzilai-Borwein step
    reaches the degenerate c -> 0 region in fewer iterations.
    """

    n_components: int = DEFAULT_PHI_DIM  # capped at the width (CMDSDML: s <= d)
    n_neighbors: int = 15
    score_neighbors: tuple[int, ...] = (15, 50, 150, 400)
    tols: tuple[float, ...] = (1.0, 0.3, 0.1, 0.03)
    mu: float = 0.01
    max_iter: int = 30
    adaptive_gamma: bool = False
    validation_fraction: float = 0.25  # of the sample's queries, held out to choose
    seed: int = 0  # which queries are held out

    def __post_init__(self) -> None:
        if not self.score_neighbors or min(self.score_neighbors) < 1:
            raise ValueError(f"score_neighbors must be >= 1, got {self.score_neighbors}")
        if not self.tols or not all(np.isfinite(t) and t >= 0 for t in self.tols):
            raise ValueError(f"tols must be finite and >= 0, got {self.tols}")
        if not 0.0 < self.validation_fraction < 1.0:
            raise ValueError(
                f"validation_fraction must lie in (0, 1), got {self.validation_fraction}"
            )


class CMDSDMLScorer:
    """Predicted relevance of candidates: kNN regression in the learned cMDS-DML space.

    score = mean grade of the K nearest reservoir points (in L x, x the standardized
    phi) minus a tie-break  d / (1 + d) / (2K), d = the mean distance to those K points.
    The grades are integers, so distinct neighbour means differ by at least 1/K, and
    the tie-break (< 1/(2K)) only orders candidates whose means are equal: the closer a
    candidate sits to its neighbours, the more we trust their verdict. Without it, a
    handful of grades would leave most of a top 50 tied.
    """

    def __init__(
        self,
        scaler: Standardizer,
        components: np.ndarray,
        reference: np.ndarray,
        labels: np.ndarray,
        n_neighbors: int,
    ) -> None:
        if reference.shape[0] < 1 or reference.shape[1] != components.shape[0]:
            raise ValueError(
                f"reference points {reference.shape} do not match {components.shape[0]} components"
            )
        self.scaler, self.components = scaler, components
        self.reference, self.labels = reference, labels
        self.n_neighbors = int(min(n_neighbors, reference.shape[0]))
        self._reference_sq = np.einsum("ij,ij->i", reference, reference)

    def embed(self, phi: np.ndarray) -> np.ndarray:
        return self.scaler.transform(phi) @ self.components.T

    def neighbors(self, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(distances, indices) of each row's K nearest reference points, unordered.

        Brute force: at the full width (36-d) a k-d tree visits most of its leaves and
        was slower than one matrix product (~20 ms vs a few ms per 300 candidates).
        """
        embedded = self.embed(phi)
        squared = (
            np.einsum("ij,ij->i", embedded, embedded)[:, None]
            + self._reference_sq[None, :]
            - 2.0 * embedded @ self.reference.T
        )
        k = self.n_neighbors
        nearest = np.argpartition(squared, k - 1, axis=1)[:, :k]
        distances = np.sqrt(np.maximum(np.take_along_axis(squared, nearest, axis=1), 0.0))
        return distances, nearest

    def score(self, phi: np.ndarray) -> np.ndarray:
        k = self.n_neighbors
        distances, neighbors = self.neighbors(phi)
        mean_grade = self.labels[neighbors].mean(axis=1)
        mean_distance = distances.mean(axis=1)
        return mean_grade - mean_distance / (1.0 + mean_distance) / (2.0 * k)

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> CMDSDMLScorer:
        _check_kind(meta, CMDS_DML)
        # cMDS-DML and RankMKL import scikit-learn (+8 s here): a process loads only its kinds
        from rankstream.ranking.dml import CMDSDML

        scaler = Standardizer.from_state(meta["scaler"], _unprefixed("scaler", arrays))
        dml = CMDSDML.from_state(meta["dml"], _unprefixed("dml", arrays))
        # The DML's own preprocessing (centring, RMS scale) is folded into `transform`;
        # kNN only needs differences, so the centring's offset is irrelevant here.
        components = dml.components_
        width = int(meta.get(WIDTH_KEY, DEFAULT_PHI_DIM))
        if components.shape[1] != width or scaler.dim != width:
            raise ValueError(
                f"cmds_dml components have {components.shape[1]} columns and its scaler "
                f"{scaler.dim}; the model's width is {width}"
            )
        reference = np.asarray(arrays["reference"], dtype=np.float64)
        labels = np.asarray(arrays["labels"], dtype=np.float64)
        if reference.ndim != 2 or labels.shape != (reference.shape[0],):
            raise ValueError(
                f"cmds_dml reference {reference.shape} and labels {labels.shape} disagree"
            )
        return cls(scaler, components, reference, labels, int(meta["n_neighbors"]))


def held_out_queries(query_ids: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Mask of the points whose query is held out: round(fraction * queries), >= 1.

    Whole queries, since the scorer ranks the candidates of queries it has not seen. A
    sample of one query has nothing to hold out: an all-False mask.
    """
    queries = np.unique(query_ids)
    if len(queries) < 2:
        return np.zeros(len(query_ids), dtype=bool)
    count = min(max(round(fraction * len(queries)), 1), len(queries) - 1)
    held = np.random.default_rng(seed).choice(queries, count, replace=False)
    return np.isin(query_ids, held)


def pair_accuracy(scores: np.ndarray, pairs: np.ndarray) -> float:
    """Share of (better, worse) pairs scored in that order; a tie counts half."""
    better, worse = scores[pairs[:, 0]], scores[pairs[:, 1]]
    return float(np.mean((better > worse) + 0.5 * (better == worse)))


@dataclass(frozen=True)
class CMDSDMLChoice:
    """The validated setting and how it and Uni-Con ranked the held-out pairs."""

    tol: float
    n_neighbors: int
    pair_accuracy: float | None  # None: one query, nothing held out (the grid's first)
    uni_con_pair_accuracy: float | None
    held_out_queries: int


def _dml(params: CMDSDMLParams, tol: float) -> Any:
    # scikit-learn again (see `CMDSDMLScorer.from_state`)
    from rankstream.ranking.dml import CMDSDML

    return CMDSDML(
        n_components=params.n_components,
        n_neighbors=params.n_neighbors,
        mu=params.mu,
        max_iter=params.max_iter,
        tol=tol,
        adaptive_gamma=params.adaptive_gamma,
    )


def validate_cmds_dml(
    points: RankedPoints, scaler: Standardizer, params: CMDSDMLParams
) -> CMDSDMLChoice:
    """Choose the stopping tol and the scorer's K on held-out queries of the sample.

    One descent on the other queries' points (`CMDSDML.staged_fit` yields it at every
    tol), each stage and K scored as the served scorer would score (`CMDSDMLScorer`),
    by the held-out triplets' pair accuracy; the first best in (largest tol, smallest K)
    order wins, so an equal score keeps the shorter descent and the smaller K. Uni-Con
    is scored on the same pairs, for the record (meta `validation`).
    """
    held = held_out_queries(points.keys[:, 0], params.validation_fraction, params.seed)
    tols = sorted(set(params.tols), reverse=True)
    ks = sorted(set(params.score_neighbors))
    fit = ~held
    held_pairs = points.pairs[held[points.pairs[:, 0]]]  # a pair never spans two queries
    if not held.any() or len(held_pairs) == 0 or fit.sum() < 2:
        return CMDSDMLChoice(tols[0], ks[0], None, None, 0)
    Z = scaler.transform(points.phi)
    descent = _dml(params, tols[0]).staged_fit(Z[fit], points.labels[fit], tols)
    stages = {tol: model.components_.copy() for tol, model in zip(tols[::-1], descent, strict=True)}
    rows = []
    for tol in tols:
        components = stages[tol]
        reference = Z[fit] @ components.T
        for k in ks:
            scorer = CMDSDMLScorer(scaler, components, reference, points.labels[fit], k)
            scores = np.zeros(len(points.labels))
            scores[held] = scorer.score(points.phi[held])
            rows.append((pair_accuracy(scores, held_pairs), tol, k))
    accuracy, tol, k = max(rows, key=lambda row: row[0])  # max keeps the first best
    uni_con = UniCon(scaler).score(points.phi)
    return CMDSDMLChoice(
        tol,
        k,
        accuracy,
        pair_accuracy(uni_con, held_pairs),
        len(np.unique(points.keys[held, 0])),
    )


def fit_cmds_dml(
    sample: TripletBlock, params: CMDSDMLParams = CMDSDMLParams()
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Validate tol and K (`validate_cmds_dml`), fit on every point with them; state =
    scaler + DML + embedded reference set."""
    points = ranked_points(sample)
    scaler = Standardizer().fit(points.phi)
    choice = validate_cmds_dml(points, scaler, params)
    Z = scaler.transform(points.phi)
    dml = _dml(params, choice.tol).fit(Z, points.labels)
    dml_meta, dml_arrays = dml.to_state()
    scaler_meta, scaler_arrays = scaler.to_state()
    meta = {
        "kind": CMDS_DML,
        WIDTH_KEY: sample.dim,
        "n_neighbors": choice.n_neighbors,
        "n_points": len(points.labels),
        "n_triplets": len(sample),
        "validation": dataclasses.asdict(choice),
        "dml": dml_meta,
        "scaler": scaler_meta,
    }
    arrays = {
        **_prefixed("dml", dml_arrays),
        **_prefixed("scaler", scaler_arrays),
        "reference": Z @ dml.components_.T,
        "labels": points.labels,
    }
    return meta, arrays


# --- RankMKL -------------------------------------------------------------------------
@dataclass(frozen=True)
class RankMKLParams:
    """`max_pairs` bounds the training pairs (RankMKL's kernels are n x n over their points)."""

    # declared as options (`workers.options` reads this metadata: `--mkl-kernel`,
    # `--mkl-pairs`), without importing the CLI's machinery into ranking
    kernel: str = field(
        default="linear",
        metadata={
            "help": "RankMKL base kernel per descriptor group",
            "choices": ("linear", "chi2"),
        },
    )
    C: float = field(default=1.0, metadata={"cli": False})
    max_pairs: int = field(
        default=1500,
        metadata={
            "help": "RankMKL trains on at most P reservoir pairs",
            "name": "pairs",
            "metavar": "P",
        },
    )
    seed: int = field(default=0, metadata={"cli": False})  # `worker batch` sets the reservoir's


class RankMKLScorer:
    """f(phi) = RankMKL decision function on the descriptor groups of standardized phi.

    Kernels: one per descriptor (its 4 similarity columns). The default is linear:
    the columns are already similarities (no histogram for chi2 to compare), and a
    linear kernel per group makes RankMKL a group-weighted linear ranker whose scoring
    is one matrix-vector product per group, cheap enough to score every judged query.
    With kernel="chi2" the standardized columns are shifted by the training minimum so
    they are non-negative; candidates below that minimum are clipped to 0.
    """

    def __init__(self, scaler: Standardizer, model: Any, shift: np.ndarray | None) -> None:
        self.scaler, self.model, self.shift = scaler, model, shift

    def features(self, phi: np.ndarray) -> np.ndarray:
        Z = self.scaler.transform(phi)
        if self.shift is not None:
            Z = np.maximum(Z - self.shift, 0.0)
        return Z

    def score(self, phi: np.ndarray) -> np.ndarray:
        return self.model.decision_function(self.features(phi))

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> RankMKLScorer:
        _check_kind(meta, RANKMKL)
        from rankstream.ranking.mkl import RankMKL

        scaler = Standardizer.from_state(meta["scaler"], _unprefixed("scaler", arrays))
        model = RankMKL.from_state(meta["mkl"], _unprefixed("mkl", arrays))
        width = int(meta.get(WIDTH_KEY, DEFAULT_PHI_DIM))  # stored before widths: the paper's
        groups = descriptor_groups(width)
        if len(model.kinds_) != len(groups) or scaler.dim != width:
            raise ValueError(
                f"rankmkl state has {len(model.kinds_)} kernels and a {scaler.dim}-wide "
                f"scaler; width {width} needs {len(groups)} kernels"
            )
        shift = arrays.get("shift")
        shift = None if shift is None else np.asarray(shift, np.float64)
        return cls(scaler, model, shift)


def sample_pairs(pairs: np.ndarray, max_pairs: int, seed: int) -> np.ndarray:
    """At most `max_pairs` distinct pairs, uniformly, reproducibly from `seed`."""
    pairs = np.unique(pairs, axis=0)
    if len(pairs) > max_pairs:
        rng = np.random.default_rng(seed)
        pairs = pairs[np.sort(rng.choice(len(pairs), size=max_pairs, replace=False))]
    return pairs


def fit_rankmkl(
    sample: TripletBlock, params: RankMKLParams = RankMKLParams()
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Fit on (a bounded sample of) the reservoir's pairs; state = scaler + RankMKL (+ shift)."""
    # scikit-learn again (see `CMDSDMLScorer.from_state`)
    from rankstream.ranking.mkl import RankMKL

    if params.max_pairs < 1:
        raise ValueError(f"max_pairs must be >= 1, got {params.max_pairs}")
    points = ranked_points(sample)
    scaler = Standardizer().fit(points.phi)
    pairs = sample_pairs(points.pairs, params.max_pairs, params.seed)
    used, local = np.unique(pairs, return_inverse=True)
    local = local.reshape(pairs.shape)
    Z = scaler.transform(points.phi[used])
    shift = None
    if params.kernel == "chi2":
        shift = Z.min(axis=0)
        Z = Z - shift
    model = RankMKL(
        group_sizes=descriptor_group_sizes(sample.dim),
        kernels=params.kernel,
        C=params.C,
        random_state=params.seed,
    )
    model.fit_pairs(Z, local)
    mkl_meta, mkl_arrays = model.to_state()
    scaler_meta, scaler_arrays = scaler.to_state()
    meta = {
        "kind": RANKMKL,
        WIDTH_KEY: sample.dim,
        "n_pairs": len(pairs),
        "n_points": len(used),
        "n_triplets": len(sample),
        "kernel_weights": [float(w) for w in model.weights_],
        "mkl": mkl_meta,
        "scaler": scaler_meta,
    }
    arrays = {**_prefixed("mkl", mkl_arrays), **_prefixed("scaler", scaler_arrays)}
    if shift is not None:
        arrays["shift"] = shift
    return meta, arrays


# --- registry ------------------------------------------------------------------------
SCORER_STATES = {CMDS_DML: CMDSDMLScorer.from_state, RANKMKL: RankMKLScorer.from_state}


def scorer_from_state(kind: str, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Any:
    """The scorer of a stored batch model (`selection.scoring` wraps it in its checks)."""
    rebuild = SCORER_STATES.get(kind)
    if rebuild is None:
        raise ValueError(f"kind {kind!r} is not a batch model; batch kinds are {BATCH_KINDS}")
    return rebuild(meta, arrays)
