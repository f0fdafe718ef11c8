"""The click demo (`rankstream demo --feedback clicks:MODEL`): no judgment is sent, the
interleaving race on simulated users' clicks moves the champion, the report shows it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rankstream.cli import main
from rankstream.click_demo import run_click_demo
from rankstream.demo_pipeline import DemoOptions, DemoPipeline, report_models, run_demo
from rankstream.ranking.baselines import UNI_CON
from rankstream.simulators.collection import build_collection
from rankstream.simulators.retrieval import CandidateIndex
from rankstream.stream.click_schema import decode_impressions

# A collection as dense in relevant images as the paper's (800 of 100,000; at the tests'
# usual 4,000 images a fifth are relevant and Uni-Con's top 50 is nearly all relevant).
SWITCH = {
    "images": 100_000,
    "queries": 1200,  # the switch comes at 1,108 (898 with each challenger at alpha, not alpha / 7)
    "feedback": "clicks:perfect",
    "interleaving_share": 1.0,
    "refit_every": 200,  # no batch refit in this run: the online learners race Uni-Con
    "scaler_rows": 300,
}
TINY = {
    "images": 4000,
    "queries": 30,
    "feedback": "clicks:navigational",
    "interleaving_share": 1.0,
    "refit_every": 12,
    "scaler_rows": 20,
    "reservoir": 300,
    "cmds_dml_iterations": 10,
    "rankmkl_pairs": 100,
    "calibration_queries": 5,
}


def _world(images: int):
    collection = build_collection(n_images=images, seed=0, progress=False)
    return collection, CandidateIndex.build(collection, seed=0, progress=False)


@pytest.fixture(scope="module")
def switch_run():
    collection, index = _world(SWITCH["images"])
    options = DemoOptions(**SWITCH)
    return run_click_demo(options, collection=collection, index=index, progress=False)


@pytest.fixture(scope="module")
def tiny_world():
    return _world(TINY["images"])


def test_the_champion_moves_to_a_learned_model_on_clicks_alone(switch_run) -> None:
    """Perfect users (three grades: click 0, .5, 1; never stop) on the paper's density of
    relevant images, every ranking interleaved: the online learners learn from the click
    join's pairs only, and the race on their interleaved clicks makes one of them
    champion (AROW, at impression 1,108 of 1,200 on this data with the default pairs, each
    click over every other shown result). It took 119-200 impressions while OPR..OGDR
    learned click triplets unregularized: they fell behind Uni-Con and were refused, so
    AROW had the drafts; learned regularized they stay near Uni-Con, keep being drafted
    and split the race's evidence seven ways, and each of the seven is tested at alpha / 7
    (the family's alpha: its wealth must reach 700, not 100; at alpha each, 898).
    Deterministic for its options (no thread, no timer), so the switch is a property of
    this data, not of timing."""
    report = json.loads(json.dumps(switch_run.report()))  # plain JSON throughout
    assert report["judged"] == {"queries_sent": 0, "triplets_sent": 0}  # nothing judged
    assert report["learned_triplets"] == report["join"]["triplets"] > 0  # all from clicks
    assert report["join"]["sessions"] == report["impressions"] == SWITCH["queries"]
    assert report["join"]["dead_letters"] == 0
    first, second = report["champions"][:2]
    assert first["champion"] == UNI_CON and first["first_impression"] == 1
    learned = second["champion"]
    assert learned in report_models() and learned != UNI_CON
    assert second["decided_by"] == "clicks" and second["previous"] == UNI_CON
    assert second["first_impression"] == second["decided_at_impression"] + 1
    assert report["served_by"][UNI_CON] == first["impressions"] == second["decided_at_impression"]
    evidence = second["evidence"]
    assert evidence["challenger"] == learned and evidence["decision"] == "switch"
    assert evidence["log_statistic"] >= evidence["threshold"]
    assert evidence["wins"] > evidence["losses"]  # 93 to 47 on this data
    race = second["race"]  # every challenger's race when the clicks decided
    assert evidence["threshold"] == pytest.approx(math.log(len(race) / 0.01))  # the family's
    assert race[learned]["wins"] == evidence["wins"]
    for entry in race.values():
        assert entry["impressions"] == entry["wins"] + entry["losses"] + entry["ties"]
        assert entry["decision"] in ("switch", "undecided", "refuse")
    interleaved = sum(e["impressions"] for e in race.values())  # team draft: one race each
    assert interleaved <= report["interleaved_impressions"]
    assert report["interleaving"]["incumbent"] == report["champion"]
    # the simulator's measurement (never sent): users see better lists after the switch
    assert second["true_ndcg_at_50_shown"] > first["true_ndcg_at_50_shown"]
    assert report["true_ndcg_at_50"]["before_first_switch"] == first["true_ndcg_at_50_shown"]
    assert 0 < report["click_through_rate"] <= 1 and report["clicks"] > 0


def test_the_click_demo_is_deterministic_and_logs_the_teams(tiny_world) -> None:
    """Every ranking interleaved (share 1): each impression on the stream holds its teams,
    the champion first; two runs of the same options give the same impressions, clicks,
    measurements and race."""
    collection, index = tiny_world
    options = DemoOptions(**TINY)
    pipeline = DemoPipeline(options, collection=collection, index=index)
    pipeline.start()
    try:
        while not pipeline.done:
            pipeline.step()
        consumer = pipeline.transport.consumer(None)
        topic = pipeline.settings.impressions_topic
        consumer.assign([(topic, 0)])
        consumer.seek_to_beginning(topic, 0)
        shown = [i for m in consumer.poll(0, 10_000) for i in decode_impressions(m.value).records]
        consumer.close()
    finally:
        pipeline.close()
    assert pipeline.evaluator is None and pipeline.clicks is not None  # no judged race
    interleaved = [i for i in shown if i.team_models]
    assert len(shown) == TINY["queries"] and interleaved  # once a challenger exists
    for impression in interleaved:
        assert impression.team_models[0] == impression.model
        assert impression.teams is not None and len(impression.teams) == 50
    history = pipeline.clicks
    assert sum(history.interleaved) == len(interleaved)
    again = run_click_demo(options, collection=collection, index=index, progress=False).history
    assert again.served_by == history.served_by and again.clicks == history.clicks
    assert again.interleaved == history.interleaved and again.shown_ndcg == history.shown_ndcg
    assert again.race() == history.race()


def test_the_demos_refuse_each_others_options(tiny_world) -> None:
    collection, index = tiny_world
    with pytest.raises(ValueError, match="click demo"):
        run_demo(DemoOptions(**TINY), collection=collection, index=index, progress=False)
    with pytest.raises(ValueError, match="needs feedback clicks"):
        run_click_demo(DemoOptions(queries=2), collection=collection, index=index)
    with pytest.raises(ValueError, match="interleaving_share"):
        DemoOptions(feedback="clicks:perfect", interleaving_share=1.5)
    with pytest.raises(ValueError, match="unknown click model"):
        DemoOptions(feedback="clicks:nobody")


def test_cli_click_demo_writes_its_report_and_plots(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("RANKSTREAM_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RANKSTREAM_KAFKA_BOOTSTRAP", "nowhere:9")  # the demo ignores services
    out = tmp_path / "report"
    args = ["demo", "--feedback", "clicks:informational", "--images", "4000", "--queries", "6"]
    assert main([*args, "--interleaving-share", "1", "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    report = json.loads((out / "report.json").read_text())
    assert printed == report and report["feedback"] == "clicks:informational"
    assert report["impressions"] == 6 and report["interleaving_share"] == 1.0
    assert report["judged"] == {"queries_sent": 0, "triplets_sent": 0}
    assert report["champions"][0]["champion"] == UNI_CON
    assert np.isclose(
        report["true_ndcg_at_50"]["shown"], report["champions"][0]["true_ndcg_at_50_shown"]
    )
    for name in ("click_demo.png", "learning_time.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*args, "--out", str(out)]) == 0  # the table
    table = capsys.readouterr().out
    assert "Uni-Con" in table and "click-through rate" in table and "simulator" in table
    assert main(["demo", "--feedback", "clicks:nobody", "--out", str(out)]) == 2
    assert "unknown click model" in capsys.readouterr().err
    assert main(["demo", "--feedback", "clicks:perfect", "--interleaving-share", "2"]) == 2
