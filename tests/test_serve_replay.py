"""Answers do not change: the recorded /v1/rank requests (tests/serve_replay.py), sent to
this commit's serve, get the recorded answers byte for byte (status, headers, body) and
log the recorded impressions, apart from the impression ids, which are new by design.

The fixture (tests/data/serve_replay.json) was recorded at the commit before the serving
path was reworked for speed; a change meant to alter answers records it anew."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from serve_replay import record

from rankstream.serve.bodies import _rows_of_floats

FIXTURE = Path(__file__).parent / "data" / "serve_replay.json"


@pytest.fixture(scope="module")
def replayed() -> tuple[dict, dict]:
    recorded = json.loads(FIXTURE.read_text())
    return recorded, json.loads(json.dumps(record(), default=str))


def test_the_same_requests_are_sent(replayed) -> None:
    recorded, now = replayed
    assert [a["request"] for a in now["answers"]] == [a["request"] for a in recorded["answers"]]


def test_every_answer_is_the_recorded_one_byte_for_byte(replayed) -> None:
    recorded, now = replayed
    assert len(now["answers"]) == len(recorded["answers"]) > 40
    statuses = {a["status"] for a in recorded["answers"]}
    assert {200, 400, 404, 415, 422} <= statuses  # valid and refused requests alike
    for then, answer in zip(recorded["answers"], now["answers"], strict=True):
        request_id = then["request"]["headers"]["x-request-id"]
        assert answer["status"] == then["status"], request_id
        assert answer["headers"] == then["headers"], request_id
        assert answer["body"] == then["body"], request_id


def test_every_ranking_logs_the_recorded_impression(replayed) -> None:
    recorded, now = replayed
    ranked = sum(a["status"] == 200 for a in recorded["answers"])
    assert len(recorded["impressions"]) == ranked
    assert now["impressions"] == recorded["impressions"]


@pytest.mark.parametrize(
    "rows",
    [
        [[0.1, 2, -3e-7], [1e308, 5, 0.0]],
        [[1, 2], [3, 4]],
        [[2**70, 1.5]],  # an int beyond int64: converted as np.asarray converts it
        [[1.0, 2.0], [3.0]],  # ragged: np.asarray's error
        [[[1.0]], [[2.0]]],  # nested deeper
        [],
        [[]],
        [[10**400, 1.0]],  # beyond float64: OverflowError, as np.asarray raises it
    ],
)
def test_json_rows_read_flat_are_the_values_np_asarray_gives(rows) -> None:
    try:
        expected = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        with pytest.raises(type(exc)):
            _rows_of_floats(rows)
        return
    got = _rows_of_floats(rows)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()
