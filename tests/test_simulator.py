"""`rankstream simulate` on the embedded transport and store: counts, determinism, consistency."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from rankstream.producers.feedback_batching import QUERIES_PER_MESSAGE
from rankstream.ranking.baselines import UNI_CON
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.triplets import TripletBlock
from rankstream.selection.scoring import scorer_for
from rankstream.simulators.collection import build_collection
from rankstream.simulators.fashion_mnist import graded_relevance
from rankstream.simulators.retrieval import CandidateIndex
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.schema import decode_query, decode_triplets
from rankstream.telemetry.prometheus_metrics import sample_value
from rankstream.workers.simulator import SimulateOptions, Simulation, StepResult, TokenBucket

N_IMAGES = 20_000
# an infinite linger: which queries share a message depends on the count alone
OPTIONS = SimulateOptions(
    triplets=3000, seed=4, images=N_IMAGES, calibration_queries=10, linger_s=math.inf
)


@pytest.fixture(scope="module")
def world():
    collection = build_collection(n_images=N_IMAGES, seed=0, progress=False)
    return collection, CandidateIndex.build(collection, seed=0, progress=False)


def _simulate(settings, world, options=OPTIONS) -> Simulation:
    collection, index = world
    simulation = Simulation(settings, options, collection=collection, index=index)
    simulation.run()
    return simulation


def _read(settings, topic):
    consumer = open_transport(settings).consumer()
    consumer.assign([(topic, 0)])
    out, batch = [], consumer.poll(timeout_ms=50, max_records=10_000)
    while batch:
        out += batch
        batch = consumer.poll(timeout_ms=50, max_records=10_000)
    return out


def _per_query(messages) -> list[tuple[bytes, int, TripletBlock]]:
    """(message key, position in its message, block) for each query's triplets."""
    out = []
    for key, block in messages:
        starts = np.flatnonzero(np.diff(block.query_id, prepend=-1)) if len(block) else []
        ends = [*starts[1:], len(block)]
        out += [
            (key, i, block.select(slice(a, b)))
            for i, (a, b) in enumerate(zip(starts, ends, strict=True))
        ]
    return out


def test_counts_and_consistency_of_triplets_and_judged_queries(embedded_settings, world) -> None:
    produced = sample_value("rankstream_triplets_produced_total")
    simulation = _simulate(embedded_settings, world)
    messages = [
        (m.key, decode_triplets(m.value))
        for m in _read(embedded_settings, embedded_settings.triplets_topic)
    ]
    queries = [
        (m.key, decode_query(m.value))
        for m in _read(embedded_settings, embedded_settings.queries_topic)
    ]
    blocks = _per_query(messages)
    n = sum(len(b) for _, b in messages)
    assert n == simulation.triplets_produced >= OPTIONS.triplets
    assert n - len(blocks[-1][2]) < OPTIONS.triplets  # stopped right after N
    assert sample_value("rankstream_triplets_produced_total") == produced + n
    assert len(queries) == simulation.queries_produced
    # the simulator's batching: up to QUERIES_PER_MESSAGE queries a message, keyed by the first
    assert max(i for _, i, _ in blocks) == QUERIES_PER_MESSAGE - 1
    assert all(key == str(b.query_id[0]).encode() for key, i, b in blocks if i == 0)
    uni_con = open_store(embedded_settings).load(UNI_CON)
    assert uni_con.kind == "linear" and uni_con.version == 1
    by_query = {int(b.query_id[0]): b for _, _, b in blocks}
    assert len(by_query) == len(blocks)  # no query's triplets split across messages
    assert [int(b.query_id[0]) for _, _, b in blocks] == [
        q.query_id for _, q in queries if q.query_id in by_query
    ]  # in the judged queries' order
    seq = np.concatenate([b.seq for _, b in messages])
    np.testing.assert_array_equal(seq, np.arange(n))
    for key, q in queries:
        assert key == str(q.query_id).encode()
        assert (q.served_by, q.served_version, q.model_versions) == (UNI_CON, 1, {UNI_CON: 1})
        assert q.phi.shape == (OPTIONS.candidates, 36) and q.graded.all()  # ground truth
        assert q.judged.tolist() == [i < OPTIONS.judged for i in range(OPTIONS.candidates)]
        scores = simulation.serving.cache.get(UNI_CON, 1).score(q.phi)
        assert (np.diff(scores) <= 1e-9).all()  # candidates in served order
        top = q.relevance[q.judged].astype(int)
        pairs = int((top[:, None] > top[None, :]).sum())
        if pairs == 0:
            assert q.query_id not in by_query
            continue
        block = by_query[q.query_id]
        assert len(block) == pairs
        row = {int(c): i for i, c in enumerate(q.candidate_ids[q.judged])}
        p1 = np.array([row[int(p)] for p in block.p1_id])
        np.testing.assert_array_equal(block.phi1, q.phi[p1])
        np.testing.assert_array_equal(block.rel1, q.relevance[p1])


def test_three_queries_a_message_send_every_seq_and_judged_query_once(
    embedded_settings, world
) -> None:
    options = dataclasses.replace(OPTIONS, triplets=2000, queries_per_message=3)
    simulation = _simulate(embedded_settings, world, options)
    messages = [
        decode_triplets(m.value) for m in _read(embedded_settings, embedded_settings.triplets_topic)
    ]
    queries = [
        decode_query(m.value) for m in _read(embedded_settings, embedded_settings.queries_topic)
    ]
    groups = [len(np.unique(b.query_id)) for b in messages]
    assert groups[:-1] == [3] * (len(groups) - 1) and 1 <= groups[-1] <= 3
    seq = np.concatenate([b.seq for b in messages])
    np.testing.assert_array_equal(seq, np.arange(simulation.triplets_produced))
    assert [q.seq for q in queries] == list(range(simulation.queries_produced))
    with pytest.raises(ValueError, match="queries_per_message"):
        SimulateOptions(queries_per_message=0)
    with pytest.raises(ValueError, match="linger_s"):
        SimulateOptions(linger_s=-1.0)


def test_same_seed_and_serving_models_give_identical_streams(tmp_path, world) -> None:
    from rankstream.stream.settings import Settings

    streams = []
    for prefix in ("detA", "detB", "detC"):
        settings = Settings(topic_prefix=f"{prefix}{tmp_path.name[-12:]}", data_dir=str(tmp_path))
        seed = OPTIONS.seed if prefix != "detC" else OPTIONS.seed + 1
        _simulate(settings, world, dataclasses.replace(OPTIONS, seed=seed))
        streams.append(
            [m.value for m in _read(settings, settings.triplets_topic)]
            + [m.value for m in _read(settings, settings.queries_topic)]
        )
    assert streams[0] == streams[1]
    assert streams[0] != streams[2]


def test_a_named_serving_model_ranks_and_every_model_version_is_stamped(
    embedded_settings, world
) -> None:
    store = open_store(embedded_settings)
    weights = np.random.default_rng(2).standard_normal(36)
    ranker = OnlineRanker(algo="opr", warm_start=weights)
    meta, arrays = ranker.to_state()
    store.save("opr", kind="online", meta=meta, arrays=arrays, offsets={}, expected_version=0)
    options = dataclasses.replace(OPTIONS, triplets=500, serving="opr")
    simulation = _simulate(embedded_settings, world, options)
    queries = [
        decode_query(m.value) for m in _read(embedded_settings, embedded_settings.queries_topic)
    ]
    assert simulation.served_by == {"opr": len(queries)}
    for q in queries:
        assert q.served_by == "opr" and q.model_versions == {"opr": 1, UNI_CON: 1}
        assert (np.diff(ranker.score(q.phi)) <= 1e-9).all()


def test_token_bucket_averages_the_rate_and_lets_big_blocks_through() -> None:
    now = [0.0]
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    bucket = TokenBucket(rate=100.0, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        bucket.take(250)  # bigger than the one-second burst
    # the fifth block goes once the first four (1000 tokens, 100 of them in the
    # initial burst) are repaid at 100/s: t = 9 s
    assert now[0] == pytest.approx((4 * 250 - 100) / 100)
    assert all(s > 0 for s in slept[1:])
    with pytest.raises(ValueError):
        TokenBucket(rate=0)
    with pytest.raises(ValueError):
        SimulateOptions(rate=-1.0)


def _stop_after(simulation: Simulation, queries: int, stop) -> Simulation:
    """Run until `stop(simulation)` is called after `queries` queries (never done by count)."""

    def on_step(_: StepResult) -> None:
        if simulation.queries_produced == queries:
            stop(simulation)

    simulation.handler.on_step = on_step
    simulation.runtime.run()
    return simulation


def test_a_stopped_simulator_sends_its_pending_queries(embedded_settings, world) -> None:
    """A signal's clean stop (`runtime.stop`) hands over the partial batch and flushes."""
    collection, index = world
    options = dataclasses.replace(OPTIONS, triplets=None)
    simulation = Simulation(embedded_settings, options, collection=collection, index=index)
    _stop_after(simulation, 5, lambda sim: sim.runtime.stop())
    queries = _read(embedded_settings, embedded_settings.queries_topic)
    messages = _read(embedded_settings, embedded_settings.triplets_topic)
    assert len(queries) == 5 and len(messages) == 1  # five of QUERIES_PER_MESSAGE = 8
    assert len(decode_triplets(messages[0].value)) == simulation.triplets_produced


def test_a_simulator_ended_by_an_error_still_sends_its_pending_queries(
    embedded_settings, world
) -> None:
    collection, index = world
    options = dataclasses.replace(OPTIONS, triplets=None)
    simulation = Simulation(embedded_settings, options, collection=collection, index=index)

    def fail(_: Simulation) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        _stop_after(simulation, 3, fail)
    assert len(_read(embedded_settings, embedded_settings.queries_topic)) == 3


def test_a_rate_limited_simulator_sends_what_is_pending_before_it_sleeps(
    embedded_settings, world
) -> None:
    collection, index = world
    simulation = Simulation(embedded_settings, OPTIONS, collection=collection, index=index)
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    simulation.handler.bucket = TokenBucket(rate=100.0, clock=lambda: now[0], sleep=sleep)
    for _ in range(3):  # the first query's block puts the bucket in debt
        simulation.step()
    assert now[0] > 0 and simulation.handler.feedback.pending == 1
    messages = _read(embedded_settings, embedded_settings.triplets_topic)
    assert [len(np.unique(decode_triplets(m.value).query_id)) for m in messages] == [1, 1]
    simulation.close()
    assert len(_read(embedded_settings, embedded_settings.queries_topic)) == 3


def test_cli_json_prints_one_object(monkeypatch, tmp_path, capsys) -> None:
    from rankstream.cli import main

    monkeypatch.setenv("RANKSTREAM_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RANKSTREAM_TOPIC_PREFIX", f"cli{tmp_path.name[-10:]}")
    assert main(["simulate", "--triplets", "200", "--images", "4000", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["triplets"] >= 200 and summary["served_by"] == {UNI_CON: summary["queries"]}
    assert summary["collection"] == "synthetic" and summary["images"] == 4000
    assert main(["simulate", "--collection", "fashion-mnist", "--images", "4000"]) == 2
    assert "takes no option n_images" in capsys.readouterr().err


def test_the_simulator_serves_real_photos(embedded_settings, fashion_slice) -> None:
    options = SimulateOptions(triplets=2000, seed=1, collection="fashion-mnist")
    simulation = Simulation(
        embedded_settings,
        options,
        collection=fashion_slice.collection,
        index=fashion_slice.index,
    )
    summary = simulation.run()
    assert summary["collection"] == "fashion-mnist" and summary["images"] == 400
    topic = embedded_settings.triplets_topic
    blocks = [decode_triplets(m.value) for m in _read(embedded_settings, topic)]
    assert sum(len(b) for b in blocks) == summary["triplets"] >= 2000
    labels = fashion_slice.collection.labels
    queries = [
        decode_query(m.value) for m in _read(embedded_settings, embedded_settings.queries_topic)
    ]
    assert len(queries) == summary["queries"]
    for query in queries:  # graded by the photos' own classes, for the query photo's class
        candidates = labels[query.candidate_ids]
        assert any(
            np.array_equal(query.relevance, graded_relevance(label, candidates))
            for label in range(10)
        )


def test_options_name_a_catalog_collection_and_only_its_options() -> None:
    assert SimulateOptions().collection_options() == {}
    assert SimulateOptions(images=5000, collection_seed=2).collection_options() == {
        "n_images": 5000,
        "collection_seed": 2,
    }
    with pytest.raises(ValueError, match="takes no option collection_seed"):
        SimulateOptions(collection="fashion-mnist", collection_seed=1)
    with pytest.raises(ValueError, match="unknown collection"):
        SimulateOptions(collection="imagenet")
    with pytest.raises(ValueError, match="images must be >= 1"):
        SimulateOptions(images=0)


def test_a_collection_other_than_the_options_one_is_refused(
    embedded_settings, fashion_slice
) -> None:
    with pytest.raises(ValueError, match="collection 'fashion-mnist' given"):
        Simulation(embedded_settings, OPTIONS, collection=fashion_slice.collection)


# ------------------------------------------------------------- clicks instead of judgments
CLICK_OPTIONS = dataclasses.replace(
    OPTIONS, triplets=None, queries=12, feedback="clicks:perfect", seed=5
)


def test_clicking_users_send_impressions_and_their_clicks_as_an_engine_would(
    embedded_settings, world
) -> None:
    """Perfect users (three grades: click 0, .5, 1; never stop) click every grade-2 result
    shown and no grade-0 one: each impression shows the served top 50 with its phi, each
    click names a shown candidate at its 1-based position, and no triplet or judged
    query comes from the simulator (the click join makes the triplets)."""
    from rankstream.simulators.judged_feedback import FeedbackSimulator
    from rankstream.stream.click_schema import decode_clicks, decode_impressions, impression_key

    simulation = _simulate(embedded_settings, world, CLICK_OPTIONS)
    summary = simulation.summary()
    assert summary["queries"] == 12 and summary["triplets"] == 0
    assert summary["feedback"] == "clicks:perfect"
    shown = _read(embedded_settings, embedded_settings.impressions_topic)
    clicked = _read(embedded_settings, embedded_settings.clicks_topic)
    assert len(shown) == len(clicked) == 12
    assert not _read(embedded_settings, embedded_settings.triplets_topic)
    collection, index = world
    replay = FeedbackSimulator(collection, seed=CLICK_OPTIONS.seed, index=index)
    uni_con = scorer_for(open_store(embedded_settings).load(UNI_CON))
    total = 0
    for impression_message, click_message in zip(shown, clicked, strict=True):
        (impression,) = decode_impressions(impression_message.value).records
        clicks = decode_clicks(click_message.value).records
        query = replay.next_query()
        assert impression.query_id == query.query_id
        assert (
            impression_message.key == click_message.key == impression_key(impression.impression_id)
        )
        order = np.argsort(-uni_con.score(query.phi), kind="stable")[:50]
        np.testing.assert_array_equal(impression.candidate_ids, query.candidate_ids[order])
        np.testing.assert_array_equal(impression.phi, query.phi[order])
        assert impression.model == UNI_CON and impression.model_versions[UNI_CON] >= 1
        grade = dict(zip(query.candidate_ids.tolist(), query.relevance.tolist(), strict=True))
        expected = [cid for cid in impression.candidate_ids.tolist() if grade[cid] == 2]
        got = [c.candidate_id for c in clicks if c.clicked]
        assert set(expected) <= set(got)
        assert all(grade[cid] > 0 for cid in got)
        for click in clicks:
            assert click.impression_id == impression.impression_id
            if click.clicked:
                assert impression.candidate_ids[click.position - 1] == click.candidate_id
        assert not clicks[-1].clicked  # the session-over row closes every impression
        total += len(got)
    assert summary["clicks"] == total > 0


def test_clicking_users_see_the_champion_interleaved_as_serve_drafts_it(
    embedded_settings, world
) -> None:
    """With an interleaving share, the simulated engine serves the champion's team draft
    with the other scorable model (`selection.click_race`, serve's): every impression shows
    the top 50 of the merged list with its teams, the champion first; the same seed
    drafts the same lists; a named serving model is never interleaved."""
    from rankstream.ranking.interleaving import team_draft
    from rankstream.simulators.judged_feedback import FeedbackSimulator
    from rankstream.stream.click_schema import decode_impressions
    from rankstream.workers.simulator import INTERLEAVING_STREAM

    settings = dataclasses.replace(embedded_settings, interleaving_share=1.0)
    store = open_store(settings)
    ranker = OnlineRanker(algo="opr", warm_start=np.linspace(-1.0, 1.0, 36))
    meta, arrays = ranker.to_state()
    store.save("opr", kind="online", meta=meta, arrays=arrays, offsets={}, expected_version=0)
    summary = _simulate(settings, world, CLICK_OPTIONS).summary()
    assert summary["interleaved"] == summary["queries"] == 12
    assert 0 < summary["shown_ndcg_at_50"] <= 1
    collection, index = world
    replay = FeedbackSimulator(collection, seed=CLICK_OPTIONS.seed, index=index)
    scorers = {name: scorer_for(store.load(name)) for name in (UNI_CON, "opr")}
    drafts = np.random.default_rng([CLICK_OPTIONS.seed, INTERLEAVING_STREAM])
    for message in _read(settings, settings.impressions_topic):
        (impression,) = decode_impressions(message.value).records
        query = replay.next_query()
        assert impression.model == UNI_CON and impression.team_models == (UNI_CON, "opr")
        rankings = [np.argsort(-scorers[m].score(query.phi), kind="stable") for m in scorers]
        drafted = team_draft(rankings, len(query.candidate_ids), drafts)
        np.testing.assert_array_equal(
            impression.candidate_ids, query.candidate_ids[drafted.items[:50]]
        )
        np.testing.assert_array_equal(impression.teams, drafted.teams[:50])
    named = dataclasses.replace(CLICK_OPTIONS, serving="opr")
    assert _simulate(settings, world, named).summary()["interleaved"] == 0


def test_the_click_join_turns_the_simulated_clicks_into_weighted_triplets(
    embedded_settings, world
) -> None:
    """The route an engine's clicks take: the simulator's impressions and clicks, joined
    by the click join (`workers.click_join`) into weighted triplets for the learners, one
    group per impression with a click, each pair a shown result of that impression."""
    from rankstream.stream.click_schema import decode_impressions
    from rankstream.workers.click_join import ClickJoin
    from rankstream.workers.click_join_options import JoinOptions

    options = dataclasses.replace(CLICK_OPTIONS, feedback="clicks:informational", queries=20)
    summary = _simulate(embedded_settings, world, options).summary()
    transport, store = open_transport(embedded_settings), open_store(embedded_settings)
    topics = (embedded_settings.impressions_topic, embedded_settings.clicks_topic)
    ends = {topic: transport.end_offsets(topic) for topic in topics}

    def read_everything(runtime) -> bool:
        seen = runtime.handler.offsets
        return all(seen.get(t, {}).get(p) == e for t, pe in ends.items() for p, e in pe.items())

    assert (
        ClickJoin(embedded_settings, JoinOptions(), transport=transport, store=store).run(
            until=read_everything
        )
        == 0
    )
    shown = {}
    for message in _read(embedded_settings, embedded_settings.impressions_topic):
        (impression,) = decode_impressions(message.value).records
        shown[impression.query_id] = set(impression.candidate_ids.tolist())
    blocks = [
        decode_triplets(m.value) for m in _read(embedded_settings, embedded_settings.triplets_topic)
    ]
    assert blocks and summary["clicks"] > 0
    for block in blocks:
        weight = np.ones(len(block)) if block.weight is None else block.weight  # v2: all 1
        assert (weight >= 1.0).all()  # 1 / P(examined), P <= 1
        for query, p1, p2 in zip(block.query_id, block.p1_id, block.p2_id, strict=True):
            assert {int(p1), int(p2)} <= shown[int(query)]


def test_the_feedback_option_is_checked() -> None:
    with pytest.raises(ValueError, match="number of queries"):
        dataclasses.replace(CLICK_OPTIONS, queries=None)
    with pytest.raises(ValueError, match="unknown click model"):
        dataclasses.replace(CLICK_OPTIONS, feedback="clicks:nobody")
    with pytest.raises(ValueError, match="judged"):
        dataclasses.replace(CLICK_OPTIONS, feedback="graded")


def test_cli_simulates_clicking_users(monkeypatch, tmp_path, capsys) -> None:
    from rankstream.cli import main

    monkeypatch.setenv("RANKSTREAM_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RANKSTREAM_TOPIC_PREFIX", f"clk{tmp_path.name[-10:]}")
    args = ["simulate", "--feedback", "clicks:informational", "--queries", "5"]
    assert main([*args, "--images", "4000", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["queries"] == 5 and summary["triplets"] == 0 and summary["clicks"] > 0
    assert main(["simulate", "--feedback", "clicks:informational", "--images", "4000"]) == 2
    assert "number of queries" in capsys.readouterr().err


def test_clicking_users_see_the_share_interleaved_against_the_champion_of_the_moment(
    embedded_settings, world
) -> None:
    """With RANKSTREAM_INTERLEAVING_SHARE 1 every impression is the champion's ranking
    drafted with a challenger (`selection.click_race`, serve's drafter): its teams are
    recorded, the champion first. When the champion record changes mid-stream, the next
    impressions are drafted against the new champion (read from the store, as serve
    reads it), so the click join's race never gets stale ones from the simulator."""
    from rankstream.selection.judged_race import publish_champion
    from rankstream.stream.click_schema import decode_impressions

    settings = dataclasses.replace(embedded_settings, interleaving_share=1.0)
    collection, index = world
    simulation = Simulation(settings, CLICK_OPTIONS, collection=collection, index=index)
    store = simulation.store
    rng = np.random.default_rng(3)
    ranker = OnlineRanker(algo="opr")
    ranker.learn_many(rng.standard_normal((40, 36)), np.where(rng.random(40) < 0.5, 1.0, -1.0))
    meta, arrays = ranker.to_state()
    store.save("opr", kind="online", meta=meta, arrays=arrays, offsets={}, expected_version=0)

    def switch_halfway(step: StepResult) -> None:
        if simulation.handler.queries_produced == 6:
            assert publish_champion(store, "opr", previous=UNI_CON, decided_by="clicks",
                                    evidence={}) == ("opr", True)  # fmt: skip

    summary = simulation.run(on_step=switch_halfway)
    assert summary["interleaved"] == summary["queries"] == 12
    impressions = [
        decode_impressions(m.value).records[0] for m in _read(settings, settings.impressions_topic)
    ]
    drafted = [(imp.model, imp.team_models) for imp in impressions]
    assert drafted == [(UNI_CON, (UNI_CON, "opr"))] * 6 + [("opr", ("opr", UNI_CON))] * 6
    for imp in impressions:
        assert len(imp.teams) == len(imp.candidate_ids) == 50
        sizes = np.bincount(imp.teams, minlength=2)
        assert sizes.min() >= 1 and abs(int(sizes[0]) - int(sizes[1])) <= 1  # a fair draft
