"""Records into messages: by the partition their keys map to, and within a size budget.

Writers that put several keyed records in one message (the impression log, the click
producer, the click join's output) share these two rules, so a record lands on the
partition it would have reached alone and no message outgrows its budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from rankstream.stream.transport import Transport

T = TypeVar("T")


def by_partition(
    transport: Transport, topic: str, records: Iterable[T], key: Callable[[T], bytes]
) -> dict[int, list[T]]:
    """`records` grouped by the partition of `topic` their key maps to under the
    transport's rule (`Transport.partition_for`), each group in the order given. A topic
    of one partition takes every key there, so no key is hashed (kafka-python's murmur2
    is Python, ~11 us a key)."""
    partitions = transport.partitions_for(topic)
    if len(partitions) == 1:
        return {partitions[0]: list(records)}
    groups: dict[int, list[T]] = {}
    for record in records:
        groups.setdefault(transport.partition_for(topic, key(record)), []).append(record)
    return groups


def within_budget(records: Iterable[T], size: Callable[[T], int], budget: int) -> list[list[T]]:
    """`records` cut, in order, into messages whose sizes add up to at most `budget`; a
    record never split (one larger than the budget is a message alone). [] for none.

    >>> within_budget([3, 1, 2, 4, 1], lambda n: n, 4)
    [[3, 1], [2], [4], [1]]
    """
    messages: list[list[T]] = []
    total = 0
    for record in records:
        n = size(record)
        if not messages or total + n > budget:
            messages.append([])
            total = 0
        messages[-1].append(record)
        total += n
    return messages
