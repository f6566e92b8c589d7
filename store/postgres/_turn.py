"""Turns on PostgreSQL: buffer the writes in memory, then commit them in one transaction.

As on SQLite: entering a turn is one short transaction (status ``running``, load the branch,
or with ``recent_turns`` only what pruning to that many whole turns can keep); the body runs
with no transaction open and no lock held; a clean exit is one transaction that writes
everything; any exception restores the status and writes nothing else.

Several processes may share the database, so both transactions lock the session's row first:
of two processes beginning a turn of one session, the second sees ``running`` and gets
RunActive (TurnActive is for a second turn within this process).

The turn owns the session: begin sets ``owner`` to the store's, commit and undo clear it. A
process whose lease ran out may have lost the session meanwhile (``interrupt_running`` of
another process clears the owner); its commit then raises TurnActive and writes nothing, and
its undo leaves the session alone. Undoing also checks that this turn's ``turn_started``
committed and is the session's latest, so a turn whose begin never committed cannot reset
another process's ``running``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from types import TracebackType
from typing import Any

import asyncpg

from .._checks import check_ids, outbox_values
from .._errors import RunActive, SessionDeletedError, StoreError, TurnActive
from .._pipeline_types import OutboxIn, OutboxItem
from .._rows import dump_json, load_json, to_session
from .._types import ROLES, Message, NewMessage, Session, SessionStatus
from ..sqlite._turn import end_reason
from . import _sql_inbox as inbox_sql
from . import _sql_outbox as outbox_sql
from ._db import Database
from ._sql_sessions import (
    append_events,
    insert_message,
    lock_row,
    message_event,
    select_branch,
    select_recent,
)

CommitHook = Callable[[asyncpg.Connection, Sequence[Message]], Awaitable[None]]
"""Extra rows of a turn: awaited inside the commit transaction with the committed messages."""

Clock = Callable[[], float]
_Written = tuple[list[Message], list[OutboxItem]]
_Event = tuple[str, str, float]  # kind, detail as JSON text, created_at

__all__ = ["CommitHook", "PostgresTurn", "TurnScope", "end_reason", "taken_over"]


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """What a turn needs to commit or undo: the row it began from."""

    prior_status: SessionStatus
    created_at: float  # as stored: tells the session apart from one deleted and re-created
    started: int  # id of this turn's turn_started event
    owner: str  # the store's: the session's owner while the turn holds it


def taken_over(session_id: str) -> TurnActive:
    """The commit of a turn whose session another process took over (this one's lease ran out).

    TurnActive, as for a second turn in one process: the session is someone else's turn now.
    """
    error = TurnActive(session_id)
    error.args = (
        f"session {session_id!r} was taken over by another process (this one's lease ran out);"
        " nothing was written",
    )
    return error


class PostgresTurn:
    """The buffered writes of one turn (implements ``store.Turn``)."""

    def __init__(self, session: Session, history: list[Message], clock: Clock) -> None:
        self._session = session
        self._history = tuple(history)
        self._clock = clock
        self._pending: list[NewMessage] = []
        self._rows: list[dict[str, Any]] = []
        self._agent: str | None = None
        self._metadata: dict[str, Any] = {}
        self._events: list[_Event] = []
        self._hooks: list[CommitHook] = []
        self._inbox_done: dict[int, None] = {}  # an ordered set
        self._outbox: list[dict[str, Any]] = []
        self._committed: tuple[Message, ...] = ()
        self._committed_outbox: tuple[OutboxItem, ...] = ()
        self._cancelled = False
        self._open = True

    @property
    def session(self) -> Session:
        return self._session

    @property
    def history(self) -> Sequence[Message]:
        return self._history

    @property
    def pending(self) -> Sequence[NewMessage]:
        return tuple(self._pending)

    @property
    def active_agent(self) -> str:
        return self._session.active_agent if self._agent is None else self._agent

    @property
    def committed(self) -> Sequence[Message]:
        return self._committed

    @property
    def committed_outbox(self) -> Sequence[OutboxItem]:
        return self._committed_outbox

    def append(self, message: NewMessage) -> None:
        """Buffer a message after the head and the earlier appends of this turn."""
        self._check_open()
        if message.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {message.role!r}")
        row = {
            "role": message.role,
            "text": message.text,
            "agent": message.agent,
            "data": dump_json(message.data),  # fails here, in the body, not at commit
            "created_at": self._clock(),
        }
        self._pending.append(message)
        self._rows.append(row)

    def set_active_agent(self, name: str) -> None:
        """Make ``name`` the active agent when the turn commits."""
        self._check_open()
        if not isinstance(name, str) or not name:
            raise ValueError("agent name must be a non-empty string")
        self._agent = name

    def update_metadata(self, values: dict[str, Any]) -> None:
        """Merge ``values`` into the session's metadata (shallow) when the turn commits."""
        self._check_open()
        dump_json(values)
        self._metadata.update(values)

    def record_event(self, kind: str, detail: dict[str, Any]) -> None:
        """Record a session event when the turn commits."""
        self._check_open()
        if not isinstance(kind, str) or not kind:
            raise ValueError("event kind must be a non-empty string")
        self._events.append((kind, dump_json(detail), self._clock()))

    def complete_inbox(self, ids: Sequence[int]) -> None:
        """Mark these pending inbox rows of the session done when the turn commits."""
        self._check_open()
        self._inbox_done.update(dict.fromkeys(check_ids("ids", ids)))

    def add_outbox(self, item: OutboxIn) -> None:
        """Insert an outbox row of this session when the turn commits."""
        self._check_open()
        values = outbox_values(item)
        if values["session_id"] != self._session.session_id:
            raise ValueError(
                f"OutboxIn.session_id {item.session_id!r} is not this turn's session"
                f" {self._session.session_id!r}"
            )
        self._outbox.append(values)

    def discard(self) -> None:
        """Drop every write buffered so far: the turn will commit as cancelled.

        What is buffered after this (the user's message, the inbox rows) still commits, with
        a ``turn_cancelled`` event instead of ``turn_finished``.
        """
        self._check_open()
        self._pending.clear()
        self._rows.clear()
        self._agent = None
        self._metadata.clear()
        self._events.clear()
        self._hooks.clear()
        self._inbox_done.clear()
        self._outbox.clear()
        self._cancelled = True

    def add_commit_hook(self, hook: CommitHook) -> None:
        """Await ``hook`` inside the commit transaction, after the messages are inserted."""
        self._check_open()
        self._hooks.append(hook)

    def _check_open(self) -> None:
        if not self._open:
            raise StoreError("the turn has ended; its writes can no longer change")

    async def _write(self, conn: asyncpg.Connection, snapshot: _Snapshot, now: float) -> _Written:
        """Everything the turn buffered, in the caller's transaction."""
        sid = self._session.session_id
        row = await conn.fetchrow(
            "SELECT head_id, metadata, created_at, owner FROM sessions WHERE session_id = $1"
            " FOR NO KEY UPDATE",
            sid,
        )
        if row is None or row[2] != snapshot.created_at:
            raise SessionDeletedError(sid)
        if row[3] != snapshot.owner:
            raise taken_over(sid)
        parent: int | None = row[0]
        committed: list[Message] = []
        for new in self._rows:
            message = await insert_message(conn, sid, parent, new)
            committed.append(message)
            parent = message.id
        metadata = dump_json({**load_json(row[1]), **self._metadata})
        await conn.execute(
            "UPDATE sessions SET head_id = $1, active_agent = coalesce($2, active_agent),"
            " metadata = $3, status = 'idle', owner = NULL, updated_at = $4"
            " WHERE session_id = $5",
            parent,
            self._agent,
            metadata,
            now,
            sid,
        )
        await append_events(conn, sid, self._events)
        if self._inbox_done:
            await inbox_sql.complete(conn, sid, list(self._inbox_done), now)
        outbox = [await outbox_sql.insert(conn, values, now) for values in self._outbox]
        await append_events(conn, sid, self._closing_events(committed, outbox, now))
        for hook in self._hooks:
            await hook(conn, committed)
        return committed, outbox

    def _closing_events(
        self, committed: list[Message], outbox: list[OutboxItem], now: float
    ) -> list[_Event]:
        """The ``message`` event of each answer, then ``turn_finished`` or ``turn_cancelled``."""
        answers = [m for m in committed if m.role == "assistant" and m.text]
        # One outbox row per answer, in order (the dispatcher and the operator reply add them
        # so): the event names the row, so its delivery statuses can be shown beside it.
        sending = [row.id for row in outbox] if len(outbox) == len(answers) else []
        events: list[_Event] = []
        for index, message in enumerate(answers):
            shown = message_event(message)
            if sending:
                shown["outbox_id"] = sending[index]
            events.append(("message", dump_json(shown), now))
        if self._cancelled:
            events.append(("turn_cancelled", dump_json({"reason": "cancelled"}), now))
        else:
            events.append(("turn_finished", dump_json({"replies": len(answers)}), now))
        return events

    def _close(self) -> None:
        self._open = False


class TurnScope:
    """``async with store.turn(session_id) as turn``: see the module docstring."""

    def __init__(
        self,
        db: Database,
        open_turns: set[str],
        session_id: str,
        clock: Clock,
        recent_turns: int | None = None,
        *,
        owner: str,
        inbox_ids: Sequence[int] = (),
    ) -> None:
        self._db = db
        self._open_turns = open_turns
        self._sid = session_id
        self._clock = clock
        self._recent_turns = recent_turns
        self._owner = owner
        self._inbox_ids = tuple(inbox_ids)
        self._snapshot: _Snapshot | None = None
        self._turn: PostgresTurn | None = None

    async def __aenter__(self) -> PostgresTurn:
        if self._sid in self._open_turns:
            raise TurnActive(self._sid)
        self._open_turns.add(self._sid)
        try:
            session, history = await self._db.write(self._begin)
        except Exception:
            self._open_turns.discard(self._sid)  # _begin failed and rolled back
            raise
        except BaseException:
            # Cancelled: _begin may have committed or not; _restore tells which.
            self._open_turns.discard(self._sid)
            await self._db.write(partial(self._restore, reason="interrupted"))
            raise
        self._turn = PostgresTurn(session, history, self._clock)
        return self._turn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._turn is not None
        try:
            if exc_type is None:
                await self._commit(self._turn)
            else:
                await self._db.write(partial(self._restore, reason=end_reason(exc)))
        finally:
            self._turn._close()
            self._open_turns.discard(self._sid)

    async def _commit(self, turn: PostgresTurn) -> None:
        assert self._snapshot is not None
        write = partial(turn._write, snapshot=self._snapshot, now=self._clock())
        try:
            committed, outbox = await self._db.write(write)
        except BaseException:
            # Cancelled after the COMMIT went out, this finds the status idle: nothing to undo.
            await self._db.write(partial(self._restore, reason="failed"))
            raise
        turn._committed = tuple(committed)
        turn._committed_outbox = tuple(outbox)

    async def _begin(self, conn: asyncpg.Connection) -> tuple[Session, list[Message]]:
        row = await lock_row(conn, self._sid)
        session = to_session(row)
        if session.status == "running":
            # Another process's turn, or a crash that interrupt_running() has not reconciled.
            raise RunActive(self._sid)
        if self._inbox_ids:
            # A stale batch (another process answered it meanwhile) is refused before any work.
            await inbox_sql.check_pending(conn, self._sid, self._inbox_ids)
        await conn.execute(
            "UPDATE sessions SET status = 'running', owner = $1 WHERE session_id = $2",
            self._owner,
            self._sid,
        )
        [started] = await append_events(
            conn, self._sid, [("turn_started", dump_json({}), self._clock())]
        )
        if self._recent_turns is None:
            history = await select_branch(conn, session.head_id)
        else:
            history = await select_recent(conn, self._sid, session.head_id, self._recent_turns)
        self._snapshot = _Snapshot(session.status, row[8], started, self._owner)
        return replace(session, status="running"), history

    async def _restore(self, conn: asyncpg.Connection, reason: str) -> None:
        """Put the status back as it was before the turn and log why it ended; nothing else."""
        snapshot = self._snapshot
        if snapshot is None or not await self._still_ours(conn, snapshot):
            return
        await conn.execute(
            "UPDATE sessions SET status = $1, owner = NULL WHERE session_id = $2",
            snapshot.prior_status,
            self._sid,
        )
        detail = dump_json({"reason": reason})
        await append_events(conn, self._sid, [("turn_cancelled", detail, self._clock())])

    async def _still_ours(self, conn: asyncpg.Connection, snapshot: _Snapshot) -> bool:
        """Whether the session is ``running`` from this turn's begin (locks its row): this store
        still owns it, and no other turn began after this one's."""
        row = await conn.fetchrow(
            "SELECT status, created_at, owner FROM sessions WHERE session_id = $1"
            " FOR NO KEY UPDATE",
            self._sid,
        )
        if (
            row is None
            or row[0] != "running"
            or row[1] != snapshot.created_at
            or row[2] != snapshot.owner
        ):
            return False
        # NULL if the begin rolled back; a later id if another turn began after this one.
        latest = await conn.fetchval(
            "SELECT max(id) FROM session_events"
            " WHERE session_id = $1 AND kind = 'turn_started' AND id >= $2",
            self._sid,
            snapshot.started,
        )
        return bool(latest == snapshot.started)
