"""The click producer: what users clicked, onto the clicks topic.

Every producer of clicks in Python uses this library: `POST /v1/clicks` (`serve.app`)
and any engine written in Python, directly:

    from rankstream.stream.click_schema import Click
    from rankstream.stream.settings import Settings
    from rankstream.producers.click_producer import ClickProducer

    with ClickProducer.open(Settings.from_env()) as producer:
        producer.deliver([Click(impression_id, candidate_id=7, position=2, dwell=12.5),
                          Click.no_click(other_impression_id)])

`impression_id` is the one `/v1/rank` answered with (the server logged that impression,
`producers.impression_producer`). A `Click.no_click(impression_id)` row says the impression was
shown and its session ended without a click, so the join need not wait out its window.
An engine that knows an impression's session is over when it sends its clicks says so
with them: `send(clicks, session_over=True)` (or `deliver`) puts each impression's
session-over row right after its clicks (`sessions_over`), as `POST /v1/clicks`'
`"session_over": true` does, and the join closes those sessions at once. Without it a
session waits for more clicks until the click window (`RANKSTREAM_CLICK_WINDOW_SECONDS`,
30 minutes) has passed in event time, or the stream has been quiet for a window and a
grace.

What it writes: `rankstream.clicks` messages (`stream.click_schema`) holding each
impression's rows in the order given, each impression's on the partition its id maps to
(`impression_key`), so an impression's clicks land on the partition number its impression
did (both topics are keyed alike; equal partition counts). Knowing its transport (`open`,
or `transport=`), it writes one message per partition a `send` touches (up to
`MESSAGE_ROWS` rows, an impression never split), sent to that partition under the
transport's rule (`Transport.partition_for`) and keyed by its first impression, as the
impression log writes impressions: an engine's batch of 50 impressions is one message,
not 50 (bench clicks). Given only a producer, it writes one message per impression,
keyed by its id. `send` hands the messages to the transport (which
batches them, like Kafka's linger); `flush` returns once the broker acknowledged
everything sent so far (acks=all); `deliver` is both, for callers that answer only after
the acknowledgement (the HTTP endpoint). Clicks are checked when built (`Click` refuses
bad values), so nothing of a bad batch is sent: the records are built, then sent.
"""

from __future__ import annotations

from collections.abc import Sequence

from rankstream.producers.owned_producer import OwnedProducer
from rankstream.stream.click_schema import Click, encode_clicks, impression_key
from rankstream.stream.connect import open_transport
from rankstream.stream.message_groups import by_partition, within_budget
from rankstream.stream.settings import Settings
from rankstream.stream.transport import Producer, Transport
from rankstream.telemetry import prometheus_metrics as metrics


def by_impression(clicks: Sequence[Click]) -> dict[str, list[Click]]:
    """The clicks grouped by impression id, impressions in first-seen order, each's rows
    in the order given."""
    groups: dict[str, list[Click]] = {}
    for click in clicks:
        if not isinstance(click, Click):
            raise TypeError(f"expected Click records, got {type(click).__name__}")
        groups.setdefault(click.impression_id, []).append(click)
    return groups


def sessions_over(clicks: Sequence[Click]) -> list[Click]:
    """The clicks grouped by impression (`by_impression`), each impression's rows followed
    by its session-over row (`Click.no_click`) unless they hold one already: every
    impression they name is over."""
    rows: list[Click] = []
    for impression_id, group in by_impression(clicks).items():
        rows += group
        if all(click.clicked for click in group):
            rows.append(Click.no_click(impression_id))
    return rows


MESSAGE_ROWS = 4096
"""A clicks message's most rows when impressions share one (module docstring)."""


def _first_impression_key(rows: list[Click]) -> bytes:
    return impression_key(rows[0].impression_id)


class ClickProducer(OwnedProducer):
    """Clicks -> clicks messages, per partition or per impression (module docstring);
    thread-safe as its transport's producer is."""

    def __init__(
        self, settings: Settings, producer: Producer, transport: Transport | None = None
    ) -> None:
        super().__init__(producer)
        self.settings = settings
        self.transport = transport
        self.clicks_sent = 0

    @classmethod
    def open(cls, settings: Settings) -> ClickProducer:
        """A producer on the configured transport (Kafka, or the embedded one), owned."""
        transport = open_transport(settings)
        transport.ensure_topics({settings.clicks_topic: 1})
        producer = transport.producer()
        self = cls(settings, producer, transport)
        self._own(producer, transport)
        return self

    def send(self, clicks: Sequence[Click], session_over: bool = False) -> int:
        """Hand the clicks to the transport (module docstring); returns the number of
        rows. `session_over`: every impression they name is over (`sessions_over`). Every
        message is encoded before the first is sent."""
        if not isinstance(session_over, bool):
            raise TypeError(f"session_over must be True or False, got {session_over!r}")
        topic = self.settings.clicks_topic
        impressions = by_impression(sessions_over(clicks) if session_over else clicks)
        messages: list[tuple[bytes, bytes, int | None, int]] = []
        if self.transport is None:
            for impression_id, rows in impressions.items():
                messages.append((encode_clicks(rows), impression_key(impression_id), None,
                                 len(rows)))  # fmt: skip
        else:
            partitions = by_partition(
                self.transport, topic, impressions.values(), _first_impression_key
            )
            for partition, grouped in partitions.items():
                for message in within_budget(grouped, len, MESSAGE_ROWS):
                    rows = [row for impression in message for row in impression]
                    key = impression_key(rows[0].impression_id)
                    messages.append((encode_clicks(rows), key, partition, len(rows)))
        for value, key, partition, rows in messages:
            self.producer.send(topic, value, key=key, partition=partition)
            metrics.CLICKS_PRODUCED.inc(rows)
            self.clicks_sent += rows
        return sum(rows for *_, rows in messages)

    def flush(self, timeout: float | None = None) -> None:
        """Return once the broker acknowledged every message sent so far."""
        self.producer.flush(timeout)

    def deliver(
        self, clicks: Sequence[Click], timeout: float | None = None, session_over: bool = False
    ) -> int:
        """`send`, then `flush`: the clicks are on the broker when this returns."""
        rows = self.send(clicks, session_over)
        self.flush(timeout)
        return rows
