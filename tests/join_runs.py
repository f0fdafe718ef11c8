"""Tests' helper: run a click join until it has read every impression and click message
already in its input topics (the join's own offsets say when)."""

from __future__ import annotations

from rankstream.stream.settings import Settings
from rankstream.workers.click_join import ClickJoin


def run_to_end(join: ClickJoin, settings: Settings) -> ClickJoin:
    transport = join.transport
    ends = {t: transport.end_offsets(t) for t in (settings.impressions_topic,
                                                  settings.clicks_topic)}  # fmt: skip

    def done(runtime) -> bool:
        offsets = runtime.handler.offsets
        return all(offsets.get(t, {}).get(p) == e for t, pe in ends.items() for p, e in pe.items())

    assert join.run(until=done) == 0
    return join
