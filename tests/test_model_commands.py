"""`rankstream model list|pin|unpin|history` on the embedded store, in-process, with --json."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankstream.cli import main
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.selection.what_serves import ServingModel
from rankstream.stream.embedded_store import embedded_store

SCALER = Standardizer().fit(np.random.default_rng(0).random((100, 36)))


@pytest.fixture
def store(monkeypatch, embedded_settings):
    for name in ("RANKSTREAM_REDIS_URL", "RANKSTREAM_KAFKA_BOOTSTRAP"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANKSTREAM_TOPIC_PREFIX", embedded_settings.topic_prefix)
    store = embedded_store(embedded_settings.topic_prefix)
    for version in (1, 2, 3):
        meta, arrays = OnlineRanker(
            "arow", scaler=SCALER, warm_start=np.full(36, float(version))
        ).to_state()
        meta.update(triplets_seen=100 * version, writer="test")
        store.save("arow", kind="online", meta=meta, arrays=arrays, offsets={},
                   expected_version=version - 1)  # fmt: skip
    meta, arrays = OnlineRanker("opr", scaler=SCALER, warm_start=np.ones(36)).to_state()
    store.save("uni_con", kind="online", meta=meta, arrays=arrays, offsets={}, expected_version=0)
    evaluator = {"champion": "arow", "rolling_ndcg": {"arow": 0.93, "uni_con": 0.78},
                 "counts": {"arow": 40, "uni_con": 40}, "window": 200}  # fmt: skip
    store.save("evaluator", kind="scores", meta=evaluator, arrays={}, offsets={},
               expected_version=0)  # fmt: skip
    return store


def _run(capsys, *argv: str) -> tuple[int, dict, str]:
    code = main(["model", *argv, "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


def test_list_shows_versions_kinds_scores_and_the_champion(
    store, capsys, caplog, monkeypatch
) -> None:
    from rankstream.stream import connect

    monkeypatch.setattr(connect, "_NOTICED", set())  # the notice is said once per process
    with caplog.at_level("WARNING", logger="rankstream.stream"):
        code, listing, _ = _run(capsys, "list")
    assert code == 0 and "embedded model store" in caplog.text
    entries = {m["name"]: m for m in listing["models"]}
    assert listing["champion"] == "arow" and set(entries) == {"arow", "uni_con"}  # no records
    arow = entries["arow"]
    assert (arow["kind"], arow["version"], arow["served_version"], arow["pinned"]) == (
        "online",
        3,
        3,
        False,
    )
    assert arow["triplets_seen"] == 300 and arow["rolling_ndcg_at_50"] == 0.93
    assert "evaluator" not in entries, "the evaluator's record is no model"


def test_pin_unpin_and_history(store, capsys) -> None:
    code, pinned, _ = _run(capsys, "pin", "arow", "2")
    assert code == 0 and pinned == {"model": "arow", "pinned_version": 2, "kind": "online"}
    served = ServingModel(store).refresh()  # the simulator's serving honours the pin
    assert (served.name, served.version, served.model_versions["arow"]) == ("arow", 2, 3)
    _, listing, _ = _run(capsys, "list")
    arow = {m["name"]: m for m in listing["models"]}["arow"]
    assert arow["pinned"] and arow["served_version"] == 2 and arow["version"] == 3
    assert "pin.arow" not in {m["name"] for m in listing["models"]}

    code, unpinned, _ = _run(capsys, "unpin", "arow")
    assert code == 0 and unpinned == {"model": "arow", "was_pinned_version": 2}
    assert ServingModel(store).refresh().version == 3
    code, again, _ = _run(capsys, "unpin", "arow")
    assert code == 0 and again["was_pinned_version"] is None

    code, history, _ = _run(capsys, "history", "arow")
    assert code == 0 and [v["version"] for v in history["versions"]] == [1, 2, 3]
    assert [v["triplets_seen"] for v in history["versions"]] == [100, 200, 300]
    assert [(e["pinned"], e["version"]) for e in history["pins"]] == [(True, 2), (False, None)]


def test_pinning_a_version_the_store_lacks_fails_clearly(store, capsys) -> None:
    code, _, err = _run(capsys, "pin", "arow", "9")
    assert code == 1 and "no stored version 9" in err and "kept: 1..3" in err
    code, _, err = _run(capsys, "history", "nothing")
    assert code == 1 and "no stored model nothing" in err


@pytest.mark.parametrize("argv", [("pin", "arow", "2"), ("unpin", "arow")])
def test_a_pin_change_that_loses_the_race_says_retry(store, capsys, monkeypatch, argv) -> None:
    from rankstream.selection import pins
    from rankstream.stream.store import FencingError

    race = FencingError("arow.pins", expected=0, actual=1)

    def lost(*_args, **_kwargs):
        raise race

    monkeypatch.setattr(pins, argv[0], lost)
    code, _, err = _run(capsys, *argv)
    verb = "pinned" if argv[0] == "pin" else "unpinned"
    assert code == 1
    assert err.strip().endswith(f"not {verb}: another pin or unpin landed first ({race}); retry")


def test_list_shows_the_interleaving_race_in_json_and_in_the_table(
    store, capsys, monkeypatch
) -> None:
    from rankstream.selection.click_race import (
        INTERLEAVING_KIND,
        INTERLEAVING_RECORD,
        InterleavingRace,
    )
    from rankstream.selection.judged_race import ChampionPolicy

    race = InterleavingRace(ChampionPolicy(), incumbent="uni_con")
    race.observe("arow", [1, 1, 0, -1, 0, 0])
    # what the click join publishes (`workers.click_join`)
    store.save(INTERLEAVING_RECORD, kind=INTERLEAVING_KIND,
               meta={"interleaving": race.summary()}, arrays={}, offsets={},
               expected_version=0)  # fmt: skip
    code, listing, _ = _run(capsys, "list")
    arow = {m["name"]: m for m in listing["models"]}["arow"]["interleaving"]
    assert code == 0 and (arow["wins"], arow["losses"], arow["ties"]) == (2, 1, 3)
    monkeypatch.setenv("COLUMNS", "400")  # rich wraps cells to the terminal's width
    assert main(["model", "list"]) == 0
    table = capsys.readouterr().out
    assert "2/1/3" in table and "undecided" in table
