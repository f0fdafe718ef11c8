"""Serve's impressions on the log's fast path (a `ServedImpression`, gathered only when
encoded) write exactly the bytes of the checked path
(`served_impression`, an `Impression`), with and without every optional field, alone or
many to a message; what the fast path is given wrong is still refused, and counted."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rankstream.producers import impression_producer as impression_log
from rankstream.producers.impression_producer import (
    ImpressionLog,
    served_impression,
)
from rankstream.stream.click_schema import (
    Impression,
    InvalidRecordError,
    ServedImpression,
    decode_impressions,
    encode_impressions,
)
from rankstream.stream.connect import open_transport
from rankstream.stream.embedded import reset_embedded
from rankstream.stream.message_groups import by_partition

WIDTH = 6
OPTIONAL = {
    "none": {},
    "query and request ids": {"query_id": -(2**63), "request_id": "req-7"},
    "randomized": {"shown_probability": 0.125, "intervention": "swap:1-4"},
    "interleaved": {"teams": "teams", "team_models": ("arow", "opar1")},
    "engine scores": {"engine_scores": "engine"},
    "all": {"query_id": 3, "request_id": "r", "shown_probability": 1.0, "intervention": "x",
            "teams": "teams", "team_models": ("arow",), "engine_scores": "engine"},
}  # fmt: skip


def trusted_impression(
    impression_id,
    candidate_ids,
    phi,
    order,
    model,
    version,
    model_versions,
    *,
    time,
    engine_scores=None,
    **optional,
) -> ServedImpression:
    """What serve offers its log for one ranking (`serve.app.rank`): the request's checked
    arrays and the order, as a `ServedImpression`."""
    return ServedImpression(
        impression_id,
        time,
        model,
        version,
        model_versions,
        candidate_ids,
        phi,
        order,
        request_engine_scores=engine_scores,
        **optional,
    )


def _ranking(seed: int, k: int = 9, shown: int | None = None, **optional) -> dict:
    """The arguments serve passes for one ranking: the request's (checked) arrays and the
    displayed order, `shown` of the `k` candidates (all by default)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(k)[: shown or k]
    fields = {**optional}
    if fields.get("teams") == "teams":
        teams = rng.integers(-1, len(fields["team_models"]), len(order))
        fields["teams"] = teams.astype(np.int8)
    if fields.get("engine_scores") == "engine":
        fields["engine_scores"] = rng.standard_normal(k)
    return dict(
        impression_id=f"{seed:032x}",
        candidate_ids=rng.choice(10**12, k, replace=False).astype(np.int64),
        phi=rng.standard_normal((k, WIDTH)).astype(np.float32),
        order=order,
        model="arow",
        version=3 + seed % 2,  # two model versions in one message: the versions column differs
        model_versions={"arow": 3 + seed % 2, "opar1": 1},
        time=1_700_000_000.5 + seed,
        **fields,
    )


def _both(ranking: dict) -> tuple[ServedImpression, Impression]:
    return trusted_impression(**ranking), served_impression(**ranking)


def _standard_stream(message: bytes) -> bytes:
    """The message's table written again by pyarrow's own stream writer."""
    table = pa.ipc.open_stream(message).read_all()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("optional", OPTIONAL.values(), ids=OPTIONAL.keys())
@pytest.mark.parametrize("count", [1, 5])
def test_served_impressions_encode_to_the_checked_paths_bytes(optional, count):
    rankings = [_ranking(seed, shown=None if seed % 2 else 5, **optional) for seed in range(count)]
    served, checked = zip(*(_both(r) for r in rankings), strict=True)
    message = encode_impressions(list(served))
    assert message == encode_impressions(list(checked))
    assert message == encode_impressions([imp.impression() for imp in served])
    assert message == _standard_stream(message)
    decoded = decode_impressions(message, width=WIDTH)
    assert decoded.rejects == [] and len(decoded.records) == count
    for got, ranking in zip(decoded.records, rankings, strict=True):
        order = ranking["order"]
        assert got.candidate_ids.tolist() == ranking["candidate_ids"][order].tolist()
        assert np.array_equal(got.phi, ranking["phi"][order])


def test_a_message_of_both_kinds_and_mixed_optional_fields_is_the_checked_paths():
    rankings = [_ranking(seed, **optional) for seed, optional in enumerate(OPTIONAL.values())]
    mixed = [trusted_impression(**r) if i % 2 else served_impression(**r)
             for i, r in enumerate(rankings)]  # fmt: skip
    assert encode_impressions(mixed) == encode_impressions(
        [served_impression(**r) for r in rankings]
    )


def test_a_reused_gathering_buffer_never_leaks_into_a_message():
    """Messages gathered one after another (larger, then smaller, then the first again)
    each hold their own rows only."""
    big = [trusted_impression(**_ranking(seed, k=40)) for seed in range(6)]
    small = [trusted_impression(**_ranking(seed + 10, k=3)) for seed in range(2)]
    first = encode_impressions(big)
    assert encode_impressions(small) == encode_impressions([imp.impression() for imp in small])
    assert encode_impressions(big) == first == encode_impressions([i.impression() for i in big])


def test_a_message_budget_counts_a_served_impression_as_its_checked_one():
    served, checked = _both(_ranking(0, k=9, shown=7))
    assert impression_log._impression_bytes(served) == impression_log._impression_bytes(checked)
    assert (
        impression_log._impression_bytes(checked)
        == checked.phi.nbytes + checked.candidate_ids.nbytes
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"impression_id": "not visible ascii"}, "impression_id"),
        ({"time": float("nan")}, "time"),
        ({"model": ""}, "model"),
        ({"model_versions": {"arow": -1}}, "model_versions"),
        ({"order": np.array([], np.int64)}, "candidate_ids"),
        ({"request_id": "a b"}, "request_id"),
        ({"shown_probability": 0.0}, "shown_probability"),
        ({"teams": np.array([0, 1]), "team_models": ("arow",)}, "teams"),
    ],
)
def test_what_serve_did_not_check_is_refused_on_the_fast_path_as_on_the_checked(change, field):
    ranking = {**_ranking(1), **change}
    for make in (trusted_impression, served_impression):
        with pytest.raises(InvalidRecordError) as refused:
            make(**ranking)
        assert refused.value.field == field


@pytest.mark.parametrize("order", [[0, 9], [-1, 0], [[0, 1]], [0.0, 1.0]])
def test_an_order_outside_the_candidates_is_refused_on_the_fast_path(order):
    """The gather trusts `order`'s bounds (`clip` never clips): they are checked."""
    with pytest.raises(InvalidRecordError) as refused:
        trusted_impression(**{**_ranking(1), "order": np.array(order)})
    assert refused.value.field == "candidate_ids"


def test_the_log_counts_a_refused_fast_path_impression_as_invalid(embedded_settings):
    reset_embedded()
    log = ImpressionLog(embedded_settings, capacity=4)
    bad = {**_ranking(2), "impression_id": "bad id"}
    assert log.offer(lambda: trusted_impression(**bad))
    assert log.offer(lambda: trusted_impression(**_ranking(3)))
    counts = log.close(10.0)
    assert counts["written"] == 1 and counts["dropped"]["invalid"] == 1
    assert sum(counts["dropped"].values()) == 1


def test_a_one_partition_topic_takes_every_key_where_the_transports_rule_sends_it(
    embedded_settings,
):
    reset_embedded()
    transport = open_transport(embedded_settings)
    transport.ensure_topics({"one": 1, "four": 4})
    keys = [f"{i:032x}".encode() for i in range(20)]
    assert by_partition(transport, "one", keys, lambda key: key) == {0: keys}
    assert {transport.partition_for("one", key) for key in keys} == {0}
    four = by_partition(transport, "four", keys, lambda key: key)
    assert sorted(key for group in four.values() for key in group) == sorted(keys)
    assert all(transport.partition_for("four", k) == p for p, g in four.items() for k in g)
