"""What the feedback and click producers share: a producer, and the transport that
`open` made for it, closed together; both are context managers.

A producer handed in by the caller is only flushed on close (its owner closes it).
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from rankstream.stream.transport import Producer, Transport


class OwnedProducer:
    """Base of `FeedbackProducer` and `ClickProducer`: `producer`, and what it owns."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self._owned: list[Producer | Transport] = []

    def _own(self, producer: Producer, transport: Transport) -> None:
        """`open` made these: `close` closes them."""
        self._owned = [producer, transport]

    def close(self, timeout: float | None = None) -> None:
        """Flush, and close the producer and transport if `open` made them; with
        `timeout`, give up waiting for acknowledgements after that many seconds."""
        owned, self._owned = self._owned, []
        if not owned:
            self.producer.flush(timeout)
            return
        producer, transport = owned
        try:
            producer.close(timeout)
        finally:
            transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
