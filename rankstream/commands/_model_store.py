"""The model store the `model` commands read and write, with a notice when it is embedded."""

from __future__ import annotations

import sys

from rankstream.stream.settings import Settings
from rankstream.stream.store import ModelStore


def open_model_store() -> ModelStore:
    """The configured store; without RANKSTREAM_REDIS_URL the embedded one, said on stderr
    (it lives in this process only, so it starts empty)."""
    from rankstream.stream.connect import open_store

    settings = Settings.from_env()
    if not settings.redis_url:
        print(
            "note: RANKSTREAM_REDIS_URL is not set, so this is the embedded model store of "
            "this process alone (empty); set it to reach a deployment's Redis",
            file=sys.stderr,
        )
    return open_store(settings)
