"""`rankstream worker click-join`: join impressions and clicks into weighted triplets.

Its options are `workers.click_join_options.JoinOptions`' fields; the window and the grace
are the deployment settings `RANKSTREAM_CLICK_WINDOW_SECONDS` and
`RANKSTREAM_CLICK_GRACE_SECONDS`.
"""

from __future__ import annotations

from rankstream.commands._launch import Launch, long_running
from rankstream.workers.click_join_options import COMMAND, JoinOptions


def start(launch: Launch):  # type: ignore[no-untyped-def]
    from rankstream.workers.click_join import ClickJoin

    return ClickJoin(launch.settings, launch.options)


add_arguments, run = long_running(
    COMMAND,
    JoinOptions,
    start,
    "at exit: sessions joined, triplets sent, propensities",
)
