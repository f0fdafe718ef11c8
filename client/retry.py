"""When to try a call again, and how long to wait first; never past the call's deadline.

Retried: 503 (serve: the broker or the store did not answer in time) and 409
`in_progress` (the same Idempotency-Key is still being delivered), after the server's
Retry-After when it gives one, for every call (serve publishes feedback and clicks once
per key, its default keys included: the query_id; the first impression and the clicks'
content); a connection that could not be made (nothing was sent);
a connection that failed after the request went out only when repeating it is safe —
the request carries an Idempotency-Key (serve answers a repeat with the first answer,
`duplicate: true`), or it is a ranking or a GET, which publish nothing the user relies
on — and, once, a kept-alive connection the server had closed before answering a byte.
Anything else is raised at once.

Waits: the server's Retry-After when given (seconds or an HTTP date), else an
exponential backoff with full jitter (a random wait in [0, min(cap, base * 2**n)]: many
engines retrying at once spread out). A wait that would end at or after the deadline is
not waited: the call raises the last error then, rather than sleeping into certain
failure.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime


@dataclass(frozen=True)
class RetryPolicy:
    """`max_attempts` tries in all (1: never retry); backoff `base_s` doubling to `cap_s`."""

    max_attempts: int = 5
    base_s: float = 0.05
    cap_s: float = 2.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts: at least 1, got {self.max_attempts}")
        if not 0 <= self.base_s <= self.cap_s:
            raise ValueError(f"need 0 <= base_s <= cap_s, got {self.base_s}, {self.cap_s}")

    def wait(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt `attempt + 1` (`attempt` >= 1 tries done)."""
        if retry_after is not None:
            return retry_after
        return self.rng.uniform(0.0, min(self.cap_s, self.base_s * 2 ** (attempt - 1)))


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """A Retry-After header in seconds (delta-seconds or an HTTP date; None when absent or
    unreadable). `now`: unix time, for the date form."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(when - (time.time() if now is None else now), 0.0)
