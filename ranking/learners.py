"""The online learners, each declared once: its name, label, colour, hyper-parameters
(default, help, validation grid), kernel, and how scale-out mixes its state.

Everything that names a learner derives from `LEARNERS`: `OnlineRanker` (one attribute
per hyper-parameter), the online worker and its CLI options (`--algo`, one
`--<hyper-parameter>` per entry of `HYPERPARAMETERS`, with its default and help),
scale-out's parameter mix (`mix_state`), direct replay, the benchmarks, the demo, its
plots, `eval cbir` and `eval stream` (their grids and the paper's numbers), `eval clicks`
(which learners learn from clicks, and with what) and the chaos run. Adding a learner,
or a hyper-parameter, touches this module (and the kernel it names) and nothing else;
`register` adds one at run time, hyper-parameters included (tests/test_learner_registry.py
declares one in the test file alone).

A learner learns in one of three ways:

* `linear_rule`: one of the four step-size rules of Gao et al. (IJCAI 2015), which
  share the fused compiled pass of `ranking.kernels` (several models per sweep over the
  rows, each row's x gathered once from the triplets' image table);
* `triplet_kernel`: its own compiled pass over the triplets' normalized form,
  `triplet_kernel(w, state, phi, p1, p2, scale, y, params) -> (updates, status,
  bad_row)`: row i is x = (phi[p1[i]] - phi[p2[i]]) / scale, or phi[i] / scale when p1
  and p2 are None (scale None: unscaled), widened to float64 inside the loop; it checks
  the labels and |x|^2 itself and reports the first bad row with `ranking.kernels`'
  status codes (AROW);
* `kernel`: its own sequential update, `kernel(w, state, X, y, params) -> updates`,
  given the rows x = phi[p1] - phi[p2] gathered, widened to float64 and scaled, the
  labels (+1/-1, checked), and its hyper-parameters by name. Rows and labels are
  validated before the call, so a kernel is only the update rule: the slow path, for
  a rule written in plain Python.

A learner may instead learn from **impressions and their clicks** directly, not from
triplets (`impression_model`: PDGD, `ranking.pdgd`): it serves Plackett-Luce samples of
its scores and updates from each displayed ranking and its clicks. The click join
learns it (`workers.click_join`), serve samples its rankings; everything that runs the
triplet learners (`names()`, their hyper-parameter table and grids, the online worker)
leaves it out, and `impression_learners()` names it.

A kernel that takes a `weights` parameter learns importance-weighted rows too (the
rows' weights, finite and >= 0, passed only when the caller has them; its docstring
says in which weighted form); one without it refuses weighted rows.

Either kernel gets copies of the weights and of its extra state arrays (AROW's
covariance) to update in place; the result is checked after it (non-finite weights or
state refuse the batch).

This module imports neither numba nor numpy (both on first use): the command line is
built from it before `rankstream replay --direct` tunes numpy's start-up, and the
kernels would add ~1.6 s to every command (`python -X importtime`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rankstream.ranking import PDGD_LEARNING_RATE
from rankstream.ranking.rules import OGDR_RULE, OPAR1_RULE, OPAR2_RULE, OPR_RULE

if TYPE_CHECKING:
    import numpy as np

Kernel = Callable[["np.ndarray", dict[str, "np.ndarray"], "np.ndarray", "np.ndarray", dict], int]
TripletKernel = Callable[..., tuple[int, int, int]]  # see the module docstring
StateFactory = Callable[[int], dict[str, "np.ndarray"]]
# (its hyper-parameters by name, the scaler of phi or None, the starting weights or None)
# -> a model with learn(phi, ranking, clicks), score(phi), rank(phi, k, rng), to_state()
ImpressionModel = Callable[[dict[str, float], Any, Any], Any]
# (each model's extra state, each model's share of the triplets (k,), each model's
# scaler std (k, d), the mix's std (d,)) -> the mix's extra state; see `mix_covariances`
StateMixer = Callable[
    [Sequence[Mapping[str, "np.ndarray"]], "np.ndarray", "np.ndarray", "np.ndarray"],
    dict[str, "np.ndarray"],
]


@dataclass(frozen=True)
class HyperParameter:
    """A learner's tunable constant: its default, what it means (the CLI's help) and the
    grid validation chooses it from (`eval cbir`, `eval stream --grid`)."""

    name: str
    default: float
    help: str
    grid: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"hyper-parameter name {self.name!r} must be an identifier")
        for value in (self.default, *self.grid):
            self.check(value)

    def check(self, value: object) -> float:
        """The value as a float; ValueError unless finite and > 0."""
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ValueError(f"{self.name} must be a number, got {value!r}") from None
        if not (math.isfinite(number) and number > 0):
            raise ValueError(f"{self.name} must be finite and > 0, got {value!r}")
        return number


# The defaults serve the §5.5 stream of both collections (synthetic and Fashion-MNIST's
# photos): `rankstream eval stream --grid` ran every point of these validation grids on
# validation seeds 100 and 101 of each, and these are the values with the highest
# NDCG@50 gain over Uni-Con averaged over collections, seeds and learners (README
# "Calibration"). The former C = 0.1, eta = 0.01, tuned on the synthetic set, served
# real photos 0.02-0.04 below Uni-Con. (The paper chooses them by cross validation.)
_STEPS = (0.0001, 0.001, 0.01, 0.1, 1.0)
_C = HyperParameter("C", 1e-4, "aggressiveness of OPAR-I (largest step) and OPAR-II", _STEPS)
_ETA = HyperParameter("eta", 1e-4, "OGDR's learning rate", _STEPS)
_R = HyperParameter(
    "r", 100.0, "AROW's regulariser (larger: smaller confidence updates)", (0.1, 1.0, 10.0, 100.0)
)

# The regularized reading of click triplets (`ranking.online`, "Click triplets"): the
# four linear rules read these on rows learned with `clicks=True` (the online worker's
# importance-weighted blocks, the click join's), never on judged rows. Chosen by the
# offline replay of the HTTP engine's users (docs/results/clicks.md): almost-random
# users' pairs (attractiveness 0.40/0.45/0.50) must not pull a learner below Uni-Con,
# informational users' must still teach it (OPAR-I/II +0.12..+0.15 NDCG@50 over Uni-Con).
_CLICK_MEMORY = HyperParameter(
    "click_memory",
    1e6,
    "click triplets: how many standardized unit-weight pairs the regularized linear "
    "learners remember (a pair of weight s decays w - anchor by s |x|^2 / (2 d memory))",
)
_CLICK_REACH = HyperParameter(
    "click_reach",
    10.0,
    "click triplets: the long-run w - anchor is click_reach E[s y x] / E[s |x|^2] "
    "(its margins stay below ~click_reach times the pairs' agreement)",
)
_CLICK_PRIOR = HyperParameter(
    "click_prior",
    0.1,
    "click triplets: the anchor (Uni-Con's direction on standardized phi) scaled to "
    "this mean |margin| on the first click pairs",
)
CLICK_HYPERPARAMETERS = (_CLICK_MEMORY, _CLICK_REACH, _CLICK_PRIOR)

# Every registered learner's hyper-parameters by name (kept by `register`): learners
# sharing one (OPAR-I and OPAR-II's C) share its declaration; the click ones (read by
# every linear rule on click triplets) after them.
HYPERPARAMETERS: dict[str, HyperParameter] = {}


@dataclass(frozen=True)
class LearnerSpec:
    """One online learner (see the module docstring for `linear_rule` and `kernel`)."""

    name: str  # the algo name, also the stored model's name: "opar1"
    label: str  # for tables and plots: "OPAR-I"
    colour: str  # its line and dots in every plot (a matplotlib colour): "tab:orange"
    update: str  # the update rule in one line, for help texts
    hyperparameters: tuple[HyperParameter, ...] = ()  # the ones it reads
    linear_rule: int | None = None  # a step-size code of the fused linear kernel
    kernel: Kernel | None = None  # an update over gathered rows (the slow path)
    triplet_kernel: TripletKernel | None = None  # a compiled pass over the normalized form
    impression_model: ImpressionModel | None = None  # learns from impressions and clicks
    initial_state: StateFactory = field(default=lambda dim: {})
    # how scale-out mixes the extra state of per-partition models (None: it has none)
    mix_state: StateMixer | None = None
    in_worker_default: bool = False  # learned by `rankstream worker online` by default
    # the online-LTR paper's numbers for it (None: the paper has none): Table 2's
    # ImageCLEF test mAP and Table 3's seconds on 3 million triplets (`eval cbir`)
    paper_map: float | None = None
    paper_seconds: float | None = None
    # its importance-weighted form for a row of weight s (`ranking.online`'s docstring
    # derives each), for help texts; "" when it learns no weighted rows
    weighted_update: str = ""
    # measured by `eval clicks` with a judged, a naive and an IPS click arm (each click
    # arm the product: the click join and the online worker, at the learner's defaults)
    in_click_eval: bool = False

    def __post_init__(self) -> None:
        ways = (self.linear_rule, self.kernel, self.triplet_kernel, self.impression_model)
        if sum(way is not None for way in ways) != 1:
            raise ValueError(
                f"learner {self.name!r} needs exactly one of linear_rule, kernel, "
                "triplet_kernel, impression_model"
            )
        if self.linear_rule is not None and len(self.hyperparameters) > 1:
            raise ValueError(f"linear learner {self.name!r} reads at most one hyper-parameter")
        if not self.name.replace("_", "").isalnum() or not self.name.islower():
            raise ValueError(f"learner name {self.name!r} must be lower-case [a-z0-9_]")

    @property
    def learns_from(self) -> str:
        """Either "triplets" (OPR..AROW) or "impressions" (an impression model: PDGD)."""
        return "triplets" if self.impression_model is None else "impressions"

    @property
    def uses(self) -> tuple[str, ...]:
        """The names of the hyper-parameters it reads."""
        return tuple(h.name for h in self.hyperparameters)

    @property
    def grid(self) -> dict[str, tuple[float, ...]]:
        """Its validation grid: each hyper-parameter's values ({} for none)."""
        return {h.name: h.grid or (h.default,) for h in self.hyperparameters}


def mix_covariances(*names: str) -> StateMixer:
    """Scale-out's mix of covariance-like state arrays (AROW's Sigma): each model's
    Sigma_k is taken to raw-phi space (Sigma_k / (s_k s_k')), as its weights are (w_k /
    s_k), averaged with the triplet shares, and brought to the mix's scale (s s')."""

    def mix(
        states: Sequence[Mapping[str, np.ndarray]],
        share: np.ndarray,
        stds: np.ndarray,
        std: np.ndarray,
    ) -> dict[str, np.ndarray]:
        import numpy as np

        mixed = {}
        for name in names:
            raw = sum(
                a * state[name] / np.outer(s, s)
                for a, state, s in zip(share, states, stds, strict=True)
            )
            mixed[name] = raw * np.outer(std, std)
        return mixed

    return mix


def _arow(
    w: np.ndarray,
    state: dict[str, np.ndarray],
    phi: np.ndarray,
    p1: np.ndarray | None,
    p2: np.ndarray | None,
    scale: np.ndarray | None,
    y: np.ndarray,
    params: dict,
    weights: np.ndarray | None = None,
) -> tuple[int, int, int]:
    """AROW's compiled pass over the normalized form (`ranking.kernels.learn_arow`).

    Weighted rows (weight s): r / s in place of r, the loss and confidence terms of
    AROW's objective weighted by s (an integer s = k is the row learned k times)."""
    from rankstream.ranking.kernels import learn_arow  # numba: on first use only

    scales = None if scale is None else scale.reshape((1, -1))
    return learn_arow(w, state["sigma"], phi, p1, p2, scales, y, weights, params["r"])


def _identity(dim: int) -> np.ndarray:
    import numpy as np

    return np.eye(dim)


LEARNERS: dict[str, LearnerSpec] = {}


def _hyperparameter_table(specs: Iterable[LearnerSpec]) -> dict[str, HyperParameter]:
    """Every hyper-parameter of `specs` by name; ValueError when two declare one name
    differently."""
    table: dict[str, HyperParameter] = {}
    for spec in specs:
        if spec.learns_from != "triplets":
            continue  # its own hyper-parameters: not the online worker's options
        for h in spec.hyperparameters:
            if table.setdefault(h.name, h) != h:
                raise ValueError(
                    f"learner {spec.name!r} declares hyper-parameter {h.name!r} unlike "
                    f"another learner: {h} vs {table[h.name]}"
                )
    for h in CLICK_HYPERPARAMETERS:
        if table.setdefault(h.name, h) != h:
            raise ValueError(f"hyper-parameter {h.name!r} is the linear rules' click one")
    return table


def register(spec: LearnerSpec) -> LearnerSpec:
    """Add a learner (or replace one of the same name), its hyper-parameters with it;
    returns it."""
    specs = {**LEARNERS, spec.name: spec}
    table = _hyperparameter_table(specs.values())  # checked before anything changes
    LEARNERS[spec.name] = spec
    HYPERPARAMETERS.clear()
    HYPERPARAMETERS.update(table)
    return spec


def unregister(name: str) -> None:
    """Remove a learner added with `register`, and the hyper-parameters only it read
    (tests clean up with it)."""
    LEARNERS.pop(name, None)
    table = _hyperparameter_table(LEARNERS.values())
    HYPERPARAMETERS.clear()
    HYPERPARAMETERS.update(table)


def _pdgd(params: dict[str, float], scaler: Any, warm_start: Any) -> Any:
    from rankstream.ranking.pdgd import PDGD  # numpy: on first use only

    return PDGD(params["learning_rate"], scaler, warm_start)


_LEARNING_RATE = HyperParameter(
    "learning_rate", PDGD_LEARNING_RATE, "PDGD's learning rate (the reference code's default)",
    (0.03, 0.1, 0.3, 1.0),
)  # fmt: skip

for _spec in (
    LearnerSpec(
        "opr", "OPR", "tab:blue", "w += y x when y w.x <= 0", (), OPR_RULE,
        in_worker_default=True, paper_map=0.6555, paper_seconds=1154.0,
        weighted_update="w += s y x when y w.x <= 0 (the perceptron on s times the loss)",
    ),
    LearnerSpec(
        "opar1", "OPAR-I", "tab:orange", "w += min(C, l/|x|^2) y x", (_C,), OPAR1_RULE,
        in_worker_default=True, paper_map=0.6556, paper_seconds=1370.0,
        weighted_update="w += min(s C, l/|x|^2) y x (PA-I with cost s C)", in_click_eval=True,
    ),
    LearnerSpec(
        "opar2", "OPAR-II", "tab:green", "w += l/(|x|^2 + 1/(2C)) y x", (_C,), OPAR2_RULE,
        in_worker_default=True, paper_map=0.6632, paper_seconds=1708.0,
        weighted_update="w += l/(|x|^2 + 1/(2 s C)) y x (PA-II with cost s C)",
    ),
    LearnerSpec(
        "ogdr", "OGDR", "tab:red", "w += eta y x when l > 0", (_ETA,), OGDR_RULE,
        in_worker_default=True, paper_map=0.6626, paper_seconds=2307.0,
        weighted_update="w += s eta y x when l > 0 (a gradient step on s l)",
    ),
    LearnerSpec(
        "arow",
        "AROW",
        "tab:purple",
        "w += l beta y Sigma x, Sigma -= beta Sigma x x' Sigma, beta = 1/(x' Sigma x + r)",
        (_R,),
        triplet_kernel=_arow,
        initial_state=lambda dim: {"sigma": _identity(dim)},
        mix_state=mix_covariances("sigma"),
        weighted_update="r / s in place of r (k equal observations: noise r / k)",
        in_click_eval=True,
    ),
    LearnerSpec(
        "pdgd", "PDGD", "darkgoldenrod",
        "w += lr sum_pairs rho grad P(d_k > d_l), serving Plackett-Luce samples",
        (_LEARNING_RATE,), impression_model=_pdgd,
    ),
):  # fmt: skip
    register(_spec)


def takes_weights(spec: LearnerSpec) -> bool:
    """Whether the learner learns importance-weighted rows: the linear rules do, and a
    kernel does when it takes a `weights` parameter (None or the rows' weights)."""
    if spec.learns_from != "triplets":
        return False  # it learns no rows at all (PDGD: impressions and clicks)
    kernel = spec.triplet_kernel or spec.kernel
    return kernel is None or "weights" in inspect.signature(kernel).parameters


def names() -> tuple[str, ...]:
    """Every registered learner that learns from triplets, in registration order."""
    return tuple(n for n, s in LEARNERS.items() if s.learns_from == "triplets")


def impression_learners() -> tuple[str, ...]:
    """The learners that learn from impressions and clicks (PDGD), in registration order."""
    return tuple(n for n, s in LEARNERS.items() if s.learns_from == "impressions")


def impression_model(
    name: str, params: Mapping[str, Any] | None = None, scaler: Any = None, warm_start: Any = None
) -> Any:
    """A new model of the impression learner `name`: its hyper-parameters checked, the
    given ones over its defaults (ValueError for one it does not read)."""
    spec = learner(name)
    if spec.impression_model is None:
        raise ValueError(f"learner {name!r} learns from triplets, not impressions")
    given = dict(params or {})
    known = {h.name: h for h in spec.hyperparameters}
    unknown = set(given) - set(known)
    if unknown:
        raise ValueError(f"{name} reads {sorted(known)}, not {sorted(unknown)}")
    values = {n: h.check(given[n]) if n in given else h.default for n, h in known.items()}
    return spec.impression_model(values, scaler, warm_start)


def worker_defaults() -> tuple[str, ...]:
    """The learners `rankstream worker online` runs unless told otherwise."""
    return tuple(n for n, s in LEARNERS.items() if s.in_worker_default)


def learner(name: str) -> LearnerSpec:
    """The spec of `name`; ValueError naming the choices otherwise."""
    try:
        return LEARNERS[name]
    except KeyError:
        raise ValueError(
            f"unknown learner (algo) {name!r}; choose from {', '.join(LEARNERS)}"
        ) from None


def impression_model_from_state(meta: Mapping[str, Any], arrays: Mapping[str, Any]) -> Any:
    """An impression learner's model rebuilt from its `to_state()` (meta["kind"] names
    the learner: PDGD's is "pdgd")."""
    name = meta.get("kind")
    spec = LEARNERS.get(str(name))
    if spec is None or spec.impression_model is None:
        raise ValueError(f"state kind {name!r} is not an impression learner's")
    return type(impression_model(spec.name)).from_state(dict(meta), dict(arrays))


def check_names(algos: Iterable[str]) -> tuple[str, ...]:
    """Distinct, known learner names (ValueError otherwise)."""
    found = tuple(algos)
    if not found or len(set(found)) != len(found):
        raise ValueError(f"learners must be distinct and non-empty, got {found}")
    for name in found:
        if learner(name).learns_from != "triplets":
            raise ValueError(
                f"learner {name!r} learns from impressions and clicks (the click join "
                f"learns it), not triplets; triplet learners: {', '.join(names())}"
            )
    return found


def hyperparameters(values: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Every hyper-parameter, checked: the given values over the defaults."""
    given = dict(values or {})
    unknown = set(given) - set(HYPERPARAMETERS)
    if unknown:
        raise ValueError(
            f"unknown hyper-parameters {sorted(unknown)}; known: {', '.join(HYPERPARAMETERS)}"
        )
    return {
        name: h.check(given[name]) if name in given else h.default
        for name, h in HYPERPARAMETERS.items()
    }


def click_eval_learners() -> tuple[str, ...]:
    """The online learners `eval clicks` measures with judged, naive and IPS arms."""
    return tuple(n for n, s in LEARNERS.items() if s.in_click_eval)


def label(name: str) -> str:
    """A learner's display label, or the name itself for a model that is not a learner."""
    spec = LEARNERS.get(name)
    return spec.label if spec is not None else name


def grids() -> dict[str, dict[str, tuple[float, ...]]]:
    """Every triplet learner's validation grid (`LearnerSpec.grid`), in registration order."""
    return {name: LEARNERS[name].grid for name in names()}
