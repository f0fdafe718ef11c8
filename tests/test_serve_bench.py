"""`bench serve`'s options and the ratios it reports (`harness.serve_bench`); the bench
itself runs on real services (docs/results/pipeline.md)."""

from __future__ import annotations

import pytest

from rankstream.harness.bench_options import ServeBenchOptions
from rankstream.harness.serve_bench import _cost, _quartiles, _share_label, _summary


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
