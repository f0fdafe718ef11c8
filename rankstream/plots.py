"""The paper's figures from per-query arrays: NDCG@50 over the query stream, learning time.

Inputs are plain `{model: (n_queries,) array}` mappings with NaN where a model was not
scored on (or had not yet learned by) a query, so any report (the embedded demo, a
Kafka run's evaluator history, an offline experiment) can draw the same figures.

* Fig. 3 of the online-LTR paper plots, per model, the improvement of NDCG@50 over
  Uni-Con as the queries arrive. `plot_ndcg` draws the cumulative mean NDCG@50 of each
  model (top) and the cumulative mean of its per-query difference from the baseline
  on the queries both were scored on (bottom), so a model that joins late (a batch
  model before its first refit) is compared like for like.
* Fig. 4 plots cumulative learning time; `plot_learning_time` uses a log axis because
  batch refits cost orders of magnitude more than online updates.

matplotlib runs on the Agg backend (files only, no display needed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from rankstream.ranking import learners

# One colour and label per model across every figure: the online learners' from their
# specs (`ranking.learners`), the other models' here; unknown models get the cycle's next
# colour and their own name.
OTHER_MODELS: dict[str, tuple[str, str]] = {
    "uni_con": ("Uni-Con", "black"),
    "best_fea": ("Best-Fea", "tab:gray"),
    "ranksvm": ("RankSVM", "tab:olive"),
    "cmds_dml": ("cMDS-DML", "tab:brown"),
    "rankmkl": ("RankMKL", "tab:pink"),
}


def model_label(name: str) -> str:
    """A model's label in tables and plots ("OPAR-I"), else its name."""
    if name in learners.LEARNERS:
        return learners.label(name)
    return OTHER_MODELS[name][0] if name in OTHER_MODELS else name


def model_colour(name: str) -> str | None:
    """A model's colour in every plot; None: the colour cycle's next."""
    if name in learners.LEARNERS:
        return learners.learner(name).colour
    return OTHER_MODELS[name][1] if name in OTHER_MODELS else None


def cumulative_mean(values: np.ndarray) -> np.ndarray:
    """Running mean over the finite entries; NaN before the first one.

    >>> cumulative_mean(np.array([np.nan, 1.0, np.nan, 3.0])).tolist()
    [nan, 1.0, 1.0, 2.0]
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"values must be 1-d, got shape {values.shape}")
    finite = np.isfinite(values)
    counts = np.cumsum(finite)
    sums = np.cumsum(np.where(finite, values, 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _pyplot():
    # matplotlib.pyplot: +1.1 s at import, and the Agg backend must be chosen before it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _check_curves(curves: Mapping[str, np.ndarray]) -> int:
    lengths = {name: np.shape(values) for name, values in curves.items()}
    shapes = set(lengths.values())
    if len(shapes) != 1 or len(next(iter(shapes))) != 1:
        raise ValueError(f"curves must be 1-d arrays of one length, got {lengths}")
    return int(next(iter(shapes))[0])


def _stream_axes(axes: Sequence, n: int, xlabel: str = "queries", grid: str = "major") -> None:
    """The x axis of a figure over the stream (queries or impressions 1..n, at least 2
    wide) on every panel, each with its grid (`grid`: which ticks), `xlabel` under the last."""
    for axis in axes:
        axis.grid(True, which=grid, alpha=0.3)
        axis.set_xlim(1, max(n, 2))
    axes[-1].set_xlabel(xlabel)


def _style(name: str) -> dict:
    style: dict = {"label": model_label(name), "linewidth": 1.6}
    colour = model_colour(name)
    if colour is not None:
        style["color"] = colour
    return style


def plot_ndcg(
    curves: Mapping[str, np.ndarray],
    path: str | Path,
    baseline: str = "uni_con",
    title: str = "Online cumulative retrieval performance (NDCG@50)",
) -> Path:
    """Fig. 3: cumulative mean NDCG@50 per model, and its improvement over `baseline`."""
    if baseline not in curves:
        raise ValueError(f"baseline {baseline!r} is not among the curves {sorted(curves)}")
    n = _check_curves(curves)
    plt = _pyplot()
    queries = np.arange(1, n + 1)
    base = np.asarray(curves[baseline], dtype=np.float64)
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(9, 8), sharex=True, gridspec_kw={"height_ratios": [1, 1]}
    )
    for name, values in curves.items():
        values = np.asarray(values, dtype=np.float64)
        style = _style(name)
        if name == baseline:
            style.update(linestyle="--", linewidth=2.0)
        top.plot(queries, cumulative_mean(values), **style)
        if name != baseline:
            paired = np.where(np.isfinite(values) & np.isfinite(base), values - base, np.nan)
            bottom.plot(queries, cumulative_mean(paired), **_style(name))
    bottom.axhline(
        0.0,
        color="black",
        linestyle="--",
        linewidth=1.2,
        label=f"{model_label(baseline)} (0)",
    )
    top.set_ylabel("cumulative mean NDCG@50")
    top.set_title(title)
    bottom.set_ylabel(f"NDCG@50 - {model_label(baseline)}\n(cumulative mean)")
    _stream_axes((top, bottom), n)
    top.legend(loc="lower right", ncol=2, fontsize=9)
    bottom.legend(loc="lower right", ncol=2, fontsize=9)
    return _save(fig, plt, path)


def plot_learning_time(
    cumulative_seconds: Mapping[str, np.ndarray],
    path: str | Path,
    title: str = "Online cumulative time cost",
) -> Path:
    """Fig. 4: cumulative learning seconds per model over the queries (log axis).

    A model that never learns (Uni-Con: fixed weights) has no line to draw and is left
    out of the legend.
    """
    n = _check_curves(cumulative_seconds)
    plt = _pyplot()
    queries = np.arange(1, n + 1)
    fig, axis = plt.subplots(figsize=(9, 5))
    for name, values in cumulative_seconds.items():
        values = np.asarray(values, dtype=np.float64)
        if np.any(values < 0) or not np.all(np.isfinite(values)):
            raise ValueError(f"learning time of {name!r} must be finite and >= 0")
        if not np.any(values > 0):
            continue
        # log axis: leave out the zero prefix (nothing learned yet) instead of clipping it
        axis.plot(queries, np.where(values > 0, values, np.nan), **_style(name))
    axis.set_yscale("log")
    axis.set_ylabel("cumulative learning CPU time (s, log scale)")
    axis.set_title(title)
    _stream_axes((axis,), n, grid="both")
    axis.legend(loc="lower right", ncol=2, fontsize=9)
    return _save(fig, plt, path)


def plot_ordinal_metrics(
    by_k: list[Mapping],
    methods: Mapping[str, str],
    embedded: np.ndarray,
    labels: np.ndarray,
    path: str | Path,
    title: str,
) -> Path:
    """The DML eval at a glance: MAE per K and method (mean and std over the splits), and
    held-out points in cMDS-DML's learned space (first two axes, coloured by label; the
    paper's Fig. 6 draws the same for training points)."""
    embedded = np.asarray(embedded, dtype=np.float64)
    if embedded.ndim != 2 or embedded.shape[0] != np.size(labels):
        raise ValueError(f"embedded {embedded.shape} does not match {np.size(labels)} labels")
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    ks = np.array([row["K"] for row in by_k], dtype=np.float64)
    width = 0.8 / max(len(methods), 1)
    for i, (method, label) in enumerate(methods.items()):
        offset = (i - (len(methods) - 1) / 2) * width
        means = [row[method]["mae"] for row in by_k]
        stds = [row[method]["std"] for row in by_k]
        left.bar(ks + offset, means, width, yerr=stds, capsize=3, label=label)
    left.set_xticks(ks)
    left.set_xlabel("target neighbours K")
    left.set_ylabel("kNN MAE (lower is better)")
    left.set_title(title)
    left.grid(True, axis="y", alpha=0.3)
    top = max(row[m]["mae"] + row[m]["std"] for row in by_k for m in methods)
    left.set_ylim(0.0, 1.4 * top)  # headroom for the legend above the bars
    left.legend(fontsize=9, ncol=2, loc="upper center")
    y = embedded[:, 1] if embedded.shape[1] > 1 else np.zeros(embedded.shape[0])
    points = right.scatter(embedded[:, 0], y, c=labels, cmap="viridis", s=12, alpha=0.8)
    fig.colorbar(points, ax=right, label="ordinal label")
    right.set_xlabel("cMDS-DML axis 1")
    right.set_ylabel("cMDS-DML axis 2")
    right.set_title(f"held-out points in the learned space (K={int(ks[0])})")
    right.grid(True, alpha=0.3)
    return _save(fig, plt, path)


def plot_method_scores(
    scores: Mapping[str, Sequence[float]],
    path: str | Path,
    reference: Mapping[str, float | None] | None = None,
    reference_label: str = "paper",
    ylabel: str = "test mAP",
    title: str = "",
) -> Path:
    """One column per method: its scores (one per seed) as dots, their mean as a bar
    across, and a reference value (the paper's, where it has one) as a hollow diamond.
    The axis spans the values only, so gains of a few percent stay visible."""
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(9, 4.5))
    names = list(scores)
    for i, name in enumerate(names):
        values = np.asarray(scores[name], dtype=np.float64)
        color = _style(name).get("color", "tab:blue")
        axis.hlines(values.mean(), i - 0.3, i + 0.3, color=color, linewidth=3)
        axis.plot(np.full(values.size, i), values, "o", color=color, markersize=5, alpha=0.8)
    marked = [
        (i, reference[n]) for i, n in enumerate(names) if reference and reference.get(n) is not None
    ]
    if marked:
        xs, ys = zip(*marked, strict=True)
        axis.plot(xs, ys, "D", markerfacecolor="none", markeredgecolor="tab:red",
                  markersize=7, linestyle="none", label=reference_label)  # fmt: skip
        axis.legend(loc="lower right", fontsize=9)
    axis.set_xticks(range(len(names)), [_style(n)["label"] for n in names], rotation=20)
    axis.set_xlim(-0.6, len(names) - 0.4)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.grid(True, axis="y", alpha=0.3)
    return _save(fig, plt, path)


def plot_champion_race(report: Mapping, path: str | Path) -> Path:
    """`eval champion`: share of runs switched within 500 queries per effect, each policy
    (the test by betting, the mSPRT, the rolling means), one panel per score stream (the
    legend: A/A false switches)."""
    plt = _pyplot()
    streams = dict(report["simulated"])
    if "real" in report:
        streams[f"real: {report['real']['pair']}"] = report["real"]["result"]
    labels = {"betting": "betting", "msprt": "mSPRT", "rolling_mean": "rolling means"}
    fig, axes = plt.subplots(1, len(streams), figsize=(4.2 * len(streams), 3.8), squeeze=False)
    for axis, (name, result) in zip(axes[0], streams.items(), strict=True):
        effects = [k for k in result if k != "aa"]
        x = np.arange(len(effects))
        width = 0.8 / len(labels)
        for i, (policy, label) in enumerate(labels.items()):
            within = [result[k][policy]["switched_within_500"] for k in effects]
            false = result["aa"][policy]["false_switch_rate"]
            offset = (i - (len(labels) - 1) / 2) * width
            axis.bar(x + offset, within, width, label=f"{label} (A/A false {false:.3f})")
        axis.axhline(0.8, color="grey", linewidth=0.8, linestyle="--")
        axis.set_xticks(x, [f"+{k}" for k in effects])
        axis.set_ylim(0, 1)
        axis.set_xlabel("challenger's true NDCG@50 gain")
        axis.set_ylabel("share switched within 500 queries")
        axis.set_title(name, fontsize=9)
        axis.legend(fontsize=7, loc="upper left")
    return _save(fig, plt, path)


def _save(fig, plt, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_click_demo(
    shown_ndcg: Sequence[float],
    statistics: Mapping[str, Sequence[tuple[int, float]]],
    switches: Sequence[tuple[int, str]],
    threshold: float | None,
    path: str | Path,
    title: str = "Click demo",
) -> Path:
    """The click demo: the true NDCG@50 of what was shown (running mean over the last 100
    impressions and cumulative; the simulator's measurement, never sent) above each
    challenger's log test statistic after each interleaved impression against the
    threshold; a vertical line where the clicks decided a switch, named by the new
    champion."""
    plt = _pyplot()
    values = np.asarray(shown_ndcg, dtype=np.float64)
    if values.ndim != 1 or not len(values) or not np.isfinite(values).all():
        raise ValueError("shown_ndcg must be a non-empty 1-d sequence of finite values")
    n = len(values)
    impressions = np.arange(1, n + 1)
    window = min(100, n)
    rolling = np.convolve(values, np.ones(window) / window, mode="valid")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    top.plot(impressions, cumulative_mean(values), color="black", label="cumulative mean")
    top.plot(impressions[window - 1 :], rolling, color="C0", linewidth=1.0,
             label=f"mean of the last {window}")  # fmt: skip
    for name, points in statistics.items():
        if points:
            at, log = np.asarray(points, dtype=np.float64).T
            bottom.step(at, log, where="post", **_style(name))
    if threshold is not None:
        bottom.axhline(threshold, color="black", linestyle="--", linewidth=1.2,
                       label="threshold log(1/alpha)")  # fmt: skip
    for axis in (top, bottom):
        for at, _ in switches:
            axis.axvline(at, color="grey", linestyle=":", linewidth=1.2)
    _stream_axes((top, bottom), n, "impressions")
    for at, champion in switches:
        top.annotate(f"champion: {model_label(champion)}", (at, 1.0), fontsize=8,
                     xycoords=("data", "axes fraction"), xytext=(3, -12),
                     textcoords="offset points")  # fmt: skip
    top.set_ylabel("true NDCG@50 of the shown list\n(simulator's measurement)")
    top.set_title(title)
    top.legend(loc="lower right", fontsize=8)
    bottom.set_ylabel("interleaving test: log statistic\n(vs the champion of the time)")
    if bottom.get_legend_handles_labels()[0]:  # no challenger raced yet: nothing to name
        bottom.legend(loc="upper left", ncol=3, fontsize=8)
    return _save(fig, plt, path)


def plot_interleaving(report: Mapping, path: str | Path) -> Path:
    """`eval interleaving`: median impressions to a correct switch per NDCG@50 difference,
    interleaving vs A/B, one panel per click model (log scale; a hollow bar: no switch
    within the horizon, drawn at the horizon)."""
    plt = _pyplot()
    models = dict(report["click_models"])
    fig, axes = plt.subplots(1, len(models), figsize=(4.4 * len(models), 3.8), squeeze=False)
    for axis, (name, cases) in zip(axes[0], models.items(), strict=True):
        keys = list(report["pairs"])
        x = np.arange(len(keys))
        for offset, method, label in (
            (-0.2, "interleaving", "interleaving"),
            (0.2, "ab", "A/B CTR"),
        ):
            for i, key in enumerate(keys):
                cell = cases[key][method]
                value = cell["median_impressions"]
                hollow = value is None
                axis.bar(
                    x[i] + offset,
                    cell["horizon_impressions"] if hollow else value,
                    0.4,
                    color="none" if hollow else ("C0" if method == "interleaving" else "C1"),
                    edgecolor="C0" if method == "interleaving" else "C1",
                    hatch="//" if hollow else None,
                    label=label if i == 0 else None,
                )
        false = {m: cases["aa"][m]["false_decisions"] for m in ("interleaving", "ab")}
        labels = [f"{report['pairs'][k]['ndcg_difference']:.4f}" for k in keys]
        axis.set_xticks(x, labels)
        axis.set_yscale("log")
        axis.set_ylim(bottom=10)  # at alpha 0.01 no switch comes before ~8 pairs
        axis.set_xlabel("true NDCG@50 difference")
        axis.set_ylabel("median impressions to a correct switch")
        axis.set_title(
            f"{name} (A/A false: interleaving {false['interleaving']:.2f}, A/B {false['ab']:.2f})",
            fontsize=9,
        )
        axis.legend(fontsize=7, loc="upper right")
    return _save(fig, plt, path)


def plot_propensity_errors(report: Mapping, path: str | Path) -> Path:
    """`eval propensities`: the largest relative error at ranks 1..R against impressions,
    one line per click model and seed (log-log), the tolerance dashed."""
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(6.4, 4.2))
    for i, (model, cell) in enumerate(report["click_models"].items()):
        for j, run in enumerate(cell["runs"]):
            checks = np.asarray(run["checks"], dtype=np.float64)
            label = model if j == 0 else None
            axis.plot(checks[:, 0], checks[:, 1], color=f"C{i}", linewidth=1.2, label=label)
    axis.axhline(report["tolerance"], color="black", linestyle="--", linewidth=1, label="tolerance")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("impressions")
    axis.set_ylabel(f"largest relative error, ranks 1-{report['ranks']}")
    axis.set_title(
        f"Propensity estimates ({report['intervention']} on {report['share']:.0%} of "
        f"impressions, {report['collection']})",
        fontsize=10,
    )
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    return _save(fig, plt, path)


def plot_shadow_learning(shadow: Mapping, path: str | Path) -> Path:
    """`eval adoption`: each stored model's true NDCG@50 on held-out queries at the shadow
    run's checkpoints (users saw only the engine's order), the engine's as a line."""
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(7.0, 4.2))
    at = np.asarray(shadow["checkpoints"])
    for name, values in sorted(shadow["true_ndcg_held_out"].items()):
        y = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        axis.plot(at, y, marker=".", **_style(name))
    axis.axhline(shadow["engine_true_ndcg_held_out"], color="black", linestyle="--",
                 linewidth=1.2, label=f"engine ({shadow['engine_ranker']})")  # fmt: skip
    axis.set_xlabel("impressions in shadow mode (users saw the engine's order)")
    axis.set_ylabel("true NDCG@50, held-out queries")
    axis.set_title(f"Shadow mode: learning from clicks on the engine's rankings "
                   f"({shadow['users']} users)", fontsize=10)  # fmt: skip
    axis.legend(fontsize=7, loc="best")
    return _save(fig, plt, path)
