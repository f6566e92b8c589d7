"""How a turn ended, as the metrics count it and the log lines say it."""

from __future__ import annotations

import logging
from collections.abc import Callable

from .. import _log_context as log_context
from .._metrics import TURNS, Metrics

log = logging.getLogger("gateway.dispatcher")

BUSY_WARN_SECONDS = 30.0  # a session refused this long is logged (and again each such period)


def ended(metrics: Metrics, outcome: str) -> None:
    """Count how the turn ended; its last log line says it too."""
    metrics.inc(TURNS, outcome=outcome)
    log_context.record_outcome(outcome)


def say_taken_over(sid: str, seconds: float) -> None:
    """The turn ran to its end here, but another process took its session over meanwhile
    (TurnTakenOver), so nothing of it was written: its model calls and tools ran for nothing."""
    log.warning(
        "session %s: its turn ran %.1f s here and was dropped: another process took the session"
        " over meanwhile, as this process's lease ran out (it, or its database link, stalled"
        " longer than store.lease_seconds); nothing of the turn was written, and its messages"
        " are answered anew (its tools may run again)",
        sid,
        seconds,
    )


def log_turn_end(outcome: str | None, seconds: float) -> None:
    """The line that ends a turn. None: no outcome was recorded (another process runs the
    session's turn, answered its rows, or the failure could not be written): the rows are looked
    at again, at DEBUG, as it can repeat every half second."""
    extra = {"outcome": outcome or "retry", "duration_ms": round(seconds * 1000, 1)}
    if outcome is None:
        log.debug("turn ended with no outcome recorded; its rows are looked at again", extra=extra)
    else:
        log.info("turn ended: %s", outcome, extra=extra)


class Refusals:
    """The sessions whose turns are refused because one of them runs, to say so when it lasts."""

    __slots__ = ("_busy", "_clock")

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._busy: dict[str, tuple[float, int, float]] = {}  # refused: since, tries, warned at

    def refused(self, sid: str) -> None:
        """Count a turn refused because one of the session runs; say so when it lasts."""
        now = self._clock()
        since, tries, warned = self._busy.get(sid, (now, 0, now))
        tries += 1
        if now - warned >= BUSY_WARN_SECONDS:
            log.warning(
                "session %s: its turns have been refused for %.0f s (%d tries): a turn of it is"
                " marked running (here or in another process)",
                sid,
                now - since,
                tries,
            )
            warned = now
        self._busy[sid] = (since, tries, warned)

    def forget(self, sid: str) -> None:
        """The session's turn committed, or its lane ended: the next refusal counts anew."""
        self._busy.pop(sid, None)
