"""`rankstream worker click-join`: join impressions and clicks into weighted triplets.

Its options are `workers.click_join_options.JoinOptions`' fields; the window and the grace
are the deployment settings `RANKSTREAM_CLICK_WINDOW_SECONDS` and
`RANKSTREAM_CLICK_GRACE_SECONDS`.
"""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rankstream.workers.click_join_options import JoinOptions
    from rankstream.workers.options import add_arguments as add_option_arguments

    add_option_arguments(parser, JoinOptions)
    add_json_argument(parser, "at exit: sessions joined, triplets sent, propensities")


def run(args: argparse.Namespace) -> int:
    from rankstream.commands._usage import options_checked
    from rankstream.commands.worker._launch import launch_worker
    from rankstream.workers.click_join import ClickJoin
    from rankstream.workers.click_join_options import JoinOptions
    from rankstream.workers.options import from_arguments
    from rankstream.workers.structured_log import configure_logging

    configure_logging()
    with options_checked():
        options = from_arguments(JoinOptions, args)
    return launch_worker(
        "click-join",
        args,
        lambda settings: ClickJoin(settings, options),
        losers=options.losers,
    )
