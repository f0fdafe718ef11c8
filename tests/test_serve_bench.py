"""`bench serve`'s options and the ratios it reports (`harness.serve_bench`); the bench
itself runs on real services (docs/results/pipeline.md), once here with tiny options."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from rankstream.harness import serve_bench
from rankstream.harness.bench_options import ServeBenchOptions
from rankstream.harness.floor_app import Floor
from rankstream.harness.serve_bench import (
    _baseline_install,
    _cost,
    _quartiles,
    _share_label,
    _share_measured,
    _summary,
    _to_floor,
    run_serve_bench,
)
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM
from rankstream.stream.settings import Settings


def _run(p50: float, p99: float, cpu: float | None = None) -> dict:
    return {"latency_ms": {"p50": p50, "p99": p99}, "achieved_rate": 100.0, "errors": 0,
            "cpu_us_per_request": cpu}  # fmt: skip


def test_the_cost_pairs_each_round_with_the_same_rounds_reference() -> None:
    interleaved = _summary([_run(1.0, 4.0), _run(1.0, 3.0), _run(2.0, 12.0)], [90.0, 80.0, 70.0])
    reference = _summary([_run(1.0, 2.0), _run(1.0, 3.0), _run(1.0, 4.0)], [100.0, 100.0, 100.0])
    cost = _cost(interleaved, reference)
    assert cost["p99_ratio_paired"] == [2.0, 1.0, 3.0]  # round by round, in order
    assert cost["p99_ratio_paired_median"] == 2.0
    assert cost["p99_ratio_paired_quartiles"] == [1.5, 2.5]
    assert cost["p99_ratio"] == round(4.0 / 3.0, 3)  # of the medians: not the paired figure
    assert cost["sustained_ratio_paired"] == [0.9, 0.8, 0.7]
    assert cost["sustained_ratio"] == 0.8
    assert cost["cpu_ratio_paired"] == [] and cost["cpu_ratio_paired_median"] is None


def test_cpu_per_answer_is_paired_round_by_round_where_both_were_read() -> None:
    interleaved = _summary([_run(1, 2, 300.0), _run(1, 2, None), _run(1, 2, 500.0)], [1] * 3)
    reference = _summary([_run(1, 2, 200.0), _run(1, 2, 250.0), _run(1, 2, 250.0)], [1] * 3)
    assert interleaved["cpu_us_per_request"] == 400.0  # the median of the runs read
    cost = _cost(interleaved, reference)
    assert cost["cpu_ratio_paired"] == [1.5, 2.0]
    assert cost["cpu_ratio_paired_median"] == 1.75


def test_rounds_without_a_sustained_rate_are_left_out_of_the_pairs() -> None:
    one = _summary([_run(1.0, 2.0), _run(1.0, 2.0)], [None, 50.0])
    other = _summary([_run(1.0, 1.0), _run(1.0, 1.0)], [100.0, 100.0])
    cost = _cost(one, other)
    assert one["sustained_rps"] is None and cost["sustained_ratio"] is None
    assert cost["sustained_ratio_paired"] == [0.5]
    assert _quartiles([]) is None


def test_the_interleaving_shares_are_checked_and_named() -> None:
    assert ServeBenchOptions().interleaving_share == (0.2, 1.0)
    for bad in ((0.0,), (1.5,), (0.2, 0.2)):
        with pytest.raises(ValueError, match="interleaving_share"):
            ServeBenchOptions(interleaving_share=bad)
    assert _share_label(0.2) == "interleaved 0.2" and _share_label(1.0) == "interleaved 1"


def test_several_processes_are_compared_only_when_asked_and_only_as_several() -> None:
    assert ServeBenchOptions().compare_processes == 0  # none: every server one process
    assert ServeBenchOptions(compare_processes=2).compare_processes == 2
    for bad in (1, -1, 1025):
        with pytest.raises(ValueError, match="compare_processes"):
            ServeBenchOptions(compare_processes=bad)


def test_each_serve_is_reported_against_each_floor_of_the_same_rounds() -> None:
    serve = _summary([_run(1, 4, 600.0), _run(1, 6, 900.0)], [100.0, 50.0])
    starlette = _summary([_run(1, 2, 300.0), _run(1, 2, 300.0)], [400.0, 400.0])
    asgi = _summary([_run(1, 1, 200.0), _run(1, 3, 300.0)], [500.0, 500.0])
    ratios = _to_floor({"on": serve, "floor": starlette, "floor asgi": asgi})
    assert set(ratios) == {"on"} and set(ratios["on"]) == {"starlette", "asgi"}
    assert ratios["on"]["starlette"]["cpu_ratio_paired"] == [2.0, 3.0]
    assert ratios["on"]["asgi"]["cpu_ratio_paired"] == [3.0, 3.0]
    assert ratios["on"]["asgi"]["sustained_ratio_paired"] == [0.2, 0.1]


def test_the_floor_parses_both_formats_and_answers_a_fixed_ranking_of_their_size() -> None:
    ids = np.array([7, 3, 5], dtype=np.int64)
    phi = np.arange(3 * PHI_DIM, dtype=np.float32).reshape(3, PHI_DIM)
    rows = pa.FixedSizeListArray.from_arrays(pa.array(phi.reshape(-1)), PHI_DIM)
    table = pa.table({"candidate_ids": ids, "phi": rows})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    arrow = sink.getvalue().to_pybytes()
    body = json.dumps({"candidate_ids": ids.tolist(), "phi": phi.tolist()}).encode()
    floor = Floor()
    assert Floor._arrow_arrays(arrow)[1].tolist() == Floor._json_arrays(body)[1].tolist()
    first, kind = floor.answer(body, arrow_in=False, arrow_out=False)
    assert kind == "application/json" and json.loads(first)["candidate_ids"] == [7, 3, 5]
    other = json.dumps({"candidate_ids": [1, 2, 9], "phi": phi.tolist()}).encode()
    assert floor.answer(other, arrow_in=False, arrow_out=False)[0] == first  # fixed
    answer, kind = floor.answer(arrow, arrow_in=True, arrow_out=True)
    assert pa.ipc.open_stream(answer).read_all().column("scores").to_pylist() == [0.0] * 3
    assert floor.answered == 3
    with pytest.raises(ValueError, match="one row of phi per candidate"):
        floor.answer(json.dumps({"candidate_ids": [1], "phi": phi.tolist()}).encode(),
                     arrow_in=False, arrow_out=False)  # fmt: skip


def test_the_share_measured_comes_with_its_exact_interval() -> None:
    measured = _share_measured(
        0.2, {"ranked": 10, "interleaved": 1}, {"ranked": 110, "interleaved": 21}
    )
    assert measured["share_measured"] == 0.2  # 20 of the 100 answers between the two reads
    low, high = measured["share_interval_99"]
    assert 0.1 < low < 0.2 < high < 0.33  # Clopper-Pearson: [0.108, 0.321]
    none = _share_measured(0.2, {"ranked": 0, "interleaved": 0}, {"ranked": 100, "interleaved": 0})
    assert none["share_measured"] == 0.0 and none["share_interval_99"][1] < 0.2  # not the share
    unread = _share_measured(0.2, {"ranked": 5, "interleaved": 0}, {"ranked": 5, "interleaved": 0})
    assert unread == {"share_measured": None, "share_interval_99": None}  # nothing answered


def test_a_baseline_must_be_another_install_s_python(tmp_path: Path) -> None:
    assert ServeBenchOptions().baseline_python is None  # none unless asked
    with pytest.raises(ValueError, match="baseline_python"):
        ServeBenchOptions(baseline_python=str(tmp_path / "no-python"))
    with pytest.raises(ValueError, match="this very install"):
        _baseline_install(sys.executable, Settings())


def test_the_bench_s_interleaving_servers_interleave(
    service_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Serve interleaves only once it heard clicks; the bench posts one to each logging
    server first, so its interleaving server measures a share > 0 (0.5: with the tens of
    answers a round gives at least, none interleaved would be a chance under 1e-9). No
    package installed from a test: without wrk the sustained rate is not measured."""
    monkeypatch.setattr(serve_bench, "ensure_wrk", lambda directory: None)
    lines: list[str] = []
    options = ServeBenchOptions(arrow_rate=40, json_rate=30, seconds=1, repeats=1,
                                interleaving_share=(0.5,), compare_processes=2)  # fmt: skip
    result = run_serve_bench(service_settings, options, progress=lines.append)
    for kind in ("arrow", "json"):
        (interleaved,) = result[kind]["interleaving"]
        assert interleaved["share_measured"] > 0, lines
        assert result[kind]["interleaved_answers"] == 0  # the reference: share 0
        at_80 = result[kind]["at_80_percent"]
        assert (at_80["rate"] is None) == (result[kind]["sustained_rps"] is None)
        several = result[kind]["processes"]  # the same work as the share's server
        assert several["share"] == 0.5 and several["share_measured"] > 0, lines
    assert "baseline" not in result
    (found,) = [line for line in lines if line.startswith("the local Kafka broker's CPU")]
    pids = [int(pid) for pid in found.partition("pids [")[2].rstrip(")]").split(", ")]
    assert pids and all(b"kafka" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in pids)
