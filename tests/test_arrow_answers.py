"""Arrow ranking answers from cached templates are the bytes pyarrow writes, for every
size and metadata shape, first use and after."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rankstream.serve import arrow_answers
from rankstream.serve.arrow_answers import pyarrow_ranking, ranking_arrow


def _answer(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str, int, dict]:
    k = int(rng.integers(1, 400))
    ids = rng.integers(-(2**63), 2**63 - 1, k, dtype=np.int64)
    scores = rng.normal(size=k) * 10.0 ** rng.integers(-300, 300)
    extra: dict[str, object] = {"impression_id": f"{int(rng.integers(0, 2**63)):032x}"}
    if rng.random() < 0.5:
        extra["query_id"] = int(rng.integers(-(2**63), 2**63 - 1))
    if rng.random() < 0.5:
        length = int(rng.integers(1, 201))
        extra["request_id"] = "".join(map(chr, rng.integers(33, 127, length)))
    model = str(rng.choice(["arow", "uni_con", "engine", "ünïcode", "m" * 60]))
    version = int(rng.integers(0, 10 ** int(rng.integers(1, 18))))
    return ids, scores, model, version, extra


@pytest.mark.parametrize("seed", range(4))
def test_answers_are_the_bytes_pyarrow_writes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(150):
        ids, scores, model, version, extra = _answer(rng)
        metadata = {"model": model, "version": str(version)} | {
            name: str(value) for name, value in extra.items()
        }
        expected = pyarrow_ranking(ids, scores, metadata)
        assert ranking_arrow(ids, scores, model, version, extra) == expected  # first use
        assert ranking_arrow(ids, scores, model, version, extra) == expected  # templated


def test_templates_are_learned_and_used() -> None:
    rng = np.random.default_rng(7)
    ids, scores, model, version, extra = _answer(rng)
    ranking_arrow(ids, scores, model, version, extra)
    assert arrow_answers._batch_headers[len(ids)] is not None
    assert any(template is not None for template in arrow_answers._schema_templates.values())


def test_an_answer_reads_back_as_the_ranking() -> None:
    ids, scores = np.array([5, -3, 2**62]), np.array([2.5, -1.0, 1e-300])
    extra = {"impression_id": "ab" * 16, "request_id": "r-1"}
    for _ in range(2):
        table = pa.ipc.open_stream(ranking_arrow(ids, scores, "arow", 3, extra)).read_all()
        assert table.column("candidate_ids").to_pylist() == ids.tolist()
        assert table.column("scores").to_pylist() == scores.tolist()
        assert table.schema.metadata == {
            b"model": b"arow", b"version": b"3", b"impression_id": b"ab" * 16,
            b"request_id": b"r-1",
        }  # fmt: skip


def test_a_template_that_does_not_reproduce_pyarrow_is_not_used(monkeypatch) -> None:
    """Were pyarrow to lay metadata out otherwise, the check on first use refuses the
    template and pyarrow writes each such answer itself."""
    monkeypatch.setattr(arrow_answers, "_schema_templates", {})
    real = arrow_answers._schema_template

    def shifted(shape):  # a template whose offsets are wrong
        message, offsets = real(shape)
        return message, tuple(offset + 1 for offset in offsets)

    monkeypatch.setattr(arrow_answers, "_schema_template", shifted)
    ids, scores = np.arange(4), np.linspace(0.0, 1.0, 4)
    extra = {"impression_id": "c" * 32}
    expected = pyarrow_ranking(ids, scores, {"model": "x", "version": "1", **extra})
    for _ in range(3):
        assert ranking_arrow(ids, scores, "x", 1, extra) == expected
    assert list(arrow_answers._schema_templates.values()) == [None]
