"""What `rankstream record` can be told: `RecorderOptions`, the one list of its options.

Kept apart from `workers.recorder` (which imports pyarrow) so the command line is built
from these fields without it (`workers.options`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rankstream.workers.options import option
from rankstream.workers.runtime_options import Cadence, RuntimeOptions


def _default_row_group_rows() -> int:
    # imported when an options object is made, not when --help is built (pyarrow)
    from rankstream.stream.recording_files import DEFAULT_ROW_GROUP_ROWS

    return DEFAULT_ROW_GROUP_ROWS


@dataclass(frozen=True)
class RecorderOptions:
    """When files roll and when the recorder stops."""

    messages_per_file: int = option(  # ~1M triplets per file with 2,000-row blocks
        500, "roll to a new file after this many messages", metavar="N"
    )
    roll_seconds: float = option(  # a quiet stream still reaches disk this often
        10.0, "commit buffered messages at least this often", metavar="T"
    )
    exit_when_idle: float | None = option(
        None, "commit and exit when no message arrived for this long", metavar="S"
    )
    row_group_rows: int = option(default_factory=_default_row_group_rows, cli=False)
    poll_ms: int = option(200, cli=False)
    max_poll_records: int = option(500, cli=False)

    def __post_init__(self) -> None:
        if self.messages_per_file < 1:
            raise ValueError(f"messages_per_file must be >= 1, got {self.messages_per_file}")
        if self.row_group_rows < 1:
            raise ValueError(f"row_group_rows must be >= 1, got {self.row_group_rows}")
        self.runtime()  # roll_seconds, idle exit and polling are checked there

    def runtime(self) -> RuntimeOptions:
        """The runtime's checkpoint is the commit of the buffered messages."""
        return RuntimeOptions.of(self, Cadence(seconds=self.roll_seconds))
