"""The check every command that runs only through real Kafka and Redis starts with, and the
one way the benchmarks through them run and report (`service_bench`)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any, TypeVar

from rankstream.commands._json_output import print_json
from rankstream.commands._options import chosen, options_arguments
from rankstream.commands._usage import UsageError
from rankstream.stream.settings import Settings

T = TypeVar("T")


def real_services_settings(command: str, needs: tuple[str, ...] = ("kafka", "redis")) -> Settings:
    """`Settings.from_env()`; a UsageError (exit 2) naming the variables that are unset.

    The embedded transport and store live in one process, so benchmarks and fault
    injection across processes mean nothing there: refuse rather than measure that.
    """
    settings = Settings.from_env()
    variables = {
        "kafka": ("RANKSTREAM_KAFKA_BOOTSTRAP", settings.kafka_bootstrap),
        "redis": ("RANKSTREAM_REDIS_URL", settings.redis_url),
    }
    missing = [name for name, value in map(variables.get, needs) if not value]
    if missing:
        through = " and ".join({"kafka": "Kafka", "redis": "Redis"}[n] for n in needs)
        raise UsageError(
            f"{command} runs through real {through}: set {' and '.join(missing)} "
            '(e.g. eval "$(rankstream services up --env)")'
        )
    return settings


def on_real_services(
    command: str,
    options: type[T],
    args: argparse.Namespace,
    needs: tuple[str, ...] = ("kafka", "redis"),
) -> tuple[T, Settings]:
    """The command's options, then the settings of the real services it needs (each
    refused, exit 2, before anything starts)."""
    return chosen(options, args), real_services_settings(command, needs)


def service_bench(
    command: str,
    options: type,
    bench: str,
    summary: Callable[[dict[str, Any]], None],
    exit_code: Callable[[dict[str, Any]], int] = lambda result: 0,
    needs: tuple[str, ...] = ("kafka", "redis"),
) -> tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]:
    """The `add_arguments` and `run` of `command`, a benchmark through real services.

    `run`: the options checked and the services required before anything starts, then
    `bench` ("module:function" under `rankstream.harness`, imported only then, so `--help`
    stays light) called as `function(settings, options, progress=...)` with progress
    lines on stderr; its result printed as JSON or by `summary`; `exit_code(result)`.
    """

    def run(args: argparse.Namespace) -> int:
        from rich.console import Console

        module, _, function = bench.partition(":")
        measure = getattr(importlib.import_module(f"rankstream.harness.{module}"), function)
        given, settings = on_real_services(command, options, args, needs=needs)
        err = Console(stderr=True)
        result = measure(settings, given, progress=lambda line: err.print(line))
        if args.json:
            print_json(result)
        else:
            summary(result)
        return exit_code(result)

    return options_arguments(options), run


def exactly_once_exit(result: dict[str, Any]) -> int:
    """0 when nothing was lost or duplicated and no request failed, else 1."""
    return 0 if result["lost"] == 0 and result["duplicated"] == 0 and not result["errors"] else 1
