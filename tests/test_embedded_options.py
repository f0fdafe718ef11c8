"""The embedded serve's workers take their commands' options (issue 38): the variables
`rankstream worker online|evaluator|click-join` read reach the threads `rankstream serve`
runs, with serve's one-second cadences only where no variable is set."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from rankstream.cli import main
from rankstream.commands._options import chosen
from rankstream.commands.worker import click_join as click_join_command
from rankstream.serve.embedded_workers import EMBEDDED_SECONDS, EmbeddedWorkers, embedded_options
from rankstream.stream.embedded import reset_embedded
from rankstream.stream.settings import Settings
from rankstream.workers.click_join_options import COMMAND, JoinOptions
from rankstream.workers.options import OptionError, variables_for

SET = {
    "RANKSTREAM_CLICK_JOIN_LOSERS": "skips",
    "RANKSTREAM_CLICK_JOIN_MIN_PROPENSITY": "0.2",
    "RANKSTREAM_CLICK_JOIN_LEARN": "none",
}


def test_without_variables_the_embedded_workers_checkpoint_every_second() -> None:
    online, evaluator, join = embedded_options({})
    assert online.checkpoint_seconds == join.checkpoint_seconds == EMBEDDED_SECONDS
    assert evaluator.publish_seconds == EMBEDDED_SECONDS
    assert join == JoinOptions(checkpoint_seconds=EMBEDDED_SECONDS)
    assert join.losers == "shown"


def test_the_standalone_joins_variables_reach_the_embedded_join(monkeypatch) -> None:
    for name, value in SET.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    click_join_command.add_arguments(parser)
    standalone = chosen(JoinOptions, parser.parse_args([]), variables_for(COMMAND))
    reset_embedded()
    workers = EmbeddedWorkers(Settings(topic_prefix="embedded-options"))  # not started
    join = workers.runtimes[-1].options
    assert (join.losers, join.min_propensity, join.learn) == ("skips", 0.2, ("none",))
    assert join == dataclasses.replace(standalone, checkpoint_seconds=EMBEDDED_SECONDS)
    monkeypatch.setenv("RANKSTREAM_CLICK_JOIN_CHECKPOINT_SECONDS", "7")
    monkeypatch.setenv("RANKSTREAM_ONLINE_CHECKPOINT_SECONDS", "none")
    online, _, join = embedded_options()
    assert join.checkpoint_seconds == 7.0 and online.checkpoint_seconds is None  # as set


def test_a_bad_variable_names_itself_and_serve_refuses_it_before_listening(
    monkeypatch, capsys
) -> None:
    with pytest.raises(OptionError, match="RANKSTREAM_CLICK_JOIN_LOSERS"):
        embedded_options({"RANKSTREAM_CLICK_JOIN_LOSERS": "everything"})
    monkeypatch.setenv("RANKSTREAM_CLICK_JOIN_LOSERS", "everything")
    monkeypatch.delenv("RANKSTREAM_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("RANKSTREAM_REDIS_URL", raising=False)
    assert main(["serve", "--port", "0"]) == 2
    assert "RANKSTREAM_CLICK_JOIN_LOSERS" in capsys.readouterr().err
