"""`rankstream bench scaleout`: per-partition accounting; JSON shape on the real services."""

from __future__ import annotations

import json

import pytest

from rankstream.cli import main
from rankstream.harness.scaleout_bench import lost_and_duplicated, worker_command
from rankstream.stream.settings import Settings


def test_lost_and_duplicated_take_the_worst_algorithm_per_partition() -> None:
    shares = [100, 50]
    seen = {"opr": [100, 50], "opar1": [90, 55], "ogdr": [100, 40]}
    # opar1: 10 short on p0 and 5 extra on p1 (a sum alone would hide both); ogdr: 10 short
    assert lost_and_duplicated(seen, shares) == (10, 5)


def test_workers_run_per_partition_in_one_group() -> None:
    command = worker_command("g")
    assert command[command.index("--group") + 1] == "g"
    assert "--per-partition" in command and "--exit-when-idle" in command
    assert command[command.index("--algo") + 1] == "opr,opar1,opar2,ogdr"


@pytest.mark.parametrize("argv", [["--workers", "1,x"], ["--workers", "0"], ["--repeats", "0"]])
def test_bad_options_exit_2_before_touching_services(argv: list[str]) -> None:
    assert main(["bench", "scaleout", *argv]) == 2


def test_json_report_on_real_services(
    service_settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RANKSTREAM_KAFKA_BOOTSTRAP", service_settings.kafka_bootstrap or "")
    monkeypatch.setenv("RANKSTREAM_REDIS_URL", service_settings.redis_url or "")
    monkeypatch.setenv("RANKSTREAM_TOPIC_PREFIX", service_settings.topic_prefix)
    monkeypatch.delenv("RANKSTREAM_METRICS_PORT", raising=False)
    code = main(
        [
            "bench",
            "scaleout",
            "--triplets",
            "9000",
            "--workers",
            "1,2",
            "--partitions",
            "2",
            "--repeats",
            "1",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)  # exactly one JSON object on stdout
    assert code == 0
    assert (report["triplets"], report["partitions"]) == (9000, 2)
    assert sorted(report["results"]) == ["1", "2"]
    for row in report["results"].values():
        assert set(row) == {"seconds", "triplets_per_s", "lost", "duplicated"}
        assert (row["lost"], row["duplicated"]) == (0, 0)
        assert row["seconds"] > 0
        assert row["triplets_per_s"] == pytest.approx(9000 / row["seconds"], rel=1e-2)


def test_refuses_the_embedded_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RANKSTREAM_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.setenv("RANKSTREAM_REDIS_URL", "redis://127.0.0.1:1/0")
    assert main(["bench", "scaleout", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "RANKSTREAM_KAFKA_BOOTSTRAP" in captured.err
