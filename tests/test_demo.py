"""The embedded demo: the real pipeline in one process, its report and its figures (tiny sizes)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankstream.cli import main
from rankstream.demo_pipeline import BATCH_MODELS, DemoOptions, report_models, run_demo
from rankstream.plots import cumulative_mean, plot_learning_time, plot_ndcg
from rankstream.ranking import learners
from rankstream.ranking.kernels import learn_arow, learn_linear
from rankstream.ranking.learners import names
from rankstream.simulators.collection import build_collection
from rankstream.simulators.retrieval import CandidateIndex

TINY = {
    "images": 4000,
    "scaler_rows": 500,
    "reservoir": 300,
    "cmds_dml_iterations": 10,
    "rankmkl_pairs": 100,
    "publish_every": 2,
    "window": 10,
    "calibration_queries": 5,
}


SMALL = {k: v for k, v in TINY.items() if k != "images"}


@pytest.fixture(scope="module")
def tiny_collection():
    collection = build_collection(n_images=TINY["images"], seed=0, progress=False)
    return collection, CandidateIndex.build(collection, seed=0, progress=False)


@pytest.fixture(scope="module")
def tiny_run(tiny_collection):
    collection, index = tiny_collection
    options = DemoOptions(queries=16, refit_every=6, **TINY)
    return run_demo(options, collection=collection, index=index, progress=False)


def test_every_model_is_scored_only_once_it_exists(tiny_run) -> None:
    ndcg = tiny_run.ndcg
    assert set(ndcg) == set(report_models()) and tiny_run.queries == 16
    assert np.isfinite(ndcg["uni_con"]).all()  # published before the first query
    for model in names():  # first checkpoint once 500 triplets fixed the scaler
        scored = np.isfinite(ndcg[model])
        assert not scored[0] and scored[-1] and scored[np.argmax(scored) :].all()
    for model in BATCH_MODELS:  # refits after queries 6 and 12 (never after the last)
        scored = np.isfinite(ndcg[model])
        assert not scored[:6].any() and scored[6:].all()
    assert tiny_run.refits == 2
    values = np.concatenate([v[np.isfinite(v)] for v in ndcg.values()])
    assert ((values >= 0) & (values <= 1)).all()


def test_learning_time_is_cumulative_and_charged_to_learners_only(tiny_run) -> None:
    seconds = tiny_run.learning_seconds
    assert all(v.shape == (16,) and (np.diff(v) >= 0).all() for v in seconds.values())
    assert not seconds["uni_con"].any()
    assert all(seconds[m][-1] > 0 for m in names() + BATCH_MODELS)
    for model in BATCH_MODELS:  # nothing before the first refit, a jump at each refit
        assert not seconds[model][:5].any() and seconds[model][5] > 0
        assert seconds[model][11] > seconds[model][10]


def test_report_matches_the_curves(tiny_run) -> None:
    report = tiny_run.report()
    assert report["queries"] == 16 and report["triplets"] > 0 and report["images"] == 4000
    assert report["collection"] == "synthetic"
    for model in report_models():
        curve, ap = tiny_run.ndcg[model], tiny_run.ap[model]
        np.testing.assert_array_equal(np.isfinite(ap), np.isfinite(curve))  # same queries
        assert report["ndcg_at_50"][model] == pytest.approx(np.nanmean(curve), abs=1e-4)
        assert report["map"][model] == pytest.approx(np.nanmean(ap), abs=1e-4)
        assert report["scored_queries"][model] == np.isfinite(curve).sum()
    both = np.isfinite(tiny_run.ndcg["opr"])
    for curves, key in (
        (tiny_run.ndcg, "improvement_over_uni_con"),
        (tiny_run.ap, "map_improvement_over_uni_con"),
    ):
        gain = np.mean(curves["opr"][both] - curves["uni_con"][both])
        assert report[key]["opr"] == pytest.approx(gain, abs=1e-4)
    assert sum(report["served_by"].values()) == 16
    assert report["champion"] in report_models()
    first_call = report["learners_first_call"]  # reported on its own, not as learning
    assert set(first_call) == {"seconds", "cpu_seconds"} and first_call["seconds"] > 0
    json.dumps(report)  # plain JSON types throughout


def test_same_options_same_results(tiny_collection, tiny_run) -> None:
    collection, index = tiny_collection
    again = run_demo(tiny_run.options, collection=collection, index=index, progress=False)
    assert again.served_by == tiny_run.served_by
    for model in report_models():
        np.testing.assert_array_equal(again.ndcg[model], tiny_run.ndcg[model])


def test_cli_writes_report_plots_and_table(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("RANKSTREAM_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RANKSTREAM_KAFKA_BOOTSTRAP", "nowhere:9")  # the demo ignores services
    out = tmp_path / "report"
    assert (
        main(
            [
                "demo",
                "--out",
                str(out),
                "--images",
                "4000",
                "--queries",
                "8",
                "--refit-every",
                "100",
            ]
        )
        == 0
    )
    report = json.loads((out / "report.json").read_text())
    assert {"queries", "triplets", "seconds", "ndcg_at_50"} <= set(report)
    assert set(report["ndcg_at_50"]) == set(report_models())
    assert report["queries"] == 8 and report["refits"] == 0
    assert report["ndcg_at_50"]["cmds_dml"] is None  # never refitted, never scored
    for name in ("ndcg_at_50.png", "learning_time.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert "Uni-Con" in table and "first call" in table


def test_the_demo_serves_real_photos_and_its_report_names_them(fashion_slice) -> None:
    options = DemoOptions(collection="fashion-mnist", queries=6, refit_every=100, **SMALL)
    result = run_demo(
        options, collection=fashion_slice.collection, index=fashion_slice.index, progress=False
    )
    report = result.report()
    assert report["collection"] == "fashion-mnist" and report["images"] == 400
    assert report["options"]["collection"] == "fashion-mnist" and report["triplets"] > 0
    assert np.isfinite(result.ndcg["uni_con"]).all() and 0 < report["map"]["uni_con"] <= 1
    with pytest.raises(ValueError, match="collection 'fashion-mnist' given"):
        run_demo(DemoOptions(queries=1, **SMALL), collection=fashion_slice.collection)


def test_demo_options_check_the_collection_and_the_hyperparameters() -> None:
    with pytest.raises(ValueError, match="takes no option n_images"):
        DemoOptions(collection="fashion-mnist", images=1000)
    with pytest.raises(ValueError, match="unknown collection"):
        DemoOptions(collection="imagenet")
    with pytest.raises(ValueError, match="unknown hyper-parameters"):
        DemoOptions(hyper={"gamma": 1.0})
    assert DemoOptions(hyper={"C": 0.5}).hyper == learners.hyperparameters({"C": 0.5})


def test_cli_names_the_debian_package_when_fashion_mnist_is_missing(
    tmp_path, monkeypatch, capsys
) -> None:
    from rankstream.simulators import fashion_collection

    monkeypatch.setenv("RANKSTREAM_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(fashion_collection, "DEFAULT_DIR", tmp_path / "absent")
    assert main(["demo", "--collection", "fashion-mnist", "--out", str(tmp_path)]) == 2
    assert "dataset-fashion-mnist" in capsys.readouterr().err
    assert main(["demo", "--collection", "fashion-mnist", "--images", "1000"]) == 2
    assert "takes no option n_images" in capsys.readouterr().err


def test_cumulative_mean_skips_unscored_queries() -> None:
    got = cumulative_mean(np.array([np.nan, 0.5, np.nan, 1.0, 0.0]))
    np.testing.assert_allclose(got, [np.nan, 0.5, 0.5, 0.75, 0.5])
    with pytest.raises(ValueError, match="1-d"):
        cumulative_mean(np.zeros((2, 2)))


def test_plots_reject_bad_curves(tmp_path) -> None:
    with pytest.raises(ValueError, match="baseline"):
        plot_ndcg({"opr": np.ones(3)}, tmp_path / "a.png")
    with pytest.raises(ValueError, match="one length"):
        plot_ndcg({"uni_con": np.ones(3), "opr": np.ones(4)}, tmp_path / "a.png")
    with pytest.raises(ValueError, match="finite"):
        plot_learning_time({"opr": np.array([0.0, np.nan])}, tmp_path / "b.png")


def test_one_online_worker_learns_every_model_and_times_it(tiny_collection) -> None:
    from rankstream.demo_pipeline import DemoPipeline

    collection, index = tiny_collection
    pipeline = DemoPipeline(
        DemoOptions(queries=4, refit_every=3, **TINY), collection=collection, index=index
    )
    pipeline.start()
    compiled = {kernel: len(kernel.signatures) for kernel in (learn_linear, learn_arow)}
    assert pipeline.online.options.algos == names()
    assert pipeline.learning_seconds == dict.fromkeys(names() + BATCH_MODELS, 0.0)
    try:
        while not pipeline.done:
            pipeline.step()
    finally:
        pipeline.close()
    pipeline.close()  # idempotent
    curves = pipeline.clock.arrays()
    for model in names():  # Fig. 4 reads the worker's own per-model clock
        assert curves[model][-1] == pipeline.online.learn_seconds[model] > 0
    assert all(curves[m][-1] == pipeline.refit_seconds[m] > 0 for m in BATCH_MODELS)
    assert pipeline.online.counters.records == pipeline.simulation.triplets_produced
    # start() ran every specialisation the stream needs: none compiled while learning,
    # so no model's learning time holds numba's compile or cache load
    assert {kernel: len(kernel.signatures) for kernel in compiled} == compiled
