"""`rankstream record --out DIR`: write the triplet, judged-query, impression and click
streams to Parquet.

Resumable: a restart continues after the last message in DIR's committed files, so an
interrupted recording has neither gaps nor duplicates (see `stream.recording_writer`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rankstream.commands._launch import Launch, long_running
from rankstream.workers.options import option
from rankstream.workers.recorder_options import RecorderOptions

KIND_TOPICS = {  # stream kind (`stream.recording_files.KINDS`) -> Settings attr
    "triplets": "triplets_topic",
    "queries": "queries_topic",
    "impressions": "impressions_topic",
    "clicks": "clicks_topic",
}


@dataclass(frozen=True)
class RecordOptions:
    """Where to record, which streams, and when the files roll (`RecorderOptions`)."""

    out: str = option(help="recording directory", metavar="DIR")
    topics: tuple[str, ...] = option(
        tuple(KIND_TOPICS), "streams to record", choices=tuple(KIND_TOPICS)
    )
    recorder: RecorderOptions = option(default_factory=RecorderOptions, nested="")


class Recording:
    """The recorder, logging each committed file and what it resumed from and recorded."""

    def __init__(self, launch: Launch) -> None:
        from rankstream.telemetry.structured_log import log_event
        from rankstream.workers.recorder import Recorder

        self.log, self.log_event, options = launch.log, log_event, launch.options
        self.out = options.out
        self.topics = {kind: getattr(launch.settings, KIND_TOPICS[kind]) for kind in options.topics}
        self.recorder = Recorder(
            launch.settings, self.out, self.topics, options.recorder, on_commit=self.committed
        )

    def committed(self, path: Path, counts: Any) -> None:
        self.log_event(
            self.log, "file committed", path=str(path), messages=counts.messages, rows=counts.rows
        )

    def install_signal_handlers(self) -> None:
        self.recorder.install_signal_handlers()

    def run(self) -> int:
        resume = {topic: writer.positions for topic, writer in self.recorder.writers.items()}
        self.log_event(self.log, "recording", out=self.out, topics=self.topics, resume_from=resume)
        self.recorder.run()
        self.log_event(self.log, "recording stopped", counts=self.counts())
        return 0

    def counts(self) -> dict[str, dict[str, int]]:
        return {topic: asdict(c) for topic, c in self.recorder.counts.items()}

    def report(self) -> dict[str, Any]:
        return {"out": self.out, "topics": self.counts()}


add_arguments, run = long_running(
    "record", RecordOptions, Recording, "at exit: the messages and rows recorded"
)
