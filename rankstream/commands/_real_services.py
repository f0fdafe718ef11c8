"""The check every command that runs only through real Kafka and Redis starts with."""

from __future__ import annotations

import argparse
from typing import TypeVar

from rankstream.commands._options import chosen
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
