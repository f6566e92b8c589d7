"""The cancels of the turns running here, and the inbox rows an accepted cancel sticks to."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from itertools import takewhile

from webhook_bot_gateway.store import InboxItem


class Running:
    """A turn running here: its cancel event, honoured until the turn reaches its commit."""

    __slots__ = ("cancel", "committing", "inbox_ids")

    def __init__(self, inbox_ids: Iterable[int], *, committing: bool = False) -> None:
        self.cancel = asyncio.Event()
        self.inbox_ids = frozenset(inbox_ids)  # the batch: a cancel accepted sticks to them
        # Past the point of no return (``before_commit``): the turn commits what it has.
        self.committing = committing

    def stop(self) -> bool:
        """Set the cancel event; False if it was set already or the turn is committing."""
        if self.committing or self.cancel.is_set():
            return False
        self.cancel.set()
        return True


class Cancels:
    """The lanes' and the turns' shared view of cancels, by session."""

    __slots__ = ("accepted", "running")

    def __init__(self) -> None:
        self.running: dict[str, Running] = {}  # running turns, by session
        # The inbox rows of an accepted cancel whose turn did not commit (its begin was refused,
        # or failed), by session: their next turn starts cancelled. Forgotten once such a turn
        # commits, or when the rows are no longer pending (see ``rows``, ``Dispatcher.poll``).
        self.accepted: dict[str, frozenset[int]] = {}

    def begin(self, sid: str, inbox_ids: Iterable[int], *, committing: bool) -> Running:
        """Register the turn of ``inbox_ids`` as running (a turn that runs no agent, such as
        one of reactions, is committing from the start: nothing to stop)."""
        running = self.running[sid] = Running(inbox_ids, committing=committing)
        if not committing and not self.accepted.get(sid, frozenset()).isdisjoint(inbox_ids):
            running.cancel.set()  # cancelled while an earlier turn of these rows ran
        return running

    def here(self, sid: str) -> bool:
        """Whether this process decides a cancel of the session (its turn runs here, or a
        cancel was accepted here for rows whose turn has not committed)."""
        return sid in self.running or sid in self.accepted

    def accept(self, sid: str) -> frozenset[int] | None:
        """The inbox rows of the session's turn that this cancel stops (or that an earlier
        accepted cancel stopped), else None."""
        running = self.running.get(sid)
        if running is not None and running.stop():
            self.accepted[sid] = running.inbox_ids  # until a turn of them commits
            return running.inbox_ids
        return self.accepted.get(sid)

    def stop(self, sid: str) -> None:
        """Stop the session's turn running here, if any."""
        running = self.running.get(sid)
        if running is not None:
            running.stop()

    def rows(self, sid: str, rows: Sequence[InboxItem]) -> Sequence[InboxItem]:
        """The first pending rows when a cancel was accepted for them: the batch of their turn
        that did not commit, alone (a message written since is not cancelled). The rows that
        are no longer pending ended otherwise (answered elsewhere, deleted, dead): forgotten."""
        ids = self.accepted.pop(sid, None)
        if ids is None:
            return ()
        held = list(takewhile(lambda row: row.id in ids, rows))
        if held:
            self.accepted[sid] = frozenset(row.id for row in held)
        return held
