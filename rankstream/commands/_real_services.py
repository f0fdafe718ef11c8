"""The check every command that runs only through real Kafka and Redis starts with."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from rankstream.stream.settings import Settings


def real_services_settings(command: str, err: Console) -> Settings | None:
    """`Settings.from_env()`, or None after telling the user which variables are unset.

    The embedded transport and store live in one process, so benchmarks and fault
    injection across processes mean nothing there: refuse rather than measure that.
    """
    from rankstream.stream.settings import Settings

    settings = Settings.from_env()
    missing = [
        name
        for name, value in (
            ("RANKSTREAM_KAFKA_BOOTSTRAP", settings.kafka_bootstrap),
            ("RANKSTREAM_REDIS_URL", settings.redis_url),
        )
        if not value
    ]
    if missing:
        err.print(
            f"{command} runs through real Kafka and Redis: set {' and '.join(missing)} "
            '(e.g. eval "$(rankstream services up --env)")'
        )
        return None
    return settings
