"""What a lane knows of its session's pending rows, and which of them its next turn takes."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import takewhile

from webhook_bot_gateway.store import InboxItem

PENDING_PAGE = 100  # pending rows read per turn, or held in memory per lane
# A committed turn took every pending row it read: new rows wake the lane (the intake's wake,
# or the poll for rows another process wrote), so it ends without reading the store again.
DRAINED = -1.0


class Known:
    """The pending rows of a session, oldest first, as its lane knows them."""

    __slots__ = ("rows", "last_id", "recheck")

    def __init__(self, rows: list[InboxItem]) -> None:
        self.rows = rows
        self.last_id = rows[-1].id if rows else 0  # the newest row this lane has seen
        self.recheck = False  # a poll saw the session's rows: read once these are done

    def learn(self, handed: Sequence[InboxItem]) -> bool:
        """Add the rows newer than any seen (older ones were taken); False past a page."""
        new = [row for row in handed if row.id > self.last_id]
        if new:
            self.rows += new
            self.last_id = new[-1].id
        return len(self.rows) <= PENDING_PAGE

    def took(self, batch: Sequence[InboxItem]) -> float:
        """A turn committed ``batch`` (the first rows): DRAINED when none is left (and no
        read is due), else 0."""
        del self.rows[: len(batch)]
        return 0.0 if self.rows or self.recheck else DRAINED


def next_batch(rows: Sequence[InboxItem], double_texting: str) -> Sequence[InboxItem]:
    """The rows of the next turn: one with "enqueue"; with "merge" every pending row, but a
    retry takes only the rows of the turn that failed (those with attempts), so a message sent
    during the backoff is not tried, or dead-lettered, with them."""
    if double_texting == "enqueue":
        return rows[:1]
    if rows[0].attempts:
        return list(takewhile(lambda row: row.attempts > 0, rows))
    return rows
