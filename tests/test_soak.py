"""The soak harness: its verdicts on synthetic samples, and a 20-second run on real services.

The real 10-minute soak is `make soak`; this only proves the same code runs end to end.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from rankstream.harness.soak import PROCESSES, Sample, SoakOptions, judge, rss_mib, run_soak

OPTIONS = SoakOptions(
    seconds=100,
    warmup_seconds=10,
    rss_growth_mib=50,
    lag_bound_records=1000,
    drained_lag_records=10,
)


def _samples(rss_slope: float, lag: float = 0.0) -> list[Sample]:
    return [
        Sample(
            t=t,
            produced=100.0 * t,
            consumed=100.0 * t,
            evaluated=t,
            lag=lag,
            rss_mib=dict.fromkeys(PROCESSES, 200.0 + rss_slope * t),
        )
        for t in range(0, 101, 5)
    ]


def test_flat_memory_and_small_lag_pass() -> None:
    result = judge(_samples(0.0), OPTIONS, drained_lag=0.0, run_seconds=100)
    assert result.ok and result.rates["consumed"] == pytest.approx(100.0)
    assert result.rss["online"]["growth"] == 0.0


def test_growing_memory_fails() -> None:
    result = judge(_samples(1.0), OPTIONS, drained_lag=0.0, run_seconds=100)  # ~70 MiB over
    assert not result.verdicts["rss_bounded"] and not result.ok


def test_lag_over_the_bound_or_not_drained_fails() -> None:
    assert not judge(_samples(0.0, lag=5000), OPTIONS, 0.0, 100).verdicts["lag_bounded"]
    assert not judge(_samples(0.0), OPTIONS, drained_lag=500.0, run_seconds=100).ok
    assert not judge(_samples(0.0), OPTIONS, drained_lag=None, run_seconds=100).ok


def test_too_few_samples_fail() -> None:
    assert not judge(_samples(0.0)[:3], OPTIONS, 0.0, 100).ok


def test_rss_of_this_process_is_plausible() -> None:
    import os

    assert 10.0 < rss_mib(os.getpid()) < 8192.0


def test_short_soak_on_real_services(service_settings, tmp_path) -> None:
    options = SoakOptions(
        seconds=20,
        rate=500,
        images=5000,
        sample_seconds=2,
        warmup_seconds=6,
        rss_growth_mib=256,
        lag_bound_records=20_000,
        drained_lag_records=1000,
        drain_seconds=30,
    )
    result = run_soak(replace(service_settings), options, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (tmp_path / "soak.png").stat().st_size > 10_000
    assert summary["ok"] == result.ok and len(summary["sample_series"]) == len(result.samples)
    assert result.ok, summary
    assert result.rates["consumed"] > 0 and result.rates["produced"] > 0
