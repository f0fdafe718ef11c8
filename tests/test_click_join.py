"""The click join: its window (pairs by position, late/unknown/grace, eviction, state),
its weights, the propensities from swapped and shuffled impressions, and exactly-once
output (and PDGD's weights) across crashes (embedded transport and store here;
tests/test_click_join_services.py runs it on Kafka and Redis)."""

from __future__ import annotations

import dataclasses
import json
import uuid

import numpy as np
import pytest

from rankstream.ranking.click_pairs import click_pairs
from rankstream.ranking.propensity import (
    SWAP,
    PropensityEstimator,
    choose_swap,
    parse_swap,
    randomize,
    shuffle_intervention,
    swap,
    swap_intervention,
)
from rankstream.stream.click_schema import Click, Impression, encode_clicks, encode_impressions
from rankstream.stream.click_window import ClickWindow, PendingClick
from rankstream.stream.embedded import EmbeddedTransport
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.schema import decode_dead_letter, decode_triplets
from rankstream.stream.settings import Settings
from rankstream.workers import click_join
from rankstream.workers.click_join import (
    PROPENSITIES_MODEL,
    ClickJoin,
    ClickJoinHandler,
    JoinOptions,
)

D = 4
WINDOW, GRACE = 100.0, 10.0


def _impression(i: int, t: float, n: int = 6, intervention: str | None = None) -> Impression:
    rng = np.random.default_rng(i)
    return Impression(
        impression_id=f"{i:032x}",
        time=t,
        model="opar1",
        version=1,
        model_versions={"opar1": 1},
        candidate_ids=np.arange(100 * i, 100 * i + n, dtype=np.int64),
        phi=rng.standard_normal((n, D)).astype(np.float32),
        intervention=intervention,
    )


def _click(i: int, rank: int | None, t: float) -> PendingClick:
    """A click on the result shown at `rank` (1-based) of impression i; None: session over."""
    return PendingClick(None if rank is None else 100 * i + rank - 1, t, ("clicks", 0, 0, 0))


def _source(i: int) -> tuple[str, int, int, int]:
    return ("impressions", 0, i, 0)


# ------------------------------------------------------------------ the window
def test_a_session_over_row_closes_it_with_its_clicks_by_displayed_position() -> None:
    window = ClickWindow(WINDOW, GRACE)
    assert window.add_impression(_impression(1, 0.0), _source(1)) == []
    assert window.add_click(f"{1:032x}", _click(1, 2, 1.0)) == []
    assert window.add_click(f"{1:032x}", _click(1, 4, 2.0)) == []
    assert window.add_click(f"{1:032x}", _click(1, 2, 2.5)) == []  # a second click counts once
    assert window.ready() == []  # no end row, window not over
    window.add_click(f"{1:032x}", _click(1, None, 3.0))
    (closed,) = window.ready()
    assert closed.clicked.tolist() == [False, True, False, True, False, False]
    assert closed.rejects == []
    assert window.sessions == {}


def test_the_window_closes_a_session_without_an_end_row_in_click_time() -> None:
    window = ClickWindow(WINDOW, GRACE)
    window.add_impression(_impression(1, 0.0), _source(1))
    window.add_click(f"{1:032x}", _click(1, 3, 50.0))
    window.add_impression(_impression(2, 60.0), _source(2))
    window.add_click(f"{2:032x}", _click(2, 1, WINDOW))  # at the edge: still in, not past it
    assert window.ready() == []
    window.add_click(f"{2:032x}", _click(2, None, WINDOW + 0.5))  # closes 2, and 1's window is over
    first, second = window.ready()
    assert first.impression.impression_id == f"{1:032x}" and first.clicked[2]
    assert second.clicked.tolist() == [True] + [False] * 5


def test_closed_sessions_leave_in_arrival_order() -> None:
    """An ended session waits behind an open one that arrived before it."""
    window = ClickWindow(WINDOW, GRACE)
    window.add_impression(_impression(1, 0.0), _source(1))
    window.add_impression(_impression(2, 1.0), _source(2))
    window.add_click(f"{2:032x}", _click(2, None, 2.0))
    assert window.ready() == []
    window.add_click(f"{1:032x}", _click(1, None, 3.0))
    assert [c.impression.impression_id for c in window.ready()] == [f"{1:032x}", f"{2:032x}"]


def test_late_clicks_are_refused_with_their_reason() -> None:
    window = ClickWindow(WINDOW, GRACE)
    window.add_impression(_impression(1, 0.0), _source(1))
    (late,) = window.add_click(f"{1:032x}", _click(1, 2, WINDOW + 1.0))
    assert late.reason == "late" and late.candidate_id == 101
    window.add_impression(_impression(2, 0.0), _source(2))
    window.add_click(f"{2:032x}", _click(2, None, 1.0))
    (after_end,) = window.add_click(f"{2:032x}", _click(2, 1, 2.0))
    assert after_end.reason == "late"
    window.ready()
    (after_close,) = window.add_click(f"{2:032x}", _click(2, 1, 3.0))
    assert after_close.reason == "late"  # its id is remembered for a window after closing


def test_a_click_that_overtook_its_impression_waits_out_the_grace() -> None:
    window = ClickWindow(WINDOW, GRACE)
    window.add_impression(_impression(1, 0.0), _source(1))
    assert window.add_click(f"{2:032x}", _click(2, 1, 5.0)) == []  # impression 2 not yet here
    assert window.waiting == 1 and window.unknown() == []
    window.add_impression(_impression(2, 4.0), _source(2))
    assert window.waiting == 0
    window.add_click(f"{1:032x}", _click(1, None, 6.0))
    window.add_click(f"{2:032x}", _click(2, None, 6.0))
    assert window.ready()[1].clicked[0]


def test_a_click_for_an_impression_that_never_came_is_unknown_after_the_grace() -> None:
    window = ClickWindow(WINDOW, GRACE)
    assert window.add_click(f"{9:032x}", _click(9, 1, 5.0)) == []
    window.add_impression(_impression(1, 5.0 + GRACE), _source(1))  # not past the grace yet
    assert window.unknown() == []
    window.add_impression(_impression(2, 5.0 + GRACE + 0.1), _source(2))
    (unknown,) = window.unknown()
    assert unknown.reason == "unknown_impression" and window.waiting == 0
    (at_once,) = window.add_click(f"{8:032x}", _click(8, 1, 1.0))  # already beyond the grace
    assert at_once.reason == "unknown_impression"


def test_a_click_on_a_candidate_not_shown_is_refused_when_the_session_closes() -> None:
    window = ClickWindow(WINDOW, GRACE)
    window.add_impression(_impression(1, 0.0), _source(1))
    window.add_click(f"{1:032x}", PendingClick(99_999, 1.0, ("clicks", 0, 7, 2)))
    window.add_click(f"{1:032x}", _click(1, None, 2.0))
    (closed,) = window.ready()
    (reject,) = closed.rejects
    assert reject.reason == "unknown_candidate" and reject.source == ("clicks", 0, 7, 2)
    assert not closed.clicked.any()


def test_closed_ids_are_forgotten_a_window_after_their_own() -> None:
    window = ClickWindow(WINDOW, GRACE)
    window.add_impression(_impression(1, 0.0), _source(1))
    window.add_click(f"{1:032x}", _click(1, None, 1.0))
    window.ready()
    assert f"{1:032x}" in window.closed
    window.add_impression(_impression(2, 2 * WINDOW + 5), _source(2))
    window.add_click(f"{2:032x}", _click(2, None, 2 * WINDOW + 6))
    window.ready()
    assert f"{1:032x}" not in window.closed and f"{2:032x}" in window.closed


def test_the_state_round_trips_through_json_and_the_log() -> None:
    """Saved mid-stream, restored (JSON), its impressions re-read: the same as never saved."""

    def feed(window: ClickWindow, events: list) -> list:
        out = []
        for kind, *args in events:
            if kind == "imp":
                window.add_impression(*args)
            else:
                window.add_click(*args)
            out += [(c.impression.impression_id, c.clicked.tolist()) for c in window.ready()]
        return out

    events = [("imp", _impression(i, float(i)), _source(i)) for i in range(5)]
    events += [("click", f"{i:032x}", _click(i, 1 + i % 3, i + 0.5)) for i in range(5)]
    events += [("click", f"{7:032x}", _click(7, 1, 3.0))]  # waits for its impression
    later = [("click", f"{i:032x}", _click(i, None, 10.0 + i)) for i in (1, 0, 2)]
    later += [("imp", _impression(7, 3.0), _source(7)), ("click", f"{7:032x}", _click(7, None, 20))]
    later += [("click", f"{4:032x}", _click(4, 2, 150.0))]  # past 3's and 4's windows

    whole = ClickWindow(WINDOW, GRACE)
    expected = feed(whole, events + later)
    first = ClickWindow(WINDOW, GRACE)
    done = feed(first, events)
    restored = ClickWindow.from_state(json.loads(json.dumps(first.to_state())))
    assert restored.resume_offsets("impressions") == {0: 0}
    assert restored.ready() == []  # nothing leaves before its impression is back
    for i in range(5):
        assert restored.hydrate(_impression(i, float(i)), _source(i))
    assert not restored.hydrate(_impression(9, 9.0), _source(9))
    done += feed(restored, later)
    assert done == expected
    assert len(expected) == 6


# ------------------------------------------------------------------ propensities
def test_swap_interventions_are_chosen_applied_and_read_back() -> None:
    rng = np.random.default_rng(0)
    ks = [choose_swap(rng, 0.2, shown=50, depth=10) for _ in range(20_000)]
    chosen = [k for k in ks if k is not None]
    assert abs(len(chosen) / len(ks) - 0.2) < 0.02  # 7 standard errors
    assert set(chosen) == set(range(2, 11))
    assert choose_swap(rng, 1.0, shown=1) is None  # nothing to swap
    assert choose_swap(rng, 1.0, shown=3, depth=10) in (2, 3)
    assert swap(np.array([5, 6, 7, 8]), 3).tolist() == [7, 6, 5, 8]
    assert parse_swap(swap_intervention(4)) == 4
    assert parse_swap(None) is None and parse_swap("swap:1-x") is None
    assert parse_swap("shuffle:1-10") is None and parse_swap("swap:1-1") is None


def test_the_swap_estimate_finds_the_position_based_truth() -> None:
    """Position-based users with examination (1/k)^1: the estimate at ranks 2..10 comes
    within 5 standard errors of 1/k (a fixed seed; the margins are the data's)."""
    rng = np.random.default_rng(1)
    n, depth, share = 400_000, 10, 0.5
    truth = 1.0 / np.arange(1, 51)
    attract = rng.uniform(0.2, 0.9, (n, 50))  # each impression's results, top first
    estimator = PropensityEstimator(depth=depth, prior_clicks=0.0)
    for i in range(n):
        shown = randomize(attract[i], SWAP, share, rng, depth)
        estimator.observe(shown.intervention, rng.random(50) < truth * shown.order)
    found = estimator.propensities(depth)
    per_rank = estimator.impressions[1:]
    se = np.sqrt(truth[1:depth] * 0.55 / (per_rank * 0.55 * truth[1:depth] + 1e-9) / per_rank)
    assert found[0] == 1.0
    assert (np.abs(found[1:] - truth[1:depth]) < 5 * np.maximum(se, 0.02)).all(), found


def test_without_data_the_estimate_is_the_prior() -> None:
    estimator = PropensityEstimator(depth=10)
    np.testing.assert_allclose(estimator.propensities(10), 1.0 / np.arange(1, 11))
    estimator.observe(None, np.array([True] + [False] * 9))
    estimator.observe(swap_intervention(4), np.array([False] * 10))
    assert 0 < estimator.propensities(10)[3] < 0.25  # one unclicked swap pulls rank 4 down a bit
    back = PropensityEstimator.from_state(json.loads(json.dumps(estimator.to_state())))
    np.testing.assert_array_equal(back.propensities(30), estimator.propensities(30))


def test_a_join_state_from_before_shuffles_reads_as_swaps_only() -> None:
    """A checkpoint or stored `propensities` written before shuffles existed (swap counts
    only) loads with nothing shuffled, and the same estimate."""
    estimator = PropensityEstimator(depth=4)
    estimator.observe_many(
        [None, None, swap_intervention(2), swap_intervention(4)],
        np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1]], dtype=bool),
    )
    old = {k: v for k, v in estimator.to_state().items() if not k.startswith("shuffled")}
    back = PropensityEstimator.from_state(old)
    assert back.shuffled.tolist() == [0, 0, 0, 0]
    np.testing.assert_array_equal(back.propensities(10), estimator.propensities(10))
    with pytest.raises(ValueError, match="more clicks"):
        PropensityEstimator.from_state({**old, "shuffled_top": [0, 1, 0, 0]})


def test_interventions_this_code_does_not_know_count_nowhere() -> None:
    """Only None (shown as ranked), "swap:1-k" and "shuffle:1-n" are counted: a ranking
    randomized some other way says nothing about rank 1 as ranked."""
    estimator = PropensityEstimator(depth=4)
    clicks = np.ones((3, 4), dtype=bool)
    estimator.observe_many(["pair:2-3", "swap:1-1", "shuffle:1-x"], clicks)
    assert estimator.observed == 0 and estimator.intervened == 0


# ------------------------------------------------------------------ the handler
def _settings() -> Settings:
    return Settings(
        topic_prefix=f"test-join-{uuid.uuid4().hex[:8]}",
        phi_dim=D,
        click_window_s=WINDOW,
        click_grace_s=GRACE,
    )


def _send(transport: EmbeddedTransport, settings: Settings, events: list) -> None:
    producer = transport.producer()
    for kind, payload in events:
        if kind == "imp":
            producer.send(settings.impressions_topic, encode_impressions([payload]))
        else:
            producer.send(settings.clicks_topic, encode_clicks(payload))
    producer.flush()


def _stream(n: int = 40, seed: int = 0) -> list:
    """n impressions (every 4th swapped, every 4th from the 3rd its top 6 shuffled), each
    with clicks then its end row; a late click, an unknown impression and an unknown
    candidate among them."""
    rng = np.random.default_rng(seed)
    events: list = []
    for i in range(n):
        intervention = {0: swap_intervention(2 + i % 5), 2: shuffle_intervention(6)}.get(i % 4)
        imp = _impression(i, float(i), intervention=intervention)
        events.append(("imp", imp))
        ranks = np.flatnonzero(rng.random(6) < 0.3) + 1
        clicks = [Click(imp.impression_id, int(100 * i + r - 1), time=i + 0.5) for r in ranks]
        if i == 12:
            clicks.append(Click(imp.impression_id, 777, time=i + 0.6))  # not among its results
        events.append(("click", [*clicks, Click.no_click(imp.impression_id, time=i + 1.0)]))
    events.insert(10, ("click", [Click(f"{999:032x}", 5, time=3.0)]))  # never shown
    events.insert(20, ("click", [Click(f"{3:032x}", 301, time=9.0)]))  # after its end row
    return events


def _run(
    settings: Settings, transport, store, options: JoinOptions, join: ClickJoin | None = None
) -> ClickJoin:
    """Run the join until it has read every input message (its final checkpoint sends)."""
    join = join or ClickJoin(settings, options, transport=transport, store=store)
    ends = {
        t: transport.end_offsets(t) for t in (settings.impressions_topic, settings.clicks_topic)
    }

    def done(runtime) -> bool:
        offsets = runtime.handler.offsets
        return all(offsets.get(t, {}).get(p) == e for t, pe in ends.items() for p, e in pe.items())

    assert join.run(until=done) == 0
    return join


def _output(transport, settings: Settings) -> list[tuple[bytes, bytes]]:
    consumer = transport.consumer(None)
    consumer.assign([(settings.triplets_topic, 0)])
    consumer.seek_to_beginning(settings.triplets_topic, 0)
    found = []
    while batch := consumer.poll(timeout_ms=50, max_records=500):
        found += [(m.key, m.value) for m in batch]
    consumer.close()
    return found


def _dead_letters(transport, settings: Settings) -> list[str]:
    consumer = transport.consumer(None)
    consumer.assign([(settings.dead_letter_topic, 0)])
    consumer.seek_to_beginning(settings.dead_letter_topic, 0)
    found = []
    while batch := consumer.poll(timeout_ms=50, max_records=500):
        found += [decode_dead_letter(m.value).reason for m in batch]
    consumer.close()
    return found


def test_the_join_emits_weighted_pairs_and_dead_letters_what_it_cannot_join() -> None:
    settings, transport, store = _settings(), EmbeddedTransport(), EmbeddedModelStore()
    events = _stream()
    _send(transport, settings, events)
    options = JoinOptions(min_propensity=0.3)
    join = _run(settings, transport, store, options)
    out = _output(transport, settings)
    assert [k for k, _ in out] == [f"click-join:{n}".encode() for n in range(len(out))]
    blocks = [decode_triplets(v, width=D) for _, v in out]
    # recompute what the join must have sent, session by session, from the estimator
    estimator = PropensityEstimator()
    expected_rows = []
    for kind, payload in events:
        if kind != "imp":
            continue
        imp = payload
        clicks = next(
            c for k, c in events if k == "click" and c[-1].impression_id == imp.impression_id
        )
        clicked = np.isin(imp.candidate_ids, [c.candidate_id for c in clicks if c.clicked])
        pairs = click_pairs(clicked, estimator.propensities(6), 0.3, options.losers)
        estimator.observe(imp.intervention, clicked)
        ids = imp.candidate_ids
        expected_rows += list(
            zip(ids[pairs.winner], ids[pairs.loser], pairs.weight.astype(np.float32), strict=True)
        )
    found_rows = [
        (w, lo, wt) for b in blocks for w, lo, wt in zip(b.p1_id, b.p2_id, b.weight, strict=True)
    ]
    assert found_rows == expected_rows and len(found_rows) > 20
    assert max(r[2] for r in found_rows) <= 1 / 0.3 + 1e-6
    assert (np.concatenate([b.seq for b in blocks]) == np.arange(len(found_rows))).all()
    assert all((b.rel1 == 1).all() and (b.rel2 == 0).all() for b in blocks)
    assert sorted(_dead_letters(transport, settings)) == [
        "late", "unknown_candidate", "unknown_impression",
    ]  # fmt: skip
    report = join.report()
    assert report["sessions"] == 40 and report["dead_letters"] == 3
    stored = store.load(PROPENSITIES_MODEL)
    np.testing.assert_array_equal(stored.arrays["propensity"], estimator.propensities(10))
    assert stored.meta["estimator"]["shuffled"][0] == 10  # every shuffle counted, and
    assert sum(stored.meta["estimator"]["impressions"][1:]) == 10  # every swap
    assert estimator.to_state() == stored.meta["estimator"]


def test_a_join_saved_with_an_empty_outbox_loads_again() -> None:
    """A checkpoint after impressions alone (no session closed: nothing to send) holds an
    empty outbox; a join restarted from it loads (it once failed on the empty split)."""
    settings, transport, store = _settings(), EmbeddedTransport(), EmbeddedModelStore()
    _send(transport, settings, [e for e in _stream(n=3) if e[0] == "imp"])
    _run(settings, transport, store, JoinOptions())
    saved = store.load("click-join")
    assert saved is not None and saved.meta["join"]["outbox_keys"] == []
    again = ClickJoin(settings, JoinOptions(), transport=transport, store=store)
    again.handler.load(again)
    assert again.handler.outbox == [] and again.handler.counters.impressions == 3


def _triplet_rows(messages: list[tuple[bytes, bytes]]) -> list[tuple]:
    """Every triplet of the output, in order: (seq, query id, winner id, loser id, weight)."""
    rows = []
    for _, value in messages:
        block = decode_triplets(value, width=D)
        rows += zip(block.seq.tolist(), block.query_id.tolist(), block.p1_id.tolist(),
                    block.p2_id.tolist(), block.weight.tolist(), strict=True)  # fmt: skip
    return rows


def test_the_sessions_one_input_closes_leave_in_messages_within_the_byte_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Twelve sessions in one impressions message, one click each, and a click past their
    window: whichever topic the join reads first, one input closes all twelve. One
    output message; a budget of three sessions' tables cuts them into four (a session's
    table never split), keyed in order, the same triplets in the same order."""
    shown = [_impression(i, float(i)) for i in range(12)] + [_impression(99, 50.0)]
    clicks = [Click(imp.impression_id, 100 * i + 1, time=i + 0.5) for i, imp in enumerate(shown)]
    clicks[-1] = Click(shown[-1].impression_id, 9901, time=WINDOW + 20.0)  # its window is open
    session_bytes = 6 * D * 4  # a session's phi table (float32)
    outputs = {}
    for budget in (click_join.OUTPUT_MESSAGE_BYTES, 3 * session_bytes):
        monkeypatch.setattr(click_join, "OUTPUT_MESSAGE_BYTES", budget)
        settings, transport, store = _settings(), EmbeddedTransport(), EmbeddedModelStore()
        producer = transport.producer()
        producer.send(settings.impressions_topic, encode_impressions(shown))
        producer.send(settings.clicks_topic, encode_clicks(clicks))
        producer.flush()
        join = _run(settings, transport, store, JoinOptions())
        outputs[budget] = _output(transport, settings)
        assert join.handler.counters.sent == len(outputs[budget])
    (whole,), cut = outputs.values()
    assert len(cut) == 4
    assert [k for k, _ in cut] == [f"click-join:{n}".encode() for n in range(4)]
    rows = _triplet_rows(cut)  # each click over the other five shown (the default pairs)
    assert _triplet_rows([whole]) == rows and len(rows) == 12 * 5
    for n, (_, value) in enumerate(cut):
        sessions = np.unique(decode_triplets(value, width=D).p1_id // 100)
        assert sessions.tolist() == [3 * n, 3 * n + 1, 3 * n + 2]


def test_a_quiet_stream_closes_its_open_sessions_after_a_window_and_a_grace() -> None:
    """Three sessions with clicks and no end row, and a click whose impression never
    comes: event time alone keeps them waiting for more traffic. Quiet for less than a
    window and a grace (the join's clock, set here), nothing leaves; past it, every
    session leaves with its pairs and the waiting click is dead-lettered as unknown."""
    settings, transport, store = _settings(), EmbeddedTransport(), EmbeddedModelStore()
    shown = [_impression(i, float(i)) for i in range(3)]
    clicks = [Click(imp.impression_id, 100 * i + 2, time=i + 0.5) for i, imp in enumerate(shown)]
    _send(transport, settings, [*(("imp", imp) for imp in shown), ("click", clicks),
                                ("click", [Click(f"{999:032x}", 5, time=2.0)])])  # fmt: skip
    join = ClickJoin(settings, JoinOptions(), transport=transport, store=store)
    handler = join.handler
    while handler.counters.impressions < 3 or handler.counters.clicks < 4:  # all input read
        join.step(timeout_ms=10)
    assert len(handler.window.sessions) == 3 and handler.window.waiting == 1
    now = handler._last_input
    handler.clock = lambda: now + WINDOW + GRACE - 1.0
    join.step(timeout_ms=10)
    assert len(handler.window.sessions) == 3 and _output(transport, settings) == []
    handler.clock = lambda: now + WINDOW + GRACE
    join.step(timeout_ms=10)
    join.close(final_checkpoint=True)
    assert handler.window.sessions == {} and handler.window.waiting == 0
    rows = _triplet_rows(_output(transport, settings))
    winners = [winner for _, _, winner, _, _ in rows]
    assert sorted(set(winners)) == [2, 102, 202]  # each session's click (rank 3) ...
    assert len(rows) == 3 * 5  # ... over the other five shown (the default pairs)
    assert _dead_letters(transport, settings) == ["unknown_impression"]
    assert handler.counters.sessions == 3


class _CrashError(Exception):
    pass


def test_a_crash_at_any_point_neither_loses_nor_repeats_output() -> None:
    """Crashes before a save, between the save and the sends (half sent) and after them:
    the triplets topic ends with exactly the uninterrupted run's messages, byte for byte."""
    events = _stream(n=100, seed=3)
    options = JoinOptions(checkpoint_records=7, checkpoint_seconds=None)
    reference_settings, reference_transport = _settings(), EmbeddedTransport()
    reference_store = EmbeddedModelStore()
    _send(reference_transport, reference_settings, events)
    _run(reference_settings, reference_transport, reference_store, options)
    reference = _output(reference_transport, reference_settings)
    assert len(reference) > 20

    settings, transport, store = _settings(), EmbeddedTransport(), EmbeddedModelStore()
    _send(transport, settings, events)
    send_outbox, save = ClickJoinHandler._send_outbox, ClickJoinHandler._save
    crashes, finished = 0, False
    while not finished:  # each run crashes at its 2nd save or send, alternately
        calls = {"send": 0, "save": 0}
        at_save = crashes % 2 == 1

        def crashing_send(self, runtime, calls=calls, at_save=at_save) -> None:
            calls["send"] += 1
            if calls["send"] == 2 and not at_save:
                for key, value in self.outbox[: len(self.outbox) // 2 + 1]:  # half sent
                    runtime.producer.send(settings.triplets_topic, value, key=key)
                runtime.producer.flush()
                raise _CrashError
            send_outbox(self, runtime)

        def crashing_save(self, *args, calls=calls, at_save=at_save) -> None:
            calls["save"] += 1
            if calls["save"] == 2 and at_save:
                raise _CrashError  # the state (and its outbox) never reached the store
            save(self, *args)

        join = ClickJoin(settings, options, transport=transport, store=store)
        join.handler._send_outbox = crashing_send.__get__(join.handler)  # type: ignore[method-assign]
        join.handler._save = crashing_save.__get__(join.handler)  # type: ignore[method-assign]
        try:
            _run(settings, transport, store, options, join)
            finished = True
        except _CrashError:
            crashes += 1
            join.close(final_checkpoint=False)  # a crash: no final save
    assert crashes >= 6  # three of each
    assert _output(transport, settings) == reference
    # PDGD, taught in the join (tests/test_impression_learners.py), learned each session once
    learned, expected = store.load("pdgd"), reference_store.load("pdgd")
    assert learned.meta["n_updates"] == expected.meta["n_updates"] > 0
    np.testing.assert_array_equal(learned.arrays["weights"], expected.arrays["weights"])


def test_join_options_are_checked() -> None:
    for bad in ({"losers": "all"}, {"min_propensity": 0.0}, {"depth": 1}, {"partitions": 0}):
        with pytest.raises(ValueError):
            JoinOptions(**bad)
    assert dataclasses.asdict(JoinOptions())["min_propensity"] == 0.1


def test_the_embedded_serve_runs_the_join_in_process() -> None:
    """`rankstream serve` without services: the join on a thread beside the online worker,
    on the process-wide embedded log and store, its triplets learned by the online models."""
    import time

    from rankstream.serve.embedded_workers import EmbeddedWorkers
    from rankstream.stream.connect import open_store, open_transport

    settings = _settings()
    learning = EmbeddedWorkers(settings)
    assert "click-join" in [r.handler.name for r in learning.runtimes]
    _send(open_transport(settings), settings, _stream(n=30, seed=4))
    learning.start()
    try:
        store, deadline = open_store(settings), time.monotonic() + 120  # a hang guard only
        while (joined := store.load("click-join")) is None or joined.meta["join"]["counters"][
            "sent"
        ] == 0:
            assert time.monotonic() < deadline, "the embedded join never sent its triplets"
            time.sleep(0.1)
    finally:
        learning.stop()
    assert joined.meta["join"]["counters"]["sessions"] == 30
    assert store.load(PROPENSITIES_MODEL) is not None


def _served(intervention: str, n: int = 20) -> list[tuple[dict, Impression]]:
    """`RANKSTREAM_INTERVENTION_SHARE` 1: n answers of serve to one request, each with the
    impression it logged."""
    import time

    from starlette.testclient import TestClient

    from rankstream.serve.app import create_app
    from rankstream.stream.click_schema import decode_impressions
    from rankstream.stream.embedded import embedded_transport, reset_embedded

    reset_embedded()
    settings = Settings(
        topic_prefix=f"{intervention}-{uuid.uuid4().hex[:8]}",
        intervention_share=1.0,
        intervention=intervention,
    )
    rng = np.random.default_rng(0)
    ids = np.arange(500, 512)
    phi = rng.standard_normal((12, settings.phi_dim)).astype(np.float32)
    with TestClient(create_app(settings, store=EmbeddedModelStore(), poll_seconds=0.05)) as client:
        body = {"candidate_ids": ids.tolist(), "phi": phi.tolist()}
        answers = [client.post("/v1/rank", json=body).json() for _ in range(n)]
        transport, topic = embedded_transport(), settings.impressions_topic
        deadline = time.monotonic() + 30  # the writer thread drains the queue: a hang guard
        consumer = transport.consumer(None)
        consumer.assign([(topic, 0)])
        consumer.seek_to_beginning(topic, 0)
        logged = {}
        while len(logged) < n:  # a message may hold several impressions
            assert time.monotonic() < deadline, f"{len(logged)} of {n} impressions written"
            for m in consumer.poll(timeout_ms=100, max_records=100):
                for imp in decode_impressions(m.value, width=settings.phi_dim).records:
                    logged[imp.impression_id] = imp
    for answer in answers:
        assert logged[answer["impression_id"]].candidate_ids.tolist() == answer["candidate_ids"]
    return [(answer, logged[answer["impression_id"]]) for answer in answers]


def test_serve_swaps_a_share_of_its_rankings_and_logs_the_intervention() -> None:
    """`RANKSTREAM_INTERVENTION` swap: every answer shows ranks 1 and some k swapped, and
    its impression names the swap, its probability and the order the engine was told to
    show."""
    ks = set()
    for answer, impression in _served("swap"):
        k = parse_swap(impression.intervention)
        assert k is not None and 2 <= k <= 10
        scores = np.array(answer["scores"])
        assert (np.diff(swap(scores, k)) <= 0).all()  # swapped back: the model's ranking
        assert scores[0] < scores[k - 1]  # as shown: rank k's result was rank 1's
        assert impression.shown_probability == pytest.approx(1 / 9)  # k uniform in 2..10
        ks.add(k)
    assert len(ks) > 3  # k is drawn, not fixed


def test_serve_shuffles_the_top_of_a_share_of_its_rankings_by_default() -> None:
    """`RANKSTREAM_INTERVENTION` shuffle (the default): every answer shows the model's top
    10 in some order and the rest as ranked; its impression names the shuffle and the
    probability of the order shown, 1/10!."""
    assert Settings().intervention == "shuffle"
    orders = set()
    for answer, impression in _served("shuffle"):
        assert impression.intervention == "shuffle:1-10"
        assert impression.shown_probability == pytest.approx(1 / 3_628_800)
        scores = np.array(answer["scores"])
        assert scores[:10].min() > scores[10:].max()  # the top 10 are the model's top 10
        assert (np.diff(scores[10:]) <= 0).all()  # ranks 11-12 as ranked
        orders.add(tuple(answer["candidate_ids"][:10]))
    assert len(orders) > 10  # drawn per answer, not fixed


def test_a_repeated_impression_id_is_dead_lettered_with_its_own_bytes() -> None:
    settings, transport, store = _settings(), EmbeddedTransport(), EmbeddedModelStore()
    events = _stream(n=4)
    events.insert(2, ("imp", _impression(0, 0.5)))  # impression 0's id again
    _send(transport, settings, events)
    _run(settings, transport, store, JoinOptions())
    consumer = transport.consumer(None)
    consumer.assign([(settings.dead_letter_topic, 0)])
    consumer.seek_to_beginning(settings.dead_letter_topic, 0)
    letters = [decode_dead_letter(m.value) for m in consumer.poll(timeout_ms=50, max_records=50)]
    (repeated,) = [d for d in letters if d.source_topic == settings.impressions_topic]
    assert repeated.reason == "bad_schema" and "seen before" in repeated.detail
    assert repeated.original == encode_impressions([_impression(0, 0.5)])
