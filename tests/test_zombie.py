"""A zombie worker (SIGSTOPped, replaced, SIGCONTed) cannot overwrite a newer model."""

from __future__ import annotations

import pytest

from rankstream.harness.chaos import ChaosPlan, run_chaos
from rankstream.stream.settings import Settings
from rankstream.workers.runtime import EXIT_FENCED


@pytest.mark.timeout(300)
def test_a_woken_zombie_is_fenced_and_the_result_stays_exact(service_settings: Settings) -> None:
    result = run_chaos(
        service_settings, ChaosPlan(triplets=60_000, kills=0, counts={"zombie": 1}, seed=5)
    )
    assert result.events == {"zombie": 1} and result.events_missed == 0
    # The zombie's late save was refused (exit 3) and no stored model carries its pid.
    assert result.zombies_fenced == 1
    assert result.exits.get(str(EXIT_FENCED)) == 1
    assert (result.lost, result.duplicated) == (0, 0)
    assert result.identical, result.models
