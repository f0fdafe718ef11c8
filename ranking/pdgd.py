"""PDGD: Pairwise Differentiable Gradient Descent, learning to rank from clicks directly.

Oosterhuis & de Rijke, "Differentiable Unbiased Online Learning to Rank", CIKM 2018. The
model is a linear scorer f(d) = w . phi(d) that serves *stochastic* rankings: a
Plackett-Luce model over its scores,

    P(d at the next rank | the ranks above) = exp f(d) / sum_{d' not yet placed} exp f(d'),

sampled exactly (`sample_ranking`: the top k of scores plus Gumbel noise are a
Plackett-Luce draw). From an impression (the sampled ranking R, its clicks) it infers
preferences: each clicked d_k over each unclicked d_l shown above the last click or
right below it (the results the user is taken to have examined), and takes the step

    grad = sum_pairs rho(d_k, d_l, R) * grad P(d_k > d_l),
    P(d_k > d_l) = exp f(d_k) / (exp f(d_k) + exp f(d_l)),
    grad P(d_k > d_l) = e_k e_l / (e_k + e_l)^2 * (phi(d_k) - phi(d_l)),   e = exp f,

    rho(d_k, d_l, R) = P(R* | f) / (P(R | f) + P(R* | f)),

R* being R with d_k and d_l swapped (eqs. 8-13 of the paper). rho removes the bias of
the logging ranking: under the user's examination both R and R* were as likely to
produce the inferred preference pair reversed, so in expectation the update is unbiased
w.r.t. pairwise preferences (the paper's Theorem 4.1). Only the ranks from the higher to
the lower of the two change between R and R*, so P(R)/P(R*) is the product, over those
ranks t (the higher excluded), of D*_t / D_t, where D_t sums exp f over the documents not
placed above t in R, and D*_t = D_t - e_lower + e_higher (the two swapped documents
trade places above t). The update is w += learning_rate * grad.

>>> import numpy as np
>>> model = PDGD(learning_rate=0.1)
>>> phi = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
>>> ranking = np.array([0, 1, 2])
>>> model.learn(phi, ranking, np.array([False, True, False]))  # d1 clicked at rank 2
>>> np.round(model.weights, 4).tolist()  # d1 over d0 (above) and d2 (right below)
[-0.0188, 0.0188]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.ranking import PDGD_LEARNING_RATE
from rankstream.ranking.scaling import (
    Standardizer,
    linear_scores,
    store_scaler,
    stored_scaler,
)

DEFAULT_LEARNING_RATE = PDGD_LEARNING_RATE  # the reference's step on our scale (its comment)
STATE_KIND = "pdgd"


def sample_ranking(scores: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """The first k documents of a Plackett-Luce ranking over `scores` (Gumbel-max trick:
    argsort of scores plus independent standard Gumbel noise, descending)."""
    scores = np.asarray(scores, dtype=np.float64)
    k = min(k, scores.shape[0])
    noisy = scores + rng.gumbel(size=scores.shape[0])
    top = np.argpartition(-noisy, k - 1)[:k] if k < scores.shape[0] else np.arange(k)
    return top[np.argsort(-noisy[top], kind="stable")]


PLACKETT_LUCE = "plackett-luce"  # the intervention an impression of a sampled ranking logs
LOGGED_PREFIX = 10  # its logged probability is that of the first 10 results' order


def plackett_luce_intervention(scores: np.ndarray, order: np.ndarray) -> tuple[str, float]:
    """(intervention, shown probability) an impression of the sampled `order` logs:
    "plackett-luce:1-n" and P(its first n = min(10, len) results, in this order) under
    the Plackett-Luce model of `scores` (the full order's probability underflows for
    hundreds of candidates; docs/reference/wire.md), floored at the smallest positive float."""
    f = np.asarray(scores, dtype=np.float64)[np.asarray(order, dtype=np.int64)]
    n = min(LOGGED_PREFIX, f.shape[0])
    # log of the mass not yet placed at each rank: logsumexp of the scores from t on
    remaining = np.logaddexp.accumulate(f[::-1])[::-1]
    log_p = float((f[:n] - remaining[:n]).sum())
    return f"{PLACKETT_LUCE}:1-{n}", max(float(np.exp(log_p)), np.finfo(np.float64).tiny)


def examined_pairs(clicks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(clicked positions, unclicked positions) of PDGD's pairs: every clicked result with
    every unclicked one above the last click or right below it (0-based positions)."""
    clicks = np.asarray(clicks, dtype=bool)
    if not clicks.any():
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    last = int(np.flatnonzero(clicks)[-1])
    shown = np.arange(clicks.shape[0])
    return np.flatnonzero(clicks), shown[(shown <= last + 1) & ~clicks]


def document_weights(
    scores: np.ndarray, ranking: np.ndarray, clicks: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """PDGD's gradient as (documents, coefficient each): grad = sum_d c_d phi(d).

    `scores` are f over every candidate (n,), `ranking` the displayed documents (k,)
    (indices into scores), `clicks` (k,) bool in displayed order. The compiled loop
    `ranking.kernels.pdgd_document_weights` computes them (numba, on first use: a
    session's update costs microseconds, not the ~70 us of whole-array numpy on small
    arrays; the click join teaches PDGD every session).
    """
    from rankstream.ranking.kernels import pdgd_document_weights

    f = np.ascontiguousarray(scores, dtype=np.float64)
    ranking = np.ascontiguousarray(ranking, dtype=np.int64)
    clicks = np.ascontiguousarray(clicks, dtype=np.bool_)
    pairs = int(clicks.sum()) * ranking.shape[0]
    documents, coefficients = np.empty(2 * pairs, dtype=np.int64), np.empty(2 * pairs)
    n = pdgd_document_weights(f, ranking, clicks, documents, coefficients)
    return documents[:n], coefficients[:n]


class PDGD:
    """A linear PDGD ranker over phi (see the module docstring); w starts at `warm_start`
    (on scaled phi, like `OnlineRanker`'s: Uni-Con is all ones), else at 0."""

    def __init__(
        self,
        learning_rate: float = DEFAULT_LEARNING_RATE,
        scaler: Standardizer | None = None,
        warm_start: np.ndarray | None = None,
    ) -> None:
        if not (np.isfinite(learning_rate) and learning_rate > 0):
            raise ValueError(f"learning_rate must be finite and > 0, got {learning_rate}")
        self.learning_rate = float(learning_rate)
        self.scaler = scaler
        self._w: np.ndarray | None = None
        if warm_start is not None:
            start = np.array(warm_start, dtype=np.float64)
            if start.ndim != 1 or not np.isfinite(start).all():
                raise ValueError("warm_start must be a finite 1-d array of weights")
            if scaler is not None and scaler.dim != start.shape[0]:
                raise ValueError(f"warm_start has {start.shape[0]} weights, scaler {scaler.dim}")
            self._w = start
        self.n_updates = 0

    @property
    def weights(self) -> np.ndarray:
        return np.zeros(0) if self._w is None else self._w.copy()

    def score(self, phi: np.ndarray) -> np.ndarray:
        """f = w . phi (scaled like the training rows) of candidates phi (m, d)."""
        phi = np.asarray(phi)
        if self._w is None:
            return np.zeros(phi.shape[0])
        return linear_scores(phi, self._w, self.scaler)

    def rank(self, phi: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
        """The k documents to display, sampled from the Plackett-Luce model of `score`."""
        return sample_ranking(self.score(phi), k, rng)

    def learn(self, phi: np.ndarray, ranking: np.ndarray, clicks: np.ndarray) -> None:
        """One impression: candidates phi (m, d), displayed `ranking` (k,), its clicks (k,)."""
        phi = np.asarray(phi)
        if phi.ndim != 2 or not np.isfinite(phi).all():
            raise ValueError("phi must be a finite 2-d array (m, d)")
        if np.shape(clicks) != np.shape(ranking):
            raise ValueError(f"clicks {np.shape(clicks)} must match ranking {np.shape(ranking)}")
        if self._w is None:
            self._w = np.zeros(phi.shape[1])
        if not np.any(clicks):
            return  # no click, no pair (most impressions of real traffic): skip the scoring
        z = self.scaler.transform(phi) if self.scaler is not None else phi.astype(np.float64)
        documents, coefficients = document_weights(z @ self._w, ranking, clicks)
        if documents.size == 0:
            return
        # the coefficients sum to 0 (each pair adds +c and -c), so the scaler's centring
        # cancels: this is the step on phi divided by the std
        step = self.learning_rate * (coefficients @ z[documents])
        if not np.isfinite(step).all():
            raise ValueError("this impression would make the weights non-finite; model unchanged")
        self._w += step
        self.n_updates += 1

    @staticmethod
    def warm_up() -> None:
        """Load the compiled gradient loop now (numba's import and its cached machine
        code, ~0.5 s), so a worker pays it at start-up, not on its first session."""
        document_weights(np.zeros(2), np.arange(2), np.array([False, True]))

    # --- storage --------------------------------------------------------------------------
    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON-able meta and named float64 arrays (no pickle) for the model store."""
        meta: dict[str, Any] = {
            "kind": STATE_KIND,
            "learning_rate": self.learning_rate,
            "n_updates": self.n_updates,
        }
        arrays: dict[str, np.ndarray] = {}
        if self._w is not None:
            arrays["weights"] = self._w.copy()
        store_scaler(self.scaler, meta, arrays)
        return meta, arrays

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> PDGD:
        """Rebuild exactly the model `to_state` described."""
        if meta.get("kind") != STATE_KIND:
            raise ValueError(f"state kind {meta.get('kind')!r} is not {STATE_KIND!r}")
        scaler = stored_scaler(meta, arrays)
        model = cls(float(meta["learning_rate"]), scaler, arrays.get("weights"))
        model.n_updates = int(meta["n_updates"])
        return model
