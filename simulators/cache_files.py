"""Cache directories written atomically: a reader sees a whole cache or none at all.

The collections, their candidate indexes and Fashion-MNIST's descriptors are cached as
directories of npy files plus a JSON file; each is built in a temporary directory next to
its target and renamed into place only once complete, so an interrupted build (or two
processes building at once) never leaves a half-written cache behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_directory(target: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty directory to fill; it replaces `target` on success, vanishes on error."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        yield building
        if target.exists():
            shutil.rmtree(target)
        building.rename(target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
