"""Online pairwise rankers: OPR, OPAR-I, OPAR-II, OGDR and AROW.

Each streamed triplet (q, p1, p2) with label y in {+1, -1} arrives as the row
x = phi(q, p1) - phi(q, p2). With margin m = y w.x and hinge loss l = max(0, 1 - m),
the four rules of Gao et al., "Online Learning to Rank for Content-Based Image
Retrieval" (IJCAI 2015; /work/shared/papers/online-ltr-cbir_opr-opar-ogdr.txt) are

* OPR, eq. (1):      w += y x            when m <= 0
* OPAR-I, eqs. (4)-(5): w += min(C, l / |x|^2) y x
* OPAR-II, eq. (4) with the lambda_t that follows (5):
                     w += l / (|x|^2 + 1/(2C)) y x
* OGDR, eq. (7):     w += eta y x        when l > 0

and a row with |x|^2 = 0 (as computed in float64, so a row whose entries all lie
below ~1e-154 counts as zero) changes nothing.

Importance weights. A row may carry a weight s >= 0 (a click pair's inverse
propensity, `ranking.click_pairs`): how much that one observation counts. Each rule
learns it in the importance-weighted form of its own objective, the loss term
multiplied by s (s = 1: bit for bit the unweighted rule; s = 0: the row is skipped):

* OPR: w += s y x when m <= 0 (the perceptron's step on s times the loss -m);
* OPAR-I: w += min(s C, l / |x|^2) y x: PA-I with the slack's cost C scaled to s C.
  For an integer s = k this equals learning the row k times in a row (k steps of at
  most C each stop where the loss reaches 0), up to rounding;
* OPAR-II: w += l / (|x|^2 + 1/(2 s C)) y x: PA-II with s C;
* OGDR: w += s eta y x when l > 0: a gradient step on s l;
* AROW: r / s in place of r (beta = 1 / (x' Sigma x + r / s)): the loss and
  confidence terms of its objective weighted by s. With l > 0 AROW's update is a
  Kalman update of w.x towards y with noise r, and k equal observations with noise r
  are one with noise r / k, so an integer s = k again equals the row learned k times
  (the loss stays > 0 after each), up to rounding. One reading choice: the paper's OPR
updates when m < 0; we update when m <= 0, because with w = 0 every margin is 0 and
the strict reading would never move (docs/architecture.md makes the same call).

Click triplets. Pairs read from clicks (`ranking.click_pairs`, learned with
`clicks=True`: the online worker's importance-weighted blocks, the click join's) are
not the papers' judged triplets: most of them are noise (a user clicks irrelevant
results too), and IPS makes them unbiased only because every pair comes both ways at
equal expected weight. Inside the margin the two ways cancel and a rule adds the
attractiveness difference; beyond it only the update against the current order is
taken, so the minimizer of the *unregularized* IPS hinge loss, which the rules above
reach within a few hundred impressions, is set by the pairs' largest x (the vertex of
|w.x| <= 1), not by the clicks (with almost-random users it ranks 0.05-0.39 NDCG@50
below Uni-Con). So on click rows the four linear rules minimise the *regularized* IPS
objective of Propensity SVM-Rank (Joachims, Swaminathan & Schnabel, "Unbiased
Learning-to-Rank with Biased Feedback", WSDM 2017: 1/2 ||w - a||^2 + C sum_i s_i
hinge_i) online, anchored at a = Uni-Con's direction, the engine's incumbent: after
each rule's own step on a row of weight s,

    w <- a + (1 - rho)(w - a),   rho = s |x|^2 / (2 d click_memory),

a proximal (weight-decay) step, and the rule's step parameter (C, eta; OPR's step,
1 on judged rows) is click_reach / (2 d click_memory). |x|^2 / (2 d) is ~1 for a pair
of standardized rows, so both are free of the features' scale and width. In the rules'
linear regime (every margin < 1, which these values keep: mean |w.x| ~0.5 on the
engine's pairs) w - a settles at click_reach E[s y x] / E[s |x|^2], the IPS-weighted
sum of pair differences (the "centroid") normalised, remembered over ~click_memory
unit-weight pairs: with no signal a learner stays at the anchor's ranking, with signal
it moves towards the centroid. The anchor is Uni-Con's direction (`uni_con_direction`:
equal weights on phi standardized over the candidates, mapped into the ranker's
standardized space; all ones there unless `anchor_towards` gives it) scaled to a mean
|margin| of click_prior on the first click rows a ranker learns (no scaler: anchored at
0, plain decay). OPR's perceptron is
scale-free and mistake-driven, so the paper's step 1 on noisy pairs is a random walk.
On click rows it is the perceptron started from the anchor with a step and the same
shrink, but its step must be smaller than the hinge rules': it updates only on
mistakes, which under noise lie against the current order, so every step pulls w
towards 0 by a fixed amount whatever |w| (the hinge rules, inside the margin, update on
both ways of a pair and the pulls cancel). With click_reach's step that pull erodes
the anchor and leaves noise (pure-noise pairs: 0.55-0.70 of image pairs ordered as the
anchor orders them; the replay at width 12: 0.021 NDCG@50 below Uni-Con). OPR's step is
therefore click_prior / (2 d click_memory): a / step, the perceptron's start in units
of its step, is then the same for every click_prior, and it keeps the anchor's ranking
under noise while still moving on consistent mistakes. On click rows OPAR-I's cap s C is far below
l / |x|^2, so OPAR-I takes OGDR's step; OPAR-II's l / (|x|^2 + 1/(2 s C)) stays its own.
Judged rows (`clicks=False`, the default) keep the papers' rules exactly, weighted or
not. AROW has no such reading (its r already bounds its steps).

AROW is the second-order rule the paper points to (Dredze et al., 2008) in the form
of Crammer, Kulesza & Dredze, "Adaptive Regularization of Weight Vectors", NIPS 2009,
applied to pair differences with a full covariance Sigma (d x d, starting at I):
beta = 1 / (x' Sigma x + r), and when l > 0: alpha = l beta, w += alpha y Sigma x,
Sigma -= beta (Sigma x)(Sigma x)'.

Each learner is declared once in `ranking.learners` (name, label, hyper-parameters,
kernel). The sequential loops are compiled with numba (`ranking.kernels`, cache=True:
the compile is paid once per machine); the four linear rules share one loop and differ
only in the step size chosen through their spec's rule code, as river's
`linear_model/pa.py` dispatches its PA variants; AROW runs its own compiled loop, and
a learner added with `ranking.learners.register` its own kernel on the validated rows.
The compiled loops read triplets in their normalized form (an image table phi and row
indices p1, p2; `learn_many_together`) and gather x = phi[p1] - phi[p2] themselves.

`OnlineRanker` is also a river binary classifier of x (label: p1 ranks first), so it
learns river's dict rows and datasets, sits in `river.compose.Pipeline` and runs in
`river.evaluate.progressive_val_score`; a dict row or a data frame is turned into a
dense row in the model's column order (`ranking.feature_keys`) and learned through the
same compiled pass as an array.

Example: learn that the first feature decides the order.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = rng.standard_normal((500, 3))
>>> y = np.where(X[:, 0] > 0, 1.0, -1.0)
>>> ranker = OnlineRanker(algo="opar1", C=0.1).learn_many(X, y)
>>> int(np.argmax(np.abs(ranker.weights)))
0
>>> ranker.score(np.eye(3)).shape
(3,)
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from river import base

from rankstream.ranking import aot, learners
from rankstream.ranking.feature_keys import FeatureKeys, Placement, is_position
from rankstream.ranking.rules import BAD_LABEL, NONFINITE, OPR_RULE
from rankstream.ranking.scaling import Standardizer, linear_scores, store_scaler, stored_scaler
from rankstream.ranking.validation import as_float_matrix, as_float_vector

_NONFINITE_WEIGHTS = "this batch would make the weights non-finite; model unchanged"
_ANCHOR = "click_anchor"  # the stored anchor of click triplets' reading

# OnlineRanker's own attributes, which no hyper-parameter may take (each becomes one)
_RESERVED = frozenset({"algo", "scaler", "warm_start", "dim", "features", "n_seen", "n_updates"})


def _first_bad_row(X: np.ndarray, labels: np.ndarray) -> ValueError | None:
    """The error for the first row a kernel must not see (a bad label, NaN/Inf), if any."""
    bad_label = np.flatnonzero((labels != 1.0) & (labels != -1.0))
    nonfinite = np.flatnonzero(~np.isfinite(X).all(axis=1))
    first = min(bad_label[:1].tolist() + nonfinite[:1].tolist(), default=None)
    if first is None:
        return None
    status = BAD_LABEL if bad_label.size and bad_label[0] == first else NONFINITE
    return _batch_error(status, first, labels)


def _labels(y: object, n: int) -> np.ndarray:
    """y as float64 (n,): booleans (True: p1 first) become +1/-1; numbers are kept, and
    their +1/-1 check runs in the compiled pass (it names the row)."""
    labels = np.asarray(y)
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ValueError(f"y must have shape ({n},) to match the rows, got {labels.shape}")
    if labels.dtype == bool:
        return _readonly(np.where(labels, 1.0, -1.0))
    if not np.issubdtype(labels.dtype, np.number):
        raise ValueError(f"y must be True/False or +1/-1 labels, got dtype {labels.dtype}")
    return _readonly(np.ascontiguousarray(labels, dtype=np.float64))


def _batch_error(status: int, bad_row: int, labels: np.ndarray) -> ValueError | None:
    """The ValueError `learn_many` raises for a kernel status, or None when OK."""
    if status == BAD_LABEL:
        return ValueError(f"y[{bad_row}] = {labels[bad_row]!r}; labels must be True/False or +1/-1")
    if status == NONFINITE:
        return ValueError(f"X row {bad_row} contains NaN or Inf (or values too large)")
    return None


def _weights(w: object, n: int) -> np.ndarray | None:
    """Importance weights as read-only float64 (n,), or None (unweighted): a scalar
    applies to every row; ValueError naming the first weight that is not finite >= 0."""
    if w is None:
        return None
    weights = np.asarray(w, dtype=np.float64) if not isinstance(w, str) else None
    if weights is None or weights.ndim > 1:
        raise ValueError(f"w must be a number or one weight per row, got {w!r}")
    if weights.ndim == 0:
        weights = np.full(n, float(weights))
    if weights.shape != (n,):
        raise ValueError(f"w must have shape ({n},) to match the rows, got {weights.shape}")
    bad = np.flatnonzero(~(np.isfinite(weights) & (weights >= 0.0)))
    if bad.size:
        raise ValueError(f"w[{bad[0]}] = {float(weights[bad[0]])}; weights must be finite and >= 0")
    return _readonly(np.ascontiguousarray(weights))


def _readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view: decoded blocks are read-only, and numba compiles (and caches)
    one specialisation per writability, so every input is handed over read-only."""
    if not array.flags.writeable:
        return array
    view = array.view()
    view.flags.writeable = False
    return view


def _learn_linear_models(
    rankers: Sequence[OnlineRanker],
    phi: np.ndarray,
    p1: np.ndarray | None,
    p2: np.ndarray | None,
    labels: np.ndarray,
    weights: np.ndarray | None,
    clicks: bool = False,
) -> list[ValueError | None]:
    """Run `learn_linear` for linear rankers whose width is known; commit each that passed.

    Rankers sharing a scaler (equal std, e.g. fitted on the same rows) share one
    scaled x per row. `clicks`: the rows are click triplets, learned in the regularized
    reading (the module docstring's "Click triplets"). Returns per ranker None or the
    error its `learn_many` raises.
    """
    k, d = len(rankers), phi.shape[1]
    groups: dict[bytes, int] = {}
    scales: list[np.ndarray] = []
    group = np.empty(k, dtype=np.int64)
    for m, ranker in enumerate(rankers):
        std = np.ones(d) if ranker.scaler is None else ranker.scaler.std_
        group[m] = groups.setdefault(std.tobytes(), len(groups))
        if group[m] == len(scales):
            scales.append(std)
    rules = np.array([r.spec.linear_rule for r in rankers], dtype=np.int64)
    if clicks:
        params = np.array([r._click_step() for r in rankers])
        shrink = np.array([r._click_shrink() for r in rankers])
        anchors = np.array([r._click_anchor(phi, p1, p2) for r in rankers])
    else:  # the papers' rules: OPR's full step is 1, nothing shrinks
        params = np.array([r.params[r.spec.uses[0]] if r.spec.uses else 1.0 for r in rankers])
        shrink, anchors = np.zeros(k), np.zeros((k, d))
    W = np.array([ranker._w for ranker in rankers])
    n_updates = np.zeros(k, dtype=np.int64)
    status = np.zeros(k, dtype=np.int64)
    bad_row = np.full(k, -1, dtype=np.int64)
    unscaled = all(ranker.scaler is None for ranker in rankers)
    arguments = (rules, params, W, None if unscaled else np.array(scales), group, phi, p1, p2)
    arguments += (labels, weights, shrink, anchors, n_updates, status, bad_row)
    aot.linear_kernel(*arguments)(*arguments)
    errors: list[ValueError | None] = []
    for m, ranker in enumerate(rankers):
        error = _batch_error(int(status[m]), int(bad_row[m]), labels)
        if error is None and not np.isfinite(W[m]).all():
            error = ValueError(_NONFINITE_WEIGHTS)
        if error is None:
            ranker._commit(W[m].copy(), None, int(n_updates[m]), labels.shape[0])
            if clicks and ranker._anchor is None and anchors[m].any():
                ranker._anchor = anchors[m].copy()  # fixed from its first click rows
        errors.append(error)
    return errors


def _learn(
    rankers: Sequence[OnlineRanker],
    phi: np.ndarray,
    p1: np.ndarray | None,
    p2: np.ndarray | None,
    labels: np.ndarray,
    weights: np.ndarray | None = None,
    clicks: bool = False,
) -> list[ValueError | None]:
    """Validated rows to rankers of known width: the linear ones in one fused pass,
    each other one through its own kernel; per ranker None or its error. `clicks`
    reaches the linear rules only (their regularized reading of click triplets)."""
    errors: dict[int, ValueError | None] = {}
    linear = [m for m, r in enumerate(rankers) if r.spec.linear_rule is not None]
    if linear:
        chosen = [rankers[m] for m in linear]
        found = _learn_linear_models(chosen, phi, p1, p2, labels, weights, clicks)
        errors.update(zip(linear, found, strict=True))
    for m, ranker in enumerate(rankers):
        if m not in errors:
            errors[m] = ranker._learn_own(phi, p1, p2, labels, weights)
    return [errors[m] for m in range(len(rankers))]


def _as_phi(phi: object, dim: int | None) -> np.ndarray:
    """The image table (m, d) as C-ordered float32 or float64 (kept: widened in the loop)."""
    arr = np.asarray(phi)
    if arr.dtype in (np.float32, np.float64):
        if arr.ndim != 2:
            raise ValueError(f"phi must be 2-d (m, d), got {arr.ndim}-d shape {arr.shape}")
        if dim is not None and arr.shape[1] != dim:
            raise ValueError(f"phi has {arr.shape[1]} columns, expected {dim}")
        return _readonly(np.ascontiguousarray(arr))
    return _readonly(as_float_matrix(arr, "phi", dim, check_finite=False))


def _as_rows(index: object, name: str, n_images: int) -> np.ndarray:
    """Triplets' rows of the image table as int32 (n,); each must lie in 0..m-1."""
    arr = np.asarray(index)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be 1-d integer rows of phi, got {arr.dtype} {arr.shape}")
    if arr.size:
        low, high = int(arr.min()), int(arr.max())
        if low < 0 or high >= n_images:
            bad = int(np.flatnonzero((arr < 0) | (arr >= n_images))[0])
            raise ValueError(f"{name}[{bad}] = {arr[bad]} is not a row of phi (0..{n_images - 1})")
    return _readonly(np.ascontiguousarray(arr, dtype=np.int32))


def learn_many_together(
    rankers: Sequence[OnlineRanker],
    phi: object,
    p1: object,
    p2: object,
    y: object,
    w: object = None,
    *,
    clicks: bool = False,
) -> list[ValueError | None]:
    """Every ranker learns the triplets x_i = phi[p1[i]] - phi[p2[i]] with labels y (n,)
    and importance weights w (n,) (None: unweighted; the module docstring gives each
    rule's weighted form). `clicks`: they are click triplets, which the linear rules
    learn in their regularized reading (the module docstring's "Click triplets").

    The normalized form of `ranking.triplets.TripletBlock`: phi (m, d) holds each image
    once (float32 from the wire, or float64), p1 and p2 (n,) index its rows. Equal, bit
    for bit, to `ranker.learn_many(np.subtract(phi[p1], phi[p2], dtype=np.float64), y)`
    for each ranker in turn, but no difference or gathered row is materialised: the
    compiled loops gather each row themselves, and the linear rankers share one pass
    (each row's x formed once per distinct scaler). AROW runs its own compiled pass;
    a learner with a Python kernel gets the gathered rows (the slow path).

    Rankers are independent: returns, per ranker, None or the ValueError its
    `learn_many` would have raised (that ranker unchanged, the others updated).
    Shapes and indices that fit no ranker raise ValueError at once.
    """
    rankers = list(rankers)
    if len({id(r) for r in rankers}) != len(rankers):
        raise ValueError("each ranker may appear only once")
    widths = {r.width for r in rankers} - {None}
    if len(widths) > 1:
        raise ValueError(f"rankers have different widths {sorted(widths)}")
    table = _as_phi(phi, next(iter(widths), None))
    rows1, rows2 = _as_rows(p1, "p1", table.shape[0]), _as_rows(p2, "p2", table.shape[0])
    if rows1.shape != rows2.shape:
        raise ValueError(f"p1 {rows1.shape} and p2 {rows2.shape} must have the same shape")
    labels = _labels(y, rows1.shape[0])
    weights = _weights(w, rows1.shape[0])
    for ranker in rankers:
        ranker._grow(table.shape[1])
    return _learn(rankers, table, rows1, rows2, labels, weights, clicks)


def uni_con_direction(scaler: Standardizer, candidates: object) -> np.ndarray:
    """Uni-Con's direction on `scaler`'s standardized phi: equal weights on phi
    standardized over `candidates` (m, d), the rows a ranking was asked for, as serve's
    Uni-Con standardizes the candidates it calibrates on; in the scaler's space that is
    scaler.std / std(candidates). A scaler fitted on click pairs' rows (clicked results
    repeated) has other stds, and all ones there ranked up to 0.021 NDCG@50 below Uni-Con."""
    rows = as_float_matrix(candidates, "candidates", scaler.dim)
    spread = rows.std(axis=0)
    spread[~(spread > 0)] = 1.0
    return np.asarray(scaler.std_) / spread


def _as_frame(X: object) -> Any | None:
    """X as a narwhals DataFrame when it is a data frame (pandas, polars, ...), else None.

    Arrays and lists never reach narwhals, so the numpy path imports nothing more."""
    if isinstance(X, np.ndarray | list | tuple):
        return None
    # narwhals: +0.14 s at import, river's frame helpers +0.2 s; only frames need them
    import narwhals.stable.v2 as nw

    frame = nw.from_native(X, eager_only=True, pass_through=True)
    return frame if isinstance(frame, nw.DataFrame) else None


def _probability(margins: np.ndarray) -> np.ndarray:
    """P(p1 first) = 1 / (1 + exp(-margin)), without overflow for any finite margin."""
    return np.exp(-np.logaddexp(0.0, -margins))


class OnlineRanker(base.MiniBatchClassifier):
    """A linear ranker w learned online from pair differences; score(phi) = w.phi.

    A triplet (q, p1, p2) arrives as its pair difference x = phi(q, p1) - phi(q, p2)
    with the label "p1 ranks first" (True, or +1; False or -1 when p2 does), so ranking
    is binary classification of x and the ranker is a river classifier: `learn_one(x, y)`
    with x a dict of features (or a 1-d array), `predict_one(x)` -> True when p1 ranks
    first (the margin w.x > 0), `predict_proba_one(x)` -> {False: 1 - p, True: p} with
    p = 1 / (1 + exp(-w.x)), a monotone reading of the margin rather than a calibrated
    probability, and `margin_one(x)` the margin itself. `learn_many(X, y)` takes a matrix
    of differences (n, d) through the compiled sequential loops (or a data frame, read by
    column name) and `score(Phi)` ranks candidates (m, d), higher first.

    Features. Arrays are read by column position. A dict row (or a frame's columns) is
    read by key: integer keys are column positions, other keys names in the order
    `features` declares or, undeclared, the order of first sight: the first row's keys in
    their order, then each key not seen before appended where it first comes. Absent keys
    are 0 (river's sparse convention). Until `dim`, `features`, `scaler` or `warm_start`
    fixes the width, the model grows with its data: a new key (or a position beyond the
    width) adds a column whose weight starts at 0 (AROW: Sigma gains the identity's row and
    column), exactly the model it would be had every earlier row held 0 there; a key it
    has never learned weighs 0 in a prediction. Once the width is fixed, a key outside
    it (or a name, on a model of positions) is a ValueError, in learning and predicting
    alike.

    Parameters
    ----------
    algo
        The learner, one of `ranking.learners.LEARNERS` (opr, opar1, opar2, ogdr, arow, and
        any registered since).
    scaler
        A fitted `Standardizer` the ranker learns (x / std) and scores through.
    warm_start
        Initial weights (Uni-Con is all ones on standardized phi).
    dim
        The width, fixed before any data.
    features
        The feature names in column order, fixed before any data.
    **hyper
        Hyper-parameters by name, over their declared defaults: every one of
        `ranking.learners.HYPERPARAMETERS` (C: OPAR-I's largest step and OPAR-II's
        aggressiveness; eta: OGDR's learning rate; r: AROW's regulariser; and those of
        learners registered since). Each becomes an attribute (`ranker.C`) and all are
        validated; each learner reads only those its spec declares.

    Examples
    --------

    Phishing pages told from legitimate ones, read as "the page ranks first", on river's
    bundled dataset; the model learns the names of its features from the first row.

    >>> from river import datasets, evaluate, metrics, preprocessing
    >>> model = preprocessing.StandardScaler() | OnlineRanker("arow")
    >>> evaluate.progressive_val_score(datasets.Phishing(), model, metrics.Accuracy())
    Accuracy: 88.96%
    >>> model["OnlineRanker"].feature_names[:2]
    ('empty_server_form_handler', 'popup_window')
    """

    def __init__(
        self,
        algo: str = "opar1",
        scaler: Standardizer | None = None,
        warm_start: object | None = None,
        dim: int | None = None,
        features: tuple[Hashable, ...] | None = None,
        **hyper: float,
    ) -> None:
        learners.check_names([algo])  # unknown, or an impression learner: fails here
        self.algo = algo
        values = learners.hyperparameters(hyper)  # unknown names and bad values fail here
        clash = sorted(n for n in values if n in _RESERVED or hasattr(type(self), n))
        if clash:
            raise ValueError(f"hyper-parameter names {clash} clash with OnlineRanker's own")
        for name, value in values.items():
            setattr(self, name, value)
        self._hyper_names = tuple(values)
        if scaler is not None and scaler.dim is None:
            raise ValueError("scaler must be fitted (on training phi) before use")
        self.scaler = scaler
        if dim is not None and not (is_position(dim) and dim >= 1):
            raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
        self.dim = dim
        if isinstance(features, str):
            raise ValueError("features must be a sequence of names, not one string")
        self.features = None if features is None else tuple(features)
        start = None if warm_start is None else as_float_vector(warm_start, "warm_start").copy()
        self.warm_start = start
        widths = {
            "dim": dim,
            "features": None if self.features is None else len(self.features),
            "scaler": scaler.dim if scaler is not None else None,
            "warm_start": None if start is None else start.shape[0],
        }
        known = {k: v for k, v in widths.items() if v is not None}
        if len(set(known.values())) > 1:
            raise ValueError(f"inconsistent widths: {known}")
        self._keys = FeatureKeys(self.features)
        self._grows = not known  # nothing declared the width: it follows the data
        self._width: int | None = None
        self._w: np.ndarray | None = None
        self._state: dict[str, np.ndarray] = {}  # a kernel learner's extra arrays (AROW: sigma)
        self._anchor: np.ndarray | None = None  # click triplets' anchor, set by the first ones
        self._anchor_direction: np.ndarray | None = None  # its direction; None: all ones
        self.n_updates = 0
        self.n_seen = 0
        if start is not None:
            self._w = start.copy()
        if known:
            self._grow(next(iter(known.values())))

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        """Every learner, for river's checks."""
        for algo in learners.names():
            yield {"algo": algo}

    # ------------------------------------------------------------------ state
    def _grow(self, width: int) -> None:
        """Widen to `width` columns (from none: the initial state). A new column starts
        as in a fresh model (weight 0, the spec's initial state in the new rows and
        columns: AROW's identity), which for the built-in learners is exactly the state
        after every earlier row held 0 there: such a column never moves."""
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        if self._width is not None and width <= self._width:
            return
        fresh = self.spec.initial_state(width)
        if self._width is not None:
            for name, array in self._state.items():
                fresh[name][tuple(slice(0, n) for n in array.shape)] = array
        if self._w is None or self._w.shape[0] < width:
            w = np.zeros(width)
            if self._w is not None:
                w[: self._w.shape[0]] = self._w
            self._w = w
        self._state, self._width = fresh, width

    @property
    def spec(self) -> learners.LearnerSpec:
        """The learner's declaration in `ranking.learners` (looked up: specs hold functions,
        which a pickled or cloned model must not carry)."""
        return learners.learner(self.algo)

    @property
    def width(self) -> int | None:
        """Feature width: fixed by dim/features/scaler/warm_start, else by the data so far."""
        return self._width

    @property
    def feature_names(self) -> tuple[Hashable, ...] | None:
        """The names of the columns in order (declared or fixed at first sight); None
        while the columns are positions."""
        return self._keys.names

    @property
    def weights(self) -> np.ndarray:
        """The weights w (d,), float64 (a copy); empty until the width is known."""
        return np.zeros(0) if self._w is None else self._w.copy()

    @property
    def anchor(self) -> np.ndarray | None:
        """The anchor click triplets regularize towards (a copy; the module docstring's
        "Click triplets"): None until the first click rows fix it."""
        return None if self._anchor is None else self._anchor.copy()

    # ------------------------------------------------- click triplets' reading
    def _click_shrink(self) -> float:
        """rho per unit of s |x|^2 on a click row: 1 / (2 d click_memory), |x|^2 / (2 d)
        being ~1 for a pair of standardized rows, so the memory counts unit-weight pairs."""
        return 1.0 / (2.0 * float(self._width or 1) * self.params["click_memory"])

    def _click_step(self) -> float:
        """The step parameter of the rules on click rows. C, eta: click_reach times the
        shrink, so w - anchor settles at click_reach E[s y x] / E[s |x|^2]. OPR's step:
        click_prior times the shrink, the perceptron from the anchor at a fixed ratio of
        anchor to step (the module docstring says why it needs a smaller one)."""
        if self.spec.linear_rule == OPR_RULE:
            return self.params["click_prior"] * self._click_shrink()
        return self.params["click_reach"] * self._click_shrink()

    def anchor_towards(self, direction: object) -> None:
        """The direction (d,) on the ranker's standardized phi that click triplets are
        anchored at, before the first click rows fix the anchor (`uni_con_direction`: the
        incumbent's). Without it: all ones, Uni-Con on the ranker's own scaler."""
        found = as_float_vector(direction, "direction", self._width)
        if not (found > 0).all():
            raise ValueError("an anchor direction must be positive (a Uni-Con direction)")
        self._anchor_direction = found.copy()

    def _click_anchor(
        self, phi: np.ndarray, p1: np.ndarray | None, p2: np.ndarray | None
    ) -> np.ndarray:
        """The anchor: the one fixed before, else `anchor_towards`' direction (all ones
        without one) scaled so its mean |margin| on these rows' finite, non-zero pairs is
        `click_prior`. Zeros without a scaler (no Uni-Con to anchor on: plain decay towards
        0) or without such a pair (then the next click rows fix it)."""
        width = int(self._width or 0)
        if self._anchor is not None:
            return self._anchor
        if self.scaler is None or self.scaler.std_ is None:
            return np.zeros(width)
        direction = np.ones(width) if self._anchor_direction is None else self._anchor_direction
        rows = phi if p1 is None else np.subtract(phi[p1], phi[p2], dtype=np.float64)
        with np.errstate(all="ignore"):
            uni_con = (rows[:, :width] / self.scaler.std_) @ direction
        uni_con = np.abs(uni_con[np.isfinite(uni_con) & (uni_con != 0.0)])
        if uni_con.size == 0:
            return np.zeros(width)
        return direction * (self.params["click_prior"] / float(uni_con.mean()))

    @property
    def sigma(self) -> np.ndarray | None:
        """AROW's covariance (d, d) (a copy); None for the first-order rules."""
        sigma = self._state.get("sigma")
        return None if sigma is None else sigma.copy()

    @property
    def hyper(self) -> dict[str, float]:
        """The `**hyper` given to the constructor, every one filled in (river's
        `_get_params` reads a `**` parameter back from the attribute of its name)."""
        return {name: getattr(self, name) for name in self._hyper_names}

    @property
    def params(self) -> dict[str, float]:
        """Every hyper-parameter's value (the learner reads those its spec `uses`)."""
        return self.hyper

    # ------------------------------------------------------------ reading rows
    def _dict_row(self, x: Mapping) -> tuple[np.ndarray, Placement]:
        """A dict row as a dense (1, d') row, d' the width its keys need."""
        keys = list(x)
        placement = self._keys.place(keys, self._width, self._grows)
        values = np.array(list(x.values()))
        numeric = values.dtype == bool or np.issubdtype(values.dtype, np.number)
        if values.size and not numeric:
            raise ValueError(f"feature values must be real numbers, got {x!r}")
        finite = np.isfinite(values) if values.size else np.ones(0, dtype=bool)
        if not finite.all():
            raise ValueError(f"feature {keys[int(np.argmin(finite))]!r} is NaN or Inf")
        row = np.zeros((1, placement.width or 0))
        row[0, placement.columns] = values
        return row, placement

    def _frame_rows(self, frame: Any) -> tuple[np.ndarray, Placement]:
        """A data frame's rows as a dense (n, d') matrix, its columns read by name."""
        # frames only (see `_as_frame`)
        from river.utils.dataframe import to_numpy

        placement = self._keys.place(list(frame.columns), self._width, self._grows)
        try:
            values = to_numpy(frame)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"X's columns must hold real numbers: {exc}") from None
        X = np.zeros((values.shape[0], placement.width or 0))
        X[:, placement.columns] = values
        return X, placement

    def _rows(self, X: object) -> tuple[np.ndarray, Placement | None]:
        """A batch (array, or frame read by name) as a dense matrix and its placement."""
        frame = _as_frame(X)
        if frame is not None:
            return self._frame_rows(frame)
        return as_float_matrix(X, "X", self._width, check_finite=False), None

    # --------------------------------------------------------------- learning
    def learn_many(
        self, X: object, y: object, w: object = None, clicks: bool = False
    ) -> OnlineRanker:
        """Exact sequential updates over the rows of X (n, d) with labels y (n,) and
        importance weights w (None: unweighted; a number; or (n,), finite and >= 0);
        `clicks`: the rows are click triplets (the linear rules' regularized reading,
        the module docstring's "Click triplets").

        X is an array of pair differences, or a data frame (pandas, polars, ...) read by
        column name; y holds booleans (True: p1 first) or +1/-1. The whole batch is
        validated in the compiled pass and applied to copies, so a batch with a bad row
        (NaN/Inf, a label not True/False or +1/-1) raises a ValueError naming that row
        and leaves the model untouched.
        """
        rows, placement = self._rows(X)
        return self._learn_rows(rows, y, placement, w, clicks)

    def learn_one(self, x: object, y: object, w: object = None) -> OnlineRanker:
        """One pair difference x (a dict {feature: value} or a 1-d array), its label y
        (True/+1: p1 ranks first; False/-1: p2 does) and optional importance weight w;
        the same update as `learn_many`."""
        if isinstance(x, Mapping):
            row, placement = self._dict_row(x)
            if placement.width is None:
                raise ValueError("an empty row cannot be learned before the width is known")
            return self._learn_rows(row, [y], placement, w)
        return self._learn_rows(as_float_vector(x, "x", self._width)[None, :], [y], None, w)

    def _learn_rows(
        self,
        X: np.ndarray,
        y: object,
        placement: Placement | None,
        w: object = None,
        clicks: bool = False,
    ) -> OnlineRanker:
        """Learn validated-shape rows; the width grows to theirs, and back if refused."""
        labels = _labels(y, X.shape[0])
        weights = _weights(w, X.shape[0])
        before = (self._width, self._w, self._state, self._anchor)
        self._grow(X.shape[1])
        error = _learn([self], _readonly(X), None, None, labels, weights, clicks)[0]
        if error is not None:
            self._width, self._w, self._state, self._anchor = before
            raise error
        if placement is not None:
            self._keys.adopt(placement.new_names)
        return self

    def _learn_own(
        self,
        phi: np.ndarray,
        p1: np.ndarray | None,
        p2: np.ndarray | None,
        labels: np.ndarray,
        weights: np.ndarray | None = None,
    ) -> ValueError | None:
        """Learn through the spec's own kernel (not a linear rule); commit only on success.

        Weights go to the kernel as `weights=` only when given, so a kernel written
        without them still serves unweighted rows (and refuses weighted ones)."""
        w = self._w.copy()
        state = {name: array.copy() for name, array in self._state.items()}
        scale = None if self.scaler is None else self.scaler.std_
        spec = self.spec
        weighted = {} if weights is None else {"weights": weights}
        if weighted and not learners.takes_weights(spec):
            return ValueError(f"learner {self.algo!r} takes no importance weights")
        try:
            if spec.triplet_kernel is not None:
                n_updates, status, bad_row = spec.triplet_kernel(
                    w, state, phi, p1, p2, scale, labels, self.params, **weighted
                )
                error = _batch_error(int(status), int(bad_row), labels)
            else:
                X = phi if p1 is None else np.subtract(phi[p1], phi[p2], dtype=np.float64)
                error = _first_bad_row(X, labels)
                if error is None:
                    if self.scaler is not None:
                        X = self.scaler.transform_differences(X, check_finite=False)
                    n_updates = spec.kernel(w, state, X, labels, self.params, **weighted)  # type: ignore[misc]
        except ValueError as exc:
            return exc
        if error is not None:
            return error
        finite = np.isfinite(w).all() and all(np.isfinite(a).all() for a in state.values())
        if not finite:
            return ValueError(_NONFINITE_WEIGHTS)
        self._commit(w, state, int(n_updates), labels.shape[0])
        return None

    def _commit(
        self, w: np.ndarray, state: dict[str, np.ndarray] | None, n_updates: int, n: int
    ) -> None:
        self._w = w
        if state is not None:
            self._state = state
        self.n_updates += n_updates
        self.n_seen += n

    # ---------------------------------------------------------------- predicting
    def _margins(self, rows: np.ndarray) -> np.ndarray:
        """w.x of dense rows (n, d') read at the learned width: columns the model has not
        learned (d' > d) weigh 0; scaled like training rows."""
        if self._w is None:
            return np.zeros(rows.shape[0])
        rows = rows[:, : self._width]
        if self.scaler is not None:
            rows = self.scaler.transform_differences(rows)
        return rows @ self._w

    def margin_one(self, x: object) -> float:
        """w.x for one pair difference (dict or 1-d array): > 0 means p1 ranks first."""
        if isinstance(x, Mapping):
            row = self._dict_row(x)[0]
        else:
            row = as_float_vector(x, "x", self._width)[None, :]
        return float(self._margins(row)[0])

    def margin_many(self, X: object) -> np.ndarray:
        """w.x (n,) for pair differences X (n, d), an array or a frame read by name."""
        return self._margins(self._rows(X)[0])

    def predict_proba_one(self, x: object) -> dict[bool, float]:
        """{False: 1 - p, True: p}, p = 1 / (1 + exp(-w.x)): a reading of the margin."""
        p = float(_probability(np.array([self.margin_one(x)]))[0])
        return {False: 1.0 - p, True: p}

    def predict_one(self, x: object) -> bool:
        """True when p1 ranks first (w.x > 0)."""
        return self.margin_one(x) > 0.0

    def predict_proba_many(self, X: object) -> Any:
        """P(False), P(True) per row: a frame like X (columns False, True), or for an
        array an (n, 2) array in that order."""
        p = _probability(self.margin_many(X))
        frame = _as_frame(X)
        if frame is None:
            return np.column_stack([1.0 - p, p])
        # frames only (see `_as_frame`)
        from river.utils.dataframe import to_native_frame

        return to_native_frame({False: 1.0 - p, True: p}, like=frame)

    def predict_many(self, X: object) -> Any:
        """True where p1 ranks first: a series like X (a frame), or a bool array."""
        first = self.margin_many(X) > 0.0
        frame = _as_frame(X)
        if frame is None:
            return first
        # frames only (see `_as_frame`)
        from river.utils.dataframe import to_native_series

        return to_native_series(first, name=None, like=frame)

    def score(self, Phi: object) -> np.ndarray:
        """Scores (m,) of candidates phi (m, d) (an array, or a frame read by name);
        higher ranks first."""
        frame = _as_frame(Phi)
        if frame is not None:
            Phi = self._frame_rows(frame)[0][:, : self._width]
        if self._w is None:
            return np.zeros(as_float_matrix(Phi, "Phi").shape[0])
        return linear_scores(Phi, self._w, self.scaler)

    # ---------------------------------------------------------------- storage
    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON-able meta and named float64 arrays (no pickle) for the model store."""
        names = self._keys.names
        if names is not None and not all(isinstance(n, str) or is_position(n) for n in names):
            raise ValueError("only str and int feature names can be stored")
        meta: dict[str, Any] = {
            "kind": "online_ranker",
            "algo": self.algo,
            "params": self.params,
            "dim": self._width,
            "n_updates": self.n_updates,
            "n_seen": self.n_seen,
            "features": None
            if names is None
            else [n if isinstance(n, str) else int(n) for n in names],
            "grows": self._grows,
        }
        arrays: dict[str, np.ndarray] = {}
        if self._w is not None:
            arrays["weights"] = self._w.copy()
        arrays.update({name: array.copy() for name, array in self._state.items()})
        if self._anchor is not None:
            arrays[_ANCHOR] = self._anchor.copy()
        store_scaler(self.scaler, meta, arrays)
        return meta, arrays

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> OnlineRanker:
        """Rebuild exactly the ranker `to_state` described (states written before feature
        names were stored load as models of positions whose width is fixed)."""
        if meta.get("kind") != "online_ranker":
            raise ValueError(f"state kind {meta.get('kind')!r} is not 'online_ranker'")
        scaler = stored_scaler(meta, arrays)
        grows, names, dim = bool(meta.get("grows", False)), meta.get("features"), meta.get("dim")
        # a process that had registered another learner stored its hyper-parameters too;
        # this learner never reads them (its own are known wherever it is)
        params = {k: v for k, v in meta["params"].items() if k in learners.HYPERPARAMETERS}
        ranker = cls(
            algo=meta["algo"],
            **params,
            scaler=scaler,
            dim=None if grows or names is not None else dim,
            features=None if grows or names is None else tuple(names),
        )
        if names is not None and len(names) != dim:
            raise ValueError(f"state names {len(names)} features for a width of {dim}")
        if grows:
            if names is not None:
                ranker._keys.adopt(names)
            if dim is not None:
                ranker._grow(dim)
        if "weights" in arrays:
            if ranker.width is None:
                raise ValueError("a state with weights must give their width (dim)")
            ranker._w = as_float_vector(arrays["weights"], "weights", ranker.width).copy()
        expected = ranker.spec.initial_state(ranker.width) if ranker.width is not None else {}
        if _ANCHOR in arrays:
            if ranker.width is None:
                raise ValueError("a state with a click anchor must give its width (dim)")
            ranker._anchor = as_float_vector(arrays[_ANCHOR], _ANCHOR, ranker.width).copy()
        own = {"weights", _ANCHOR}
        extra = {k for k in arrays if k not in own and not k.startswith("scaler.")}
        if extra - set(expected):
            raise ValueError(
                f"state for {ranker.algo!r} must not hold {sorted(extra - set(expected))}"
            )
        for name, template in expected.items():
            if name in arrays:
                array = np.asarray(arrays[name], dtype=np.float64)
                if array.shape != template.shape:
                    raise ValueError(f"{name} must have shape {template.shape}, got {array.shape}")
                if not np.isfinite(array).all():
                    raise ValueError(f"{name} contains NaN or Inf")
                ranker._state[name] = array.copy()
        ranker.n_updates = int(meta["n_updates"])
        ranker.n_seen = int(meta["n_seen"])
        return ranker
