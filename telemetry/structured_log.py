"""Structured JSON logs on stderr, shared by every worker.

One JSON object per line (`ts`, `level`, `logger`, `event`, plus the fields passed
with `log_event`), so log shippers and tests can parse worker output without regexes,
and stdout stays free for `--json` results.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

_STANDARD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
}


class JsonFormatter(logging.Formatter):
    """Render a LogRecord, and any `extra=` fields on it, as one JSON line."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                payload[key] = value
        payload.update(getattr(record, _FIELDS, {}))
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str, separators=(",", ":"))


_HANDLER_MARK = "_rankstream_json_handler"
# log_event's fields travel under one private attribute, so a field may be called
# "name" or "msg" without clashing with LogRecord's own attributes.
_FIELDS = "_rankstream_fields"


def configure_logging(level: str | int = "INFO") -> None:
    """Send every log record to stderr as JSON; safe to call more than once."""
    root = logging.getLogger()
    root.setLevel(level if isinstance(level, int) else level.upper())
    # kafka-python logs every connection at INFO; workers report what matters themselves.
    logging.getLogger("kafka").setLevel(logging.WARNING)
    if any(getattr(h, _HANDLER_MARK, False) for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    setattr(handler, _HANDLER_MARK, True)
    root.addHandler(handler)


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(name)


def log_event(logger: logging.Logger, event: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log `event` with structured fields (values must be JSON-able or str-able)."""
    logger.log(level, event, extra={_FIELDS: fields})
