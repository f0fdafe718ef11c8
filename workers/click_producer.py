"""The click producer: what users clicked, onto the clicks topic.

Every producer of clicks in Python uses this library: `POST /v1/clicks` (`serve.app`)
and any engine written in Python, directly:

    from rankstream.stream.click_schema import Click
    from rankstream.stream.settings import Settings
    from rankstream.workers.click_producer import ClickProducer

    with ClickProducer.open(Settings.from_env()) as producer:
        producer.deliver([Click(impression_id, candidate_id=7, position=2, dwell=12.5),
                          Click.no_click(other_impression_id)])

`impression_id` is the one `/v1/rank` answered with (the server logged that impression,
`workers.impressions`). A `Click.no_click(impression_id)` row says the impression was
shown and its session ended without a click, so the join need not wait out its window.

What it writes: one `rankstream.clicks` message (`stream.click_schema`) per impression,
holding that impression's rows in the order given, keyed by the impression id, so an
impression's clicks land on the partition number its impression did (both topics are
keyed alike; equal partition counts). `send` hands the messages to the transport (which
batches them, like Kafka's linger); `flush` returns once the broker acknowledged
everything sent so far (acks=all); `deliver` is both, for callers that answer only after
the acknowledgement (the HTTP endpoint). Clicks are checked when built (`Click` refuses
bad values), so nothing of a bad batch is sent: the records are built, then sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from rankstream.stream.click_schema import Click, encode_clicks, impression_key
from rankstream.stream.connect import open_transport
from rankstream.stream.settings import Settings
from rankstream.stream.transport import Producer, Transport
from rankstream.workers import metrics


def by_impression(clicks: Sequence[Click]) -> dict[str, list[Click]]:
    """The clicks grouped by impression id, impressions in first-seen order, each's rows
    in the order given."""
    groups: dict[str, list[Click]] = {}
    for click in clicks:
        if not isinstance(click, Click):
            raise TypeError(f"expected Click records, got {type(click).__name__}")
        groups.setdefault(click.impression_id, []).append(click)
    return groups


class ClickProducer:
    """Clicks -> one clicks message per impression (module docstring); thread-safe as
    its transport's producer is."""

    def __init__(self, settings: Settings, producer: Producer) -> None:
        self.settings = settings
        self.producer = producer
        self.clicks_sent = 0
        self._owned: list[Producer | Transport] = []

    @classmethod
    def open(cls, settings: Settings) -> ClickProducer:
        """A producer on the configured transport (Kafka, or the embedded one), owned."""
        transport = open_transport(settings)
        transport.ensure_topics({settings.clicks_topic: 1})
        producer = transport.producer()
        self = cls(settings, producer)
        self._owned = [producer, transport]
        return self

    def send(self, clicks: Sequence[Click]) -> int:
        """Hand the clicks to the transport, one message per impression; returns the
        number of rows. Every message is encoded before the first is sent."""
        messages = [
            (encode_clicks(rows), impression_key(impression_id), len(rows))
            for impression_id, rows in by_impression(clicks).items()
        ]
        for value, key, rows in messages:
            self.producer.send(self.settings.clicks_topic, value, key=key)
            metrics.CLICKS_PRODUCED.inc(rows)
            self.clicks_sent += rows
        return sum(rows for _, _, rows in messages)

    def flush(self, timeout: float | None = None) -> None:
        """Return once the broker acknowledged every message sent so far."""
        self.producer.flush(timeout)

    def deliver(self, clicks: Sequence[Click], timeout: float | None = None) -> int:
        """`send`, then `flush`: the clicks are on the broker when this returns."""
        rows = self.send(clicks)
        self.flush(timeout)
        return rows

    def close(self, timeout: float | None = None) -> None:
        """Flush and close the producer and transport if `open` made them; with
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

    def __enter__(self) -> ClickProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
