"""Turns on SQLite: buffer the writes in memory, then commit them in one transaction.

Entering a turn is one short transaction (check the inbox batch it answers, status
``running`` with this store as the session's ``owner``, load the branch, or with
``recent_turns`` only what pruning to that many whole turns can keep); the body runs
with no transaction open and no lock held; a clean exit is one ``BEGIN IMMEDIATE`` transaction
that writes everything; any exception restores the status and writes nothing else.

Ownership: while the turn runs, ``sessions.owner`` names this store. Another process whose
``interrupt_running`` finds this store's lease run out takes the session over (status
``interrupted``, owner NULL, and perhaps a turn of its own); this turn's commit then raises
TurnActive and writes nothing, and its rollback leaves the session as the other process left it.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from types import TracebackType
from typing import Any

from .._checks import check_ids, outbox_values
from .._errors import RunActive, SessionDeletedError, StoreError, TurnActive
from .._pipeline_types import OutboxIn, OutboxItem
from .._rows import dump_json, load_json
from .._types import ROLES, Message, NewMessage, Session, SessionStatus
from . import _sql_inbox as inbox_sql
from . import _sql_outbox as outbox_sql
from ._conn import Connection
from ._sql_sessions import (
    add_event,
    begin_turn,
    insert_message,
    log_event,
    message_event,
    require_session,
    select_branch,
    select_recent,
)

CommitHook = Callable[[sqlite3.Connection, Sequence[Message]], None]
"""Extra rows of a turn: called inside the commit transaction with the committed messages."""

Clock = Callable[[], float]
_Written = tuple[list[Message], list[OutboxItem]]


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """What a turn needs to commit or undo: the row it began from."""

    prior_status: SessionStatus
    created_at: float  # as stored: tells the session apart from one deleted and re-created
    owner: str  # the store running the turn: ``sessions.owner`` until it ends


def taken_over(session_id: str) -> TurnActive:
    """The error of a turn whose session another process took over while it ran."""
    error = TurnActive(session_id)
    error.args = (
        f"session {session_id!r} was taken over by another process (this store's lease ran"
        " out) while its turn ran; nothing was written",
    )
    return error


class SQLiteTurn:
    """The buffered writes of one turn (implements ``store.Turn``)."""

    def __init__(self, session: Session, history: list[Message], clock: Clock) -> None:
        self._session = session
        self._history = tuple(history)
        self._clock = clock
        self._pending: list[NewMessage] = []
        self._rows: list[dict[str, Any]] = []
        self._agent: str | None = None
        self._metadata: dict[str, Any] = {}
        self._events: list[tuple[str, str, float]] = []
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
        """Run ``hook`` inside the commit transaction, after the messages are inserted."""
        self._check_open()
        self._hooks.append(hook)

    def _check_open(self) -> None:
        if not self._open:
            raise StoreError("the turn has ended; its writes can no longer change")

    def _write(self, conn: sqlite3.Connection, snapshot: _Snapshot, now: float) -> _Written:
        """Everything the turn buffered, in the caller's transaction."""
        sid = self._session.session_id
        row = conn.execute(
            "SELECT head_id, metadata, created_at, owner FROM sessions WHERE session_id = ?",
            (sid,),
        ).fetchone()
        if row is None or row[2] != snapshot.created_at:
            raise SessionDeletedError(sid)
        if row[3] != snapshot.owner:
            raise taken_over(sid)
        parent: int | None = row[0]
        committed: list[Message] = []
        for new in self._rows:
            message = insert_message(conn, sid, parent, new)
            committed.append(message)
            parent = message.id
        metadata = dump_json({**load_json(row[1]), **self._metadata})
        conn.execute(
            "UPDATE sessions SET head_id = ?, active_agent = coalesce(?, active_agent),"
            " metadata = ?, status = 'idle', owner = NULL, updated_at = ? WHERE session_id = ?",
            (parent, self._agent, metadata, now, sid),
        )
        for kind, detail, at in self._events:
            log_event(conn, sid, kind, detail, at)
        if self._inbox_done:
            inbox_sql.complete(conn, sid, list(self._inbox_done), now)
        outbox = [outbox_sql.insert(conn, values, now) for values in self._outbox]
        answers = [m for m in committed if m.role == "assistant" and m.text]
        # One outbox row per answer, in order (the dispatcher and the operator reply add them
        # so): the event names the row, so its delivery statuses can be shown beside it.
        sending = [row.id for row in outbox] if len(outbox) == len(answers) else []
        for index, message in enumerate(answers):
            shown = message_event(message)
            if sending:
                shown["outbox_id"] = sending[index]
            add_event(conn, sid, "message", shown, now)
        if self._cancelled:
            add_event(conn, sid, "turn_cancelled", {"reason": "cancelled"}, now)
        else:
            add_event(conn, sid, "turn_finished", {"replies": len(answers)}, now)
        for hook in self._hooks:
            hook(conn, committed)
        return committed, outbox

    def _close(self) -> None:
        self._open = False


def end_reason(exc: BaseException | None) -> str:
    """Why a turn ended without its commit, as its ``turn_cancelled`` event says."""
    if isinstance(exc, asyncio.CancelledError):
        return "interrupted"  # shutdown: the turn runs again at the next start
    if isinstance(exc, TimeoutError):  # agents' TurnTimeout is one
        return "timeout"
    return "failed"


class TurnScope:
    """``async with store.turn(session_id) as turn``: see the module docstring."""

    def __init__(
        self,
        conn: Connection,
        open_turns: set[str],
        session_id: str,
        clock: Clock,
        recent_turns: int | None = None,
        *,
        owner: str,
        inbox_ids: Sequence[int] = (),
    ) -> None:
        self._conn = conn
        self._open_turns = open_turns
        self._sid = session_id
        self._clock = clock
        self._recent_turns = recent_turns
        self._owner = owner
        self._inbox_ids = tuple(inbox_ids)
        self._snapshot: _Snapshot | None = None
        self._turn: SQLiteTurn | None = None

    async def __aenter__(self) -> SQLiteTurn:
        if self._sid in self._open_turns:
            raise TurnActive(self._sid)
        self._open_turns.add(self._sid)
        try:
            session, history = await self._conn.write(self._begin)
        except Exception:
            self._open_turns.discard(self._sid)  # _begin failed and rolled back
            raise
        except BaseException:
            # A cancelled caller does not stop _begin (already queued on the connection's
            # thread); _restore is queued after it, so it undoes whatever _begin did.
            self._open_turns.discard(self._sid)
            await self._conn.write(partial(self._restore, reason="interrupted"))
            raise
        self._turn = SQLiteTurn(session, history, self._clock)
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
                await self._conn.write(partial(self._restore, reason=end_reason(exc)))
        finally:
            self._turn._close()
            self._open_turns.discard(self._sid)

    async def _commit(self, turn: SQLiteTurn) -> None:
        assert self._snapshot is not None
        write = partial(turn._write, snapshot=self._snapshot, now=self._clock())
        try:
            committed, outbox = await self._conn.write(write)
        except BaseException:
            # A cancelled caller does not stop the commit; then this finds nothing to undo.
            await self._conn.write(partial(self._restore, reason="failed"))
            raise
        turn._committed = tuple(committed)
        turn._committed_outbox = tuple(outbox)

    def _begin(self, conn: sqlite3.Connection) -> tuple[Session, list[Message]]:
        session = require_session(conn, self._sid)
        if session.status == "running":
            # Another process's turn, or a crash that interrupt_running() has not reconciled.
            raise RunActive(self._sid)
        if self._inbox_ids:
            # A stale batch (rows another lane or process answered meanwhile) fails here,
            # before the turn does any work, and leaves the session as it was.
            inbox_sql.check_pending(conn, self._sid, self._inbox_ids)
        created_at: float = conn.execute(
            "SELECT created_at FROM sessions WHERE session_id = ?", (self._sid,)
        ).fetchone()[0]
        begin_turn(conn, self._sid, self._owner)
        add_event(conn, self._sid, "turn_started", {}, self._clock())
        if self._recent_turns is None:
            history = select_branch(conn, session.head_id)
        else:
            history = select_recent(conn, self._sid, session.head_id, self._recent_turns)
        self._snapshot = _Snapshot(session.status, created_at, self._owner)
        return replace(session, status="running"), history

    def _restore(self, conn: sqlite3.Connection, reason: str) -> None:
        """Put the status back as it was before the turn and log why it ended; nothing else.

        Only while the session is still this turn's: one taken over meanwhile is left as the
        other process made it.
        """
        if self._snapshot is None:
            return
        cursor = conn.execute(
            "UPDATE sessions SET status = ?, owner = NULL WHERE session_id = ?"
            " AND status = 'running' AND created_at = ? AND owner = ?",
            (
                self._snapshot.prior_status,
                self._sid,
                self._snapshot.created_at,
                self._snapshot.owner,
            ),
        )
        if cursor.rowcount:
            add_event(conn, self._sid, "turn_cancelled", {"reason": reason}, self._clock())
