"""Turns on SQLite: buffer the writes in memory, then commit them in one transaction.

Entering a turn is one short transaction (check the inbox batch it answers, status
``running`` with this store as the session's ``owner``, load the branch, or with
``recent_turns`` only what pruning to that many whole turns can keep); the body runs
with no transaction open and no lock held; a clean exit is one ``BEGIN IMMEDIATE`` transaction
that writes everything; any exception restores the status and writes nothing else.

Ownership: while the turn runs, ``sessions.owner`` names this store. Another process whose
``interrupt_running`` finds this store's lease run out takes the session over (status
``interrupted``, owner NULL, and perhaps a turn of its own); this turn's commit then raises
TurnTakenOver (a TurnActive) and writes nothing, and its rollback leaves the session as the
other process left it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from .._errors import RunActive, SessionDeletedError, TurnTakenOver
from .._rows import dump_json, load_json
from .._turn_buffer import TurnBuffer, Written, end_reason
from .._turn_buffer import TurnScope as _Scope
from .._types import Message, Session, SessionStatus
from . import _sql_inbox as inbox_sql
from . import _sql_outbox as outbox_sql
from ._conn import Connection
from ._sql_sessions import (
    add_event,
    begin_turn,
    insert_message,
    log_event,
    require_session,
    select_branch,
    select_recent,
)

CommitHook = Callable[[sqlite3.Connection, Sequence[Message]], None]
"""Extra rows of a turn: called inside the commit transaction with the committed messages."""

__all__ = ["CommitHook", "SQLiteTurn", "TurnScope", "end_reason"]


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """What a turn needs to commit or undo: the row it began from."""

    prior_status: SessionStatus
    created_at: float  # as stored: tells the session apart from one deleted and re-created
    owner: str  # the store running the turn: ``sessions.owner`` until it ends


class SQLiteTurn(TurnBuffer[CommitHook]):
    """The buffered writes of one turn (implements ``store.Turn``); commits on SQLite."""

    def _write(self, conn: sqlite3.Connection, snapshot: _Snapshot, now: float) -> Written:
        """Everything the turn buffered, in the caller's transaction."""
        sid = self._session.session_id
        row = conn.execute(
            "SELECT head_id, metadata, created_at, owner FROM sessions WHERE session_id = ?",
            (sid,),
        ).fetchone()
        if row is None or row[2] != snapshot.created_at:
            raise SessionDeletedError(sid)
        if row[3] != snapshot.owner:
            raise TurnTakenOver(sid)
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
        for kind, shown in self._closing_events(committed, outbox):
            add_event(conn, sid, kind, shown, now)
        for hook in self._hooks:
            hook(conn, committed)
        return committed, outbox


class TurnScope(_Scope[Connection, SQLiteTurn, _Snapshot]):
    """``async with store.turn(session_id) as turn``: see the module docstring.

    Each transaction is queued on the connection's thread: a cancelled caller does not stop
    one already queued, and the undo, queued after it, undoes whatever it did.
    """

    async def _enter(self) -> tuple[Session, list[Message]]:
        return await self._db.write(self._begin)

    async def _commit_buffer(self, turn: SQLiteTurn, now: float) -> Written:
        assert self._snapshot is not None
        return await self._db.write(partial(turn._write, snapshot=self._snapshot, now=now))

    async def _undo(self, reason: str) -> None:
        await self._db.write(partial(self._restore, reason=reason))

    def _new_turn(self, session: Session, history: list[Message]) -> SQLiteTurn:
        return SQLiteTurn(session, history, self._clock)

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
