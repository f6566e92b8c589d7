"""Turns on PostgreSQL: buffer the writes in memory, then commit them in one transaction.

As on SQLite: entering a turn is one short write (status ``running`` and ``turn_started``)
with the read of the branch (or with ``recent_turns`` only what pruning to that many whole
turns can keep): one call of ``gateway_turn_enter`` (schema 7) that commits on its own, so a
read that fails undoes the begin with it. Only the system messages older than a recent window
are read after it; should that read fail, the begin is undone. The body runs with no
transaction open and no lock held; a clean exit is one call of ``gateway_turn_commit`` (or,
for a turn that merges metadata or has a commit hook, one transaction) that writes
everything; any exception restores the status and writes nothing else.

Several processes may share the database, so both transactions lock the session's row first:
of two processes beginning a turn of one session, the second sees ``running`` and gets
RunActive (TurnActive is for a second turn within this process).

The turn owns the session: begin sets ``owner`` to the store's, commit and undo clear it. A
process whose lease ran out may have lost the session meanwhile (``interrupt_running`` of
another process clears the owner); its commit then raises TurnTakenOver (a TurnActive) and
writes nothing, and its undo leaves the session alone. Undoing also checks that this turn's
``turn_started`` committed and is the session's latest, so a turn whose begin never committed
cannot reset another process's ``running``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

import asyncpg

from .._errors import (
    RunActive,
    SessionDeletedError,
    SessionNotFound,
    StoreError,
    TurnTakenOver,
)
from .._pipeline_rows import OUTBOX_COLUMNS, to_outbox
from .._rows import dump_json, load_json, to_datetime, to_message, to_session
from .._turn_buffer import TurnBuffer, Written, end_reason, message_event
from .._turn_buffer import TurnScope as _Scope
from .._types import Message, Session, SessionStatus
from . import _sql_inbox as inbox_sql
from ._batch import Batcher
from ._db import Database, StoreUnavailable, noted_events, noted_locked
from ._sql_sessions import (
    APPEND_EVENTS,
    append_events,
    event_columns,
    insert_messages,
    with_older_system,
)

CommitHook = Callable[[asyncpg.Connection, Sequence[Message]], Awaitable[None]]
CommitRow = tuple[Any, ...]  # a row of gateway_turn_commit
EnterRow = tuple[Any, ...]  # a row of gateway_turn_enter
Entered = tuple[Session, list[Message], int | None]  # the session, its window, the lowest
# Raises why the inbox rows a turn completes (given) are not all found pending (found).
CheckFound = Callable[[list[int], list[int], str], Awaitable[None]]
"""Extra rows of a turn: awaited inside the commit transaction with the committed messages."""

__all__ = ["CommitHook", "PostgresTurn", "TurnScope", "end_reason"]


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """What a turn needs to commit or undo: the row it began from."""

    prior_status: SessionStatus
    created_at: float  # as stored: tells the session apart from one deleted and re-created
    started: int  # id of this turn's turn_started event
    owner: str  # the store's: the session's owner while the turn holds it


# The session's row locked, and the turn's outbox rows inserted once the lock is held (their ids
# drawn in the given order): one row per outbox row, or one with NULLs after the session's
# columns when there is none, or none when the session is gone.
_QUEUED = ("channel", "account", "chat_id", "payload", "due", "error")
_LOCK_AND_QUEUE = (
    "WITH s AS (SELECT head_id, metadata, created_at, owner FROM sessions WHERE session_id = $1"
    " FOR NO KEY UPDATE),"
    " o AS (INSERT INTO outbox (session_id, channel, account, chat_id, payload, next_attempt_at,"
    " error, created_at) SELECT $1, g.channel, g.account, g.chat_id, g.payload,"
    " coalesce(g.due, $2), g.error, $2 FROM s, unnest($3::text[], $4::text[], $5::text[],"
    " $6::text[], $7::float8[], $8::text[]) WITH ORDINALITY AS g (channel, account, chat_id,"
    f" payload, due, error, n) ORDER BY g.n RETURNING {OUTBOX_COLUMNS})"
    " SELECT s.head_id, s.metadata, s.created_at, s.owner, o.* FROM s LEFT JOIN o ON true"
    " ORDER BY o.id"
)
# The session's row as the commit sets it, the turn's inbox rows done (locked in id order,
# only those still pending) and every event of the turn, in one statement after the session's
# lock; RETURNING gives each event's id beside the ids of the rows marked done.
_FINISH = (
    "WITH changed AS (UPDATE sessions SET head_id = $5, active_agent = coalesce($6, active_agent),"
    " metadata = $7, status = 'idle', owner = NULL, updated_at = $8 WHERE session_id = $1),"
    " mine AS (SELECT id FROM inbox WHERE id = ANY($9::bigint[]) AND session_id = $1"
    " AND state = 'pending' ORDER BY id FOR UPDATE),"
    " done AS (UPDATE inbox SET state = 'done', finished_at = $8 FROM mine"
    " WHERE inbox.id = mine.id AND inbox.state = 'pending' RETURNING inbox.id),"
    " done_ids AS (SELECT coalesce(array_agg(id), '{}') AS ids FROM done)"
    f" {APPEND_EVENTS}, (SELECT ids FROM done_ids)"
)
# The session's lock, its status, this turn's ``turn_started`` event and its history (schema 7).
_ENTER = "SELECT * FROM gateway_turn_enter($1, $2, $3, $4, $5, $6)"
# Everything a turn without metadata or hooks writes, in one call (schema 6).
_COMMIT = (
    "SELECT * FROM gateway_turn_commit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,"
    " $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)"
)
_APPENDED = ("role", "text", "agent", "data", "created_at")
# A message event's JSON text starts so with a placeholder id; gateway_turn_commit puts the id.
_SHOWN_PREFIX = '{"message_id":0,'


class PostgresTurn(TurnBuffer[CommitHook]):
    """The buffered writes of one turn (implements ``store.Turn``); commits on PostgreSQL."""

    async def _write(self, conn: asyncpg.Connection, snapshot: _Snapshot, now: float) -> Written:
        """Everything the turn buffered, in the caller's transaction."""
        sid = self._session.session_id
        queued = [[values[key] for values in self._outbox] for key in _QUEUED]
        rows = await conn.fetch(_LOCK_AND_QUEUE, sid, now, *queued)
        if not rows or rows[0][2] != snapshot.created_at:
            raise SessionDeletedError(sid)
        noted_locked((sid,))
        head, stored_metadata, _, owner = rows[0][:4]
        if owner != snapshot.owner:
            raise TurnTakenOver(sid)
        outbox = [to_outbox(tuple(row)[4:]) for row in rows if row[4] is not None]
        committed = await insert_messages(conn, sid, head, list(self._rows))
        parent: int | None = committed[-1].id if committed else head
        metadata = dump_json({**load_json(stored_metadata), **self._metadata})
        closing = self._closing_events(committed, outbox)
        # The turn's own events, then the closing ones (never none), numbered in that order.
        events = [*self._events, *((kind, dump_json(d), now) for kind, d in closing)]
        inbox_ids = list(self._inbox_done)
        logged = await conn.fetch(
            _FINISH, sid, *event_columns(events), parent, self._agent, metadata, now, inbox_ids
        )
        await inbox_sql.check_found(conn, inbox_ids, list(logged[0][1]), sid)
        noted_events((sid,))
        for hook in self._hooks:
            await hook(conn, committed)
        return committed, outbox

    @property
    def commits_in_one_call(self) -> bool:
        """Whether ``_call_commit`` can write this turn: its metadata is merged, and its hooks
        run, in Python."""
        return not self._metadata and not self._hooks

    async def _call_commit(
        self, conn: asyncpg.Connection, snapshot: _Snapshot, now: float
    ) -> Written:
        """What ``_write`` writes, in one call of ``gateway_turn_commit`` (no transaction)."""
        rows = await conn.fetch(_COMMIT, *self._commit_args(snapshot, now))
        if rows[0][0] == "ok":
            noted_events((self._session.session_id,))
        return await self._commit_outcome(
            [tuple(row) for row in rows], partial(inbox_sql.check_found, conn)
        )

    def _commit_args(self, snapshot: _Snapshot, now: float) -> list[object]:
        """The arguments of ``gateway_turn_commit`` for this turn, in order."""
        answers = self._answer_indexes()
        last_kind, last_detail = self._last_event(len(answers))
        return [
            self._session.session_id,
            snapshot.created_at,
            snapshot.owner,
            now,
            self._agent,
            list(self._inbox_done),
            *([values[key] for values in self._rows] for key in _APPENDED),
            *([values[key] for values in self._outbox] for key in _QUEUED),
            *event_columns(self._events),
            [index + 1 for index in answers],
            [self._shown_without_id(index) for index in answers],
            last_kind,
            dump_json(last_detail),
        ]

    async def _commit_outcome(self, rows: Sequence[CommitRow], check: CheckFound) -> Written:
        """What ``gateway_turn_commit`` gave for this turn, or its refusal raised. ``check``
        names the inbox rows a stale commit no longer found pending."""
        sid = self._session.session_id
        outcome = rows[0][0]
        if outcome == "deleted":
            raise SessionDeletedError(sid)
        if outcome == "taken":
            raise TurnTakenOver(sid)
        if outcome == "stale":
            await check(list(self._inbox_done), list(rows[0][3]), sid)
            raise StoreError(f"the commit of a turn of {sid!r} found its inbox rows changed")
        outbox = [to_outbox(tuple(row)[4:]) for row in rows if row[4] is not None]
        return self._appended(rows[0][1], rows[0][2]), outbox

    def _shown_without_id(self, index: int) -> str:
        """The ``message`` event's JSON text of the turn's message ``index``, after its id."""
        text = dump_json(message_event(self._message(index, 0, None)))
        assert text.startswith(_SHOWN_PREFIX)
        return text[len(_SHOWN_PREFIX) :]

    def _appended(self, head: int | None, ids: Sequence[int]) -> list[Message]:
        """The turn's messages as committed with ``ids``, the first after ``head``."""
        if len(ids) != len(self._rows):
            raise StoreError(f"a turn committed {len(ids)} of its {len(self._rows)} messages")
        parents = [head, *ids[:-1]]
        return [self._message(index, ids[index], parents[index]) for index in range(len(ids))]

    def _message(self, index: int, message_id: int, parent_id: int | None) -> Message:
        """The turn's message ``index`` as stored with this id and parent."""
        row = self._rows[index]
        return Message(
            id=message_id,
            session_id=self._session.session_id,
            parent_id=parent_id,
            role=row["role"],
            text=row["text"],
            agent=row["agent"],
            data=load_json(row["data"]),
            created_at=to_datetime(row["created_at"]),
        )


Commit = tuple[PostgresTurn, _Snapshot, float]  # a turn, the row it began from, its time
COMMITS_PER_CALL = 100
_COMMIT_MANY = "SELECT * FROM gateway_turn_commit_many($1::jsonb)"


async def _call_commit_many(
    conn: asyncpg.Connection, items: Sequence[Commit]
) -> list[list[CommitRow]]:
    """``_call_commit`` of each turn, in one call of ``gateway_turn_commit_many`` (schema 9):
    the rows of each, in the order given."""
    return await _call_many(
        conn,
        _COMMIT_MANY,
        [
            (turn.session.session_id, turn._commit_args(snapshot, now))
            for turn, snapshot, now in items
        ],
        wrote=lambda first: first[0] == "ok",
    )


async def _call_many(
    conn: asyncpg.Connection,
    sql: str,
    calls: list[tuple[str, list[object]]],
    *,
    wrote: Callable[[tuple[Any, ...]], bool],
) -> list[list[tuple[Any, ...]]]:
    """One call of a ``_many`` function for each (session, its arguments): the rows of each,
    after the number the function gives them; the sessions whose first row says they ``wrote``
    got events (their listeners hear it)."""
    rows: list[list[tuple[Any, ...]]] = [[] for _ in calls]
    for row in await conn.fetch(sql, _dump_args([args for _, args in calls])):
        rows[row[0] - 1].append(tuple(row)[1:])
    written = [sid for (sid, _), own in zip(calls, rows, strict=True) if own and wrote(own[0])]
    noted_events(written)
    return rows


async def write_commits(db: Database, commits: list[Commit]) -> list[Written | BaseException]:
    """The outcome of each commit (``_write_each``)."""
    return await _write_each(
        db,
        commits,
        session_of=lambda commit: commit[0].session.session_id,
        many=_call_commit_many,
        alone=lambda c: db.write_one(partial(c[0]._call_commit, snapshot=c[1], now=c[2])),
        outcome=lambda commit, rows, check: commit[0]._commit_outcome(rows, check),
    )


class TurnScope(_Scope[Database, PostgresTurn, _Snapshot]):
    """``async with store.turn(session_id) as turn``: see the module docstring.

    Cancelled, a begin may have committed or not, and a commit may have gone out: the undo
    (``_restore``) tells which, and puts back only what this turn did.

    ``calls`` are the store's: begins made together, and one-call commits of turns ending
    together, share a call.
    """

    def __init__(
        self,
        db: Database,
        open_turns: set[str],
        session_id: str,
        clock: Callable[[], float],
        recent_turns: int | None = None,
        *,
        owner: str,
        inbox_ids: Sequence[int] = (),
        calls: TurnCalls,
    ) -> None:
        super().__init__(
            db, open_turns, session_id, clock, recent_turns, owner=owner, inbox_ids=inbox_ids
        )
        self._calls = calls

    async def _enter(self) -> tuple[Session, list[Message]]:
        # Once sent, the begin commits or not whatever becomes of this task: a cancel waits for
        # its outcome (``_begin`` notes the snapshot), so that the undo knows what to put back.
        begin = asyncio.ensure_future(self._calls.enters.submit(self))
        try:
            session, window, lowest = await asyncio.shield(begin)
        except asyncio.CancelledError:
            await asyncio.wait({begin})
            if not begin.cancelled():
                begin.exception()  # retrieved: the caller hears of the cancel
            raise
        try:
            # Read after the begin's commit: nobody else moves the head of a running session.
            history = (
                await self._db.call(partial(with_older_system, window=window, lowest=lowest))
                if lowest is not None
                else window
            )
        except BaseException as exc:
            await self._undo(end_reason(exc))
            raise
        return replace(session, status="running"), history

    async def _commit_buffer(self, turn: PostgresTurn, now: float) -> Written:
        assert self._snapshot is not None
        if turn.commits_in_one_call:
            return await self._calls.commits.submit((turn, self._snapshot, now))
        return await self._db.write(partial(turn._write, snapshot=self._snapshot, now=now))

    async def _undo(self, reason: str) -> None:
        await self._db.write(partial(self._restore, reason=reason))

    def _new_turn(self, session: Session, history: list[Message]) -> PostgresTurn:
        return PostgresTurn(session, history, self._clock)

    async def _begin(self, conn: asyncpg.Connection) -> Entered:
        """The begin and the history it read: the session, the messages (all of the branch, or
        the window of ``select_recent``) and the walk's ``lowest``."""
        rows = [tuple(row) for row in await conn.fetch(_ENTER, *self._enter_args())]
        if rows and rows[0][10] is not None:
            noted_events((self._sid,))
        return await self._entered(rows, partial(inbox_sql.check_found, conn))

    def _enter_args(self) -> list[object]:
        """The arguments of ``gateway_turn_enter`` for this turn, in order."""
        inbox_ids = list(self._inbox_ids)
        return [self._sid, self._owner, dump_json({}), self._clock(), inbox_ids, self._recent_turns]

    async def _entered(self, rows: Sequence[EnterRow], check: CheckFound) -> Entered:
        """What ``gateway_turn_enter`` gave for this turn (the snapshot noted), or its refusal
        raised. ``check`` names the inbox rows a stale begin no longer found pending."""
        if not rows:
            raise SessionNotFound(self._sid)
        session = to_session(rows[0])
        started, pending = rows[0][10], rows[0][11]
        if started is None:
            if session.status == "running":
                # Another process's turn, or a crash that interrupt_running() has not reconciled.
                raise RunActive(self._sid)
            # A stale batch (another process answered it meanwhile) is refused before any work.
            await check(list(self._inbox_ids), list(pending), self._sid)
            raise StoreError(f"the begin of a turn of {self._sid!r} wrote nothing")
        self._snapshot = _Snapshot(session.status, rows[0][8], started, self._owner)
        window = [to_message(tuple(row)[12:20]) for row in rows[1:]]
        return session, window, rows[1][20] if len(rows) > 1 else None

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
        noted_locked((self._sid,))
        # NULL if the begin rolled back; a later id if another turn began after this one.
        latest = await conn.fetchval(
            "SELECT max(id) FROM session_events"
            " WHERE session_id = $1 AND kind = 'turn_started' AND id >= $2",
            self._sid,
            snapshot.started,
        )
        return bool(latest == snapshot.started)


# --- begins that come together ---------------------------------------------------------------

ENTERS_PER_CALL = 100
_ENTER_MANY = "SELECT * FROM gateway_turn_enter_many($1::jsonb)"


async def _call_enter_many(
    conn: asyncpg.Connection, items: Sequence[TurnScope]
) -> list[list[EnterRow]]:
    """``_begin`` of each turn, in one call of ``gateway_turn_enter_many`` (schema 9): the rows
    of each, in the order given."""
    return await _call_many(
        conn,
        _ENTER_MANY,
        [(scope._sid, scope._enter_args()) for scope in items],
        wrote=lambda first: first[10] is not None,
    )


async def write_enters(db: Database, scopes: list[TurnScope]) -> list[Entered | BaseException]:
    """The outcome of each begin (``_write_each``)."""
    return await _write_each(
        db,
        scopes,
        session_of=lambda scope: scope._sid,
        many=_call_enter_many,
        alone=lambda scope: db.write_one(scope._begin),
        outcome=lambda scope, rows, check: scope._entered(rows, check),
    )


ItemT = TypeVar("ItemT")
RowT = TypeVar("RowT")
ResultT = TypeVar("ResultT")


async def _write_each(
    db: Database,
    items: list[ItemT],
    *,
    session_of: Callable[[ItemT], str],
    many: Callable[..., Awaitable[list[list[RowT]]]],  # (conn, items=...): the rows of each
    alone: Callable[[ItemT], Awaitable[ResultT]],
    outcome: Callable[[ItemT, list[RowT], CheckFound], Awaitable[ResultT]],
) -> list[ResultT | BaseException]:
    """The outcome of each item: one call for all, sorted by session (the order of the
    sessions' locks), or one call each for one alone or when the call for all failed (so an
    item's fault fails its own caller only)."""
    if len(items) == 1:
        return [await _caught(alone(items[0]))]
    order = sorted(range(len(items)), key=lambda i: session_of(items[i]))
    ordered = [items[i] for i in order]
    try:
        rows = await db.write_one(partial(many, items=ordered))
    except StoreUnavailable:
        raise  # the database did not answer: each alone would fail as well
    except Exception:  # a value one of them holds (PostgreSQL's error, or its encoding's)
        return [await _caught(alone(item)) for item in items]
    check = _checker(db)
    outcomes: list[ResultT | BaseException] = [StoreError("no outcome")] * len(items)
    for position, index in enumerate(order):
        outcomes[index] = await _caught(outcome(items[index], rows[position], check))
    return outcomes


async def _caught(result: Awaitable[ResultT]) -> ResultT | BaseException:
    """What ``result`` gives, or the exception its caller is to get (as alone)."""
    try:
        return await result
    except Exception as exc:
        return exc


def _checker(db: Database) -> CheckFound:
    """``inbox_sql.check_found`` in a read of its own (after a call of many)."""

    async def check(ids: list[int], found: list[int], sid: str) -> None:
        await db.query(partial(inbox_sql.check_found, ids=ids, found=found, session_id=sid))

    return check


def _dump_args(turns: list[list[object]]) -> str:
    """The JSON array of each turn's arguments that the ``_many`` functions read."""
    return json.dumps(turns, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True, slots=True)
class TurnCalls:
    """A store's begins and commits of turns: those made together share one call."""

    enters: Batcher[TurnScope, Entered]
    commits: Batcher[Commit, Written]

    @classmethod
    def of(cls, db: Callable[[], Database]) -> TurnCalls:
        """The batchers of the store whose open database ``db()`` gives."""
        return cls(
            Batcher(lambda scopes: write_enters(db(), scopes), max_size=ENTERS_PER_CALL),
            Batcher(lambda commits: write_commits(db(), commits), max_size=COMMITS_PER_CALL),
        )

    async def drained(self) -> None:
        """Once every begin and commit submitted has run."""
        await self.enters.drained()
        await self.commits.drained()
