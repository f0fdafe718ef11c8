"""The recorder: topics copied into a recording directory, resuming where the files end.

`RecorderHandler` is the recorder's own part, run by the stream runtime
(`workers.runtime`). Its state is the files on disk (`stream.recording_writer`): every
partition is read from the position after its last committed message (or from the
beginning), so a recorder killed at any moment and restarted records every message
exactly once: buffered messages that never reached a file are simply read again. The
runtime's checkpoint commits what is buffered (every `roll_seconds`, and on a clean
stop); a topic's buffer is also committed once it holds `messages_per_file` messages.
Messages are decoded at the deployment's width (`Settings.phi_dim`), which every file
records; a message of another width is left out and counted like an undecodable one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rankstream.stream.recording_writer import RecordingWriter, WriterCounts
from rankstream.stream.settings import DEFAULT_PHI_DIM, Settings
from rankstream.stream.transport import Message, TopicPartition, Transport
from rankstream.workers.recorder_options import RecorderOptions
from rankstream.workers.runtime import Handler, StreamRuntime

OnCommit = Callable[[Path, WriterCounts], None]


class RecorderHandler(Handler):
    """One `RecordingWriter` per topic; `topics` maps a stream kind to the topic to read."""

    name = "recorder"

    def __init__(
        self,
        directory: Path | str,
        topics: dict[str, str],
        options: RecorderOptions,
        on_commit: OnCommit | None = None,
        width: int = DEFAULT_PHI_DIM,
    ) -> None:
        self.options = options
        self.writers = {
            topic: RecordingWriter(
                Path(directory), kind, topic, options.row_group_rows, width=width
            )
            for kind, topic in topics.items()
        }
        self._on_commit = on_commit

    def topics(self) -> dict[str, int]:
        return dict.fromkeys(self.writers, 1)  # existing topics keep their partitions

    def positions(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        return {(t, p): self.writers[t].positions.get(p) for t, p in partitions}

    def process(self, runtime: StreamRuntime, messages: Sequence[Message]) -> int:
        rows = 0
        for message in messages:
            writer = self.writers[message.topic]
            rows += writer.add(message)
            if writer.pending_messages >= self.options.messages_per_file:
                self._commit(writer)
        return rows

    def checkpoint(self, runtime: StreamRuntime) -> dict[str, Any]:
        committed: dict[str, str] = {}
        for topic, writer in self.writers.items():
            path = self._commit(writer)
            if path is not None:
                committed[topic] = path.name
        return committed

    def _commit(self, writer: RecordingWriter) -> Path | None:
        path = writer.commit()
        if path is not None and self._on_commit is not None:
            self._on_commit(path, writer.counts)
        return path

    def summary(self) -> dict[str, Any]:
        return {"files": {t: w.counts.files for t, w in self.writers.items()}}


class Recorder(StreamRuntime):
    """The stream runtime running the recorder handler; `run()` returns the exit code and
    `counts` what was recorded per topic."""

    handler: RecorderHandler

    def __init__(
        self,
        settings: Settings,
        directory: Path | str,
        topics: dict[str, str],
        options: RecorderOptions | None = None,
        *,
        transport: Transport | None = None,
        on_commit: OnCommit | None = None,
    ) -> None:
        options = options or RecorderOptions()
        handler = RecorderHandler(directory, topics, options, on_commit, settings.phi_dim)
        super().__init__(settings, handler, options.runtime(), transport=transport)
        self.options = options

    @property
    def writers(self) -> dict[str, RecordingWriter]:
        return self.handler.writers

    @property
    def counts(self) -> dict[str, WriterCounts]:
        return {topic: writer.counts for topic, writer in self.handler.writers.items()}
