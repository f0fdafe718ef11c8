"""The click join's window: impressions waiting for their clicks, in event time.

`ClickWindow` is the join's state and nothing else (no transport, no store), so it is
tested alone and saved whole in the join's checkpoint (`workers.click_join`). It keeps
every impression seen within the window as a *session*, in the order the impressions
arrived, with the clicks that named it; a session *closes* when its "session over" row
arrives (`Click.no_click`) or when a click later than its time + `window_s` has been seen
(the clicks' event time: the window is over for it). Closed sessions leave in arrival
order (`ready`): a closed session waits behind an open one that arrived before it, so
what the join emits, and in which order, depends only on the order within each topic,
never on how the consumer happened to interleave the two topics. That is what lets a
restarted join reproduce an uninterrupted one bit for bit (one partition per topic; with
several, the order across partitions is the fetch's, as for the online worker).

Clicks that cannot join:

* ``late``: its time is past its impression's time + window, or its impression's session
  was already over (closed by its end row, or emitted);
* ``unknown_impression``: no impression with its id arrived although the impressions
  already seen reach `grace_s` past the click's time (an impression is served before its
  clicks, so it is not coming); until then the click waits (it may have overtaken its
  impression on the other topic);
* ``unknown_candidate``: its impression did not show that candidate (found when the session
  closes).

Time is event time: an impression's `time`, a click's `time` or, without one, its
message's timestamp. The watermarks are the largest impression time and click time seen.
Event time moves only with events, so the last sessions of a quiet stream would wait for
the next traffic: a join that has read nothing for `window_s` + `grace_s` of wall time
closes them all (`close_all`).

Size. The checkpoint holds every open session's id, time, source position and clicks, not
the impressions themselves (their phi): after a restart the join re-reads the impressions
topic from the oldest open session's offset and `hydrate`s them, so the log, which keeps
them anyway, is their durable copy. Closed ids are remembered for one more window (a
click for one is `late`, not `unknown_impression`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.stream.click_schema import Impression
from rankstream.stream.schema import LATE, UNKNOWN_CANDIDATE, UNKNOWN_IMPRESSION

Source = tuple[str, int, int, int]  # topic, partition, offset, row of the record's message


@dataclass
class PendingClick:
    """A click held by the window: its candidate (None: the session-over row), event time
    and where it came from (for its dead letter)."""

    candidate_id: int | None
    time: float
    source: Source


@dataclass
class Session:
    """One impression within the window and the clicks that named it."""

    impression_id: str
    time: float
    source: Source
    clicks: list[PendingClick] = field(default_factory=list)
    ended: bool = False  # its session-over row arrived
    impression: Impression | None = None  # None after a restart, until re-read


@dataclass(frozen=True)
class Rejected:
    """A click the join cannot use: dead-lettered with `reason`."""

    impression_id: str
    candidate_id: int | None
    time: float | None
    source: Source
    reason: str
    detail: str


@dataclass(frozen=True)
class Closed:
    """A session over: its impression and which displayed positions were clicked."""

    impression: Impression
    clicked: np.ndarray  # bool (n,), displayed order
    click_times: list[float]  # event times of its clicks (for the join-lag metric)
    rejects: list[Rejected]


class ClickWindow:
    """Sessions in arrival order, early clicks, closed ids and the two watermarks."""

    def __init__(self, window_s: float, grace_s: float) -> None:
        if not (np.isfinite(window_s) and window_s > 0):
            raise ValueError(f"window_s must be finite and > 0, got {window_s}")
        if not (np.isfinite(grace_s) and grace_s >= 0):
            raise ValueError(f"grace_s must be finite and >= 0, got {grace_s}")
        self.window_s, self.grace_s = float(window_s), float(grace_s)
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self.early: dict[str, list[PendingClick]] = {}
        self._earliest = np.inf  # the earliest time of a waiting click (a lower bound)
        self.closed: dict[str, float] = {}  # impression id -> its time, for one more window
        self.impression_watermark = -np.inf
        self.click_watermark = -np.inf

    # --- input ----------------------------------------------------------------------------
    def add_impression(self, impression: Impression, source: Source) -> list[Rejected]:
        """A new impression opens a session (with any clicks that overtook it); returns the
        clicks of those that cannot join. ValueError for an id it `knows` already."""
        iid = impression.impression_id
        if self.knows(iid):
            raise ValueError(f"impression {iid!r} seen before")
        self.impression_watermark = max(self.impression_watermark, impression.time)
        session = Session(iid, impression.time, source, impression=impression)
        self.sessions[iid] = session
        rejected = []
        for click in self.early.pop(iid, []):
            rejected += self._attach(session, click)
        return rejected

    def knows(self, impression_id: str) -> bool:
        """Whether an impression of this id is in the window or closed within it."""
        return impression_id in self.sessions or impression_id in self.closed

    def hydrate(self, impression: Impression, source: Source) -> bool:
        """Give a restored session its impression back (re-read from the log); False if the
        impression belongs to no open session (it closed before the checkpoint)."""
        session = self.sessions.get(impression.impression_id)
        if session is None or session.source != source or session.impression is not None:
            return False
        session.impression = impression
        return True

    def add_click(self, impression_id: str, click: PendingClick) -> list[Rejected]:
        """A click (or session-over row) joins its session, waits for it, or is refused."""
        self.click_watermark = max(self.click_watermark, click.time)
        session = self.sessions.get(impression_id)
        if session is not None:
            return self._attach(session, click)
        if impression_id in self.closed:
            return [self._reject(impression_id, click, LATE, "its impression's session is over")]
        if self.impression_watermark > click.time + self.grace_s:
            return [self._unknown(impression_id, click)]
        self.early.setdefault(impression_id, []).append(click)
        self._earliest = min(self._earliest, click.time)
        return []

    def _attach(self, session: Session, click: PendingClick) -> list[Rejected]:
        if session.ended:
            return [self._reject(session.impression_id, click, LATE, "after its session-over row")]
        if click.time > session.time + self.window_s:
            after = click.time - session.time
            detail = f"{after:.1f} s after its impression (window {self.window_s:g} s)"
            return [self._reject(session.impression_id, click, LATE, detail)]
        if click.candidate_id is None:
            session.ended = True
        else:
            session.clicks.append(click)
        return []

    # --- output ---------------------------------------------------------------------------
    def ready(self) -> list[Closed]:
        """Closed sessions at the head of the arrival order, removed from the window."""
        found = []
        while self.sessions:
            session = next(iter(self.sessions.values()))
            over = session.ended or self.click_watermark > session.time + self.window_s
            if not over or session.impression is None:
                break
            del self.sessions[session.impression_id]
            self.closed[session.impression_id] = session.time
            found.append(self._close(session, session.impression))
        self._forget_closed()
        return found

    def close_all(self) -> list[Rejected]:
        """Every open session over and every waiting click refused as unknown: what the
        join does when nothing has arrived for a window and a grace of wall time
        (`ClickJoinHandler.tick`), when no click can still be due in any session's window
        and no impression can still overtake a waiting click. Returns those refusals; the
        sessions leave by `ready`. The watermarks stay where the events put them."""
        for session in self.sessions.values():
            session.ended = True
        rejected = [self._unknown(iid, c) for iid, found in self.early.items() for c in found]
        self.early.clear()
        self._earliest = np.inf
        return rejected

    def unknown(self) -> list[Rejected]:
        """Early clicks whose impression is not coming (see the module docstring)."""
        rejected: list[Rejected] = []
        if not self.impression_watermark > self._earliest + self.grace_s:
            return rejected  # none can be due: no scan of the waiting clicks
        for iid in list(self.early):
            waiting = self.early[iid]
            gone = [c for c in waiting if self.impression_watermark > c.time + self.grace_s]
            if gone:
                rejected += [self._unknown(iid, c) for c in gone]
                kept = [c for c in waiting if c not in gone]
                if kept:
                    self.early[iid] = kept
                else:
                    del self.early[iid]
        self._earliest = min((c.time for cs in self.early.values() for c in cs), default=np.inf)
        return rejected

    def _close(self, session: Session, impression: Impression) -> Closed:
        position = {int(c): i for i, c in enumerate(impression.candidate_ids.tolist())}
        clicked = np.zeros(len(position), dtype=bool)
        rejects, times = [], []
        for click in session.clicks:
            at = position.get(int(click.candidate_id))  # type: ignore[arg-type]
            if at is None:
                detail = f"candidate {click.candidate_id} was not shown"
                rejects.append(
                    self._reject(session.impression_id, click, UNKNOWN_CANDIDATE, detail)
                )
                continue
            clicked[at] = True
            times.append(click.time)
        return Closed(impression, clicked, times, rejects)

    def _forget_closed(self) -> None:
        """Closed ids one window past their session's window."""
        horizon = self.click_watermark - 2 * self.window_s
        if self.closed and next(iter(self.closed.values())) < horizon:
            self.closed = {i: t for i, t in self.closed.items() if t >= horizon}

    def _reject(self, iid: str, click: PendingClick, reason: str, detail: str) -> Rejected:
        return Rejected(iid, click.candidate_id, click.time, click.source, reason, detail)

    def _unknown(self, iid: str, click: PendingClick) -> Rejected:
        detail = f"no impression {iid!r} within {self.grace_s:g} s of the click"
        return self._reject(iid, click, UNKNOWN_IMPRESSION, detail)

    # --- restart --------------------------------------------------------------------------
    def resume_offsets(self, topic: str) -> dict[int, int]:
        """Per partition of `topic`, the oldest offset of an open session's impression:
        where a restarted join re-reads impressions to `hydrate` its sessions."""
        oldest: dict[int, int] = {}
        for session in self.sessions.values():
            t, partition, offset, _ = session.source
            if t == topic:
                oldest[partition] = min(offset, oldest.get(partition, offset))
        return oldest

    @property
    def waiting(self) -> int:
        """Clicks waiting for their impression."""
        return sum(len(c) for c in self.early.values())

    def to_state(self) -> dict[str, Any]:
        """JSON-able: everything but the impressions themselves (module docstring)."""

        def clicks(found: list[PendingClick]) -> list[list[Any]]:
            return [[c.candidate_id, c.time, list(c.source)] for c in found]

        return {
            "window_s": self.window_s,
            "grace_s": self.grace_s,
            "sessions": [
                [s.impression_id, s.time, list(s.source), clicks(s.clicks), s.ended]
                for s in self.sessions.values()
            ],
            "early": {iid: clicks(found) for iid, found in self.early.items()},
            "closed": list(self.closed.items()),
            "impression_watermark": _number(self.impression_watermark),
            "click_watermark": _number(self.click_watermark),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ClickWindow:
        """The window `to_state` saved; its sessions await `hydrate`."""

        def clicks(found: list[list[Any]]) -> list[PendingClick]:
            return [PendingClick(c, float(t), _source(s)) for c, t, s in found]

        window = cls(state["window_s"], state["grace_s"])
        for iid, time, source, found, ended in state["sessions"]:
            window.sessions[iid] = Session(iid, float(time), _source(source), clicks(found), ended)
        window.early = {iid: clicks(found) for iid, found in state["early"].items()}
        window._earliest = min((c.time for f in window.early.values() for c in f), default=np.inf)
        window.closed = {iid: float(t) for iid, t in state["closed"]}
        window.impression_watermark = _watermark(state["impression_watermark"])
        window.click_watermark = _watermark(state["click_watermark"])
        return window


def _source(values: list[Any]) -> Source:
    topic, partition, offset, row = values
    return str(topic), int(partition), int(offset), int(row)


def _number(value: float) -> float | None:
    """JSON has no -inf: None stands for "nothing seen yet"."""
    return None if not np.isfinite(value) else float(value)


def _watermark(value: float | None) -> float:
    return -np.inf if value is None else float(value)
