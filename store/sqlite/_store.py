"""``SQLiteStore``: the embedded backend of the ``Store`` protocol, on aiosqlite."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from secrets import token_hex
from typing import Any, Self

from .. import _args as args
from .._args import DEFAULT_DEDUP_TTL_HOURS, check_ttl
from .._checks import (
    SECRET_BYTES,
    check_int,
    check_seconds,
    check_secret_name,
    check_text,
    session_values,
)
from .._errors import SessionExistsError, StoreError
from .._ids import validate_session_id
from .._lifecycle import OpenClose
from .._retention import HistoryPurged, purge_all
from .._types import AgentCount, Message, Role, Session, SessionEvent, SessionStatus, Waiting
from . import _sql_dedup as dedup
from . import _sql_quarantine as quarantine
from . import _sql_retention as retention
from . import _sql_sessions as sql
from . import _sql_waiting as waiting
from ._attachments import AttachmentMethods
from ._conn import Connection, EventListener
from ._pipeline import PipelineMethods
from ._tables import TableMethods
from ._turn import SQLiteTurn, TurnScope

log = logging.getLogger("store.sqlite")  # the names operators filter on stay short


class SQLiteStore(PipelineMethods, AttachmentMethods, TableMethods, OpenClose):
    """Sessions, history, the dedup guard and the pipeline in one SQLite file (or ``:memory:``)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        dedup_ttl_hours: float = DEFAULT_DEDUP_TTL_HOURS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._path = os.fspath(path)
        self._ttl = check_ttl(dedup_ttl_hours)
        self._clock = clock
        self._conn: Connection | None = None
        self._open_turns: set[str] = set()
        self._owner = uuid.uuid4().hex  # one per store object, so one per process

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        dedup_ttl_hours: float = DEFAULT_DEDUP_TTL_HOURS,
        clock: Callable[[], float] = time.time,
    ) -> Self:
        """Open (creating and migrating if needed) the database at ``path``."""
        store = cls(path, dedup_ttl_hours=dedup_ttl_hours, clock=clock)
        await store.initialize()
        return store

    async def initialize(self) -> None:
        """Connect and migrate; idempotent."""
        if self._conn is None:
            self._conn = await Connection.open(self._path)

    async def aclose(self) -> None:
        """Close the connection; idempotent. A turn still open stays ``running`` on disk."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    @property
    def _db(self) -> Connection:
        if self._conn is None:
            raise StoreError("the store is not open; call initialize() or use 'async with'")
        return self._conn

    async def ping(self) -> None:
        """Raise if the database does not answer."""
        await self._db.read(lambda conn: conn.execute("SELECT 1").fetchone())

    # sessions

    async def create_session(
        self,
        channel: str,
        account: str,
        chat_id: str,
        active_agent: str,
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        """Create the session of a chat; SessionExistsError if it exists."""
        values = session_values(channel, account, chat_id, active_agent, metadata)
        session = await self._db.write(partial(sql.insert_session, values=values, now=self._now()))
        if session is None:
            raise SessionExistsError(values["session_id"])
        return session

    async def get_or_create_session(
        self, channel: str, account: str, chat_id: str, active_agent: str
    ) -> Session:
        """The session of a chat, created first if needed, in one transaction."""
        values = session_values(channel, account, chat_id, active_agent, None)
        now = self._now()

        def run(conn: sqlite3.Connection) -> Session:
            created = sql.insert_session(conn, values, now)
            return created or sql.require_session(conn, values["session_id"])

        return await self._db.write(run)

    async def get_session(self, session_id: str) -> Session | None:
        """The session, or None."""
        validate_session_id(session_id)
        return await self._db.read(partial(sql.select_session, session_id=session_id))

    async def update_session(
        self,
        session_id: str,
        *,
        active_agent: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        """Set the active agent and/or merge metadata keys; SessionNotFound if missing."""
        args.check_session_update(session_id, active_agent, metadata)
        run = partial(
            sql.update_session,
            session_id=session_id,
            active_agent=active_agent,
            metadata=metadata,
            now=self._now(),
        )
        return await self._db.write(run)

    async def delete_session(self, session_id: str) -> bool:
        """Erase a session and every row that holds its messages (docs/data.md); False if
        there was none. Deleted content is overwritten (``secure_delete``), and the WAL is
        emptied afterwards, so no copy of it stays in the files either."""
        validate_session_id(session_id)
        deleted = await self._db.write(partial(sql.delete_session, session_id=session_id))
        if deleted:
            await self._empty_wal_after_erasing("a session")
        return deleted

    async def delete_quarantine(self, quarantine_id: int) -> bool:
        """Erase one quarantined delivery; False if there was none. As with ``delete_session``,
        no copy of it stays in the files."""
        check_int("quarantine_id", quarantine_id, 1)
        deleted = await self._db.write(partial(quarantine.delete, quarantine_id=quarantine_id))
        if deleted:
            await self._empty_wal_after_erasing("a quarantined delivery")
        return deleted

    async def delete_chat_quarantine(self, channel: str, chat_id: str) -> int:
        """Erase the quarantined deliveries of ``channel`` that name ``chat_id``; how many."""
        check_text("channel", channel)
        check_text("chat_id", chat_id)
        run = partial(quarantine.delete_naming_chat, channel=channel, chat_id=chat_id)
        deleted = await self._db.write(run)
        if deleted:
            await self._empty_wal_after_erasing("quarantined deliveries")
        return deleted

    async def _empty_wal_after_erasing(self, what: str) -> None:
        if not await self._db.call(sql.truncate_wal):
            log.warning("after erasing %s the WAL could not be emptied (a reader held it)", what)

    async def list_sessions(
        self,
        limit: int = 50,
        offset: int = 0,
        *,
        channel: str | None = None,
        status: SessionStatus | None = None,
        agent: str | None = None,
        search: str | None = None,
    ) -> list[Session]:
        """A page of sessions, most recently updated first; ``search``: a substring of the chat
        id or the session id."""
        args.check_page(limit, offset)
        filters = args.session_filters(channel, status, agent, search)
        run = partial(sql.list_sessions, filters=filters, limit=limit, offset=offset, search=search)
        return await self._db.read(run)

    async def count_sessions(
        self,
        *,
        channel: str | None = None,
        status: SessionStatus | None = None,
        agent: str | None = None,
        search: str | None = None,
    ) -> int:
        """How many sessions match the filters."""
        filters = args.session_filters(channel, status, agent, search)
        return await self._db.read(partial(sql.count_sessions, filters=filters, search=search))

    # ownership across processes (docs/deployment.md)

    @property
    def owner(self) -> str:
        """This store's identity (random, made with the object): its turns carry it in
        ``sessions.owner``, its outbox claims in ``outbox.claimed_by``, its lease in ``leases``."""
        return self._owner

    async def secret(self, name: str) -> bytes:
        """The database's random 32-byte secret ``name``, made at its first use (see the
        protocol)."""
        run = partial(sql.secret, name=check_secret_name(name), fresh=token_hex(SECRET_BYTES))
        return bytes.fromhex(await self._db.write(run))

    async def renew_lease(self, seconds: float) -> None:
        """Hold this store's lease until ``seconds`` from now (by the store's clock)."""
        length = check_seconds("seconds", seconds)
        run = partial(sql.renew_lease, owner=self._owner, expires_at=self._now() + length)
        await self._db.write(run)

    async def release_lease(self) -> None:
        """Drop this store's lease (a clean stop): its running turns may be taken over at once."""
        await self._db.write(partial(sql.release_lease, owner=self._owner))

    async def waiting_sessions(
        self, agents: Iterable[str], limit: int = 50, offset: int = 0
    ) -> list[Waiting]:
        """The sessions ``agents`` hold, the one waiting longest first (see ``Waiting``)."""
        names = args.check_agent_names("agents", agents)
        args.check_page(limit, offset)
        run = partial(waiting.waiting_sessions, agents=names, limit=limit, offset=offset)
        return await self._db.read(run)

    async def agent_counts(self, excluding: Iterable[str] = ()) -> list[AgentCount]:
        """The active agents of the sessions, but ``excluding``, by name: how many sessions
        each holds, and how many of those are unanswered (``Waiting.unanswered``)."""
        names = args.check_agent_names("excluding", excluding)
        return await self._db.read(partial(waiting.agent_counts, excluding=names))

    async def interrupt_running(self, running_here: Collection[str] | None = None) -> list[str]:
        """Turn ``running`` sessions whose owner holds no live lease into ``interrupted``;
        return their ids, sorted.

        A turn whose store's lease is live is left alone, whichever store runs it (this one
        included: renew the lease first, or this store's own open turns count as dead). Each
        session taken gets a ``turn_cancelled`` event and loses its owner, so the old owner's
        commit fails with TurnActive. Leases that ran out over a day ago are deleted.
        """
        stale = None if running_here is None else (self.owner, running_here)
        run = partial(sql.interrupt_running, now=self._now(), stale=stale)
        return await self._db.write(run)

    @asynccontextmanager
    async def watch_work(
        self,
        on_inbox: Callable[[frozenset[str]], None],
        on_outbox: Callable[[], None],
        on_cancel: Callable[[str], Awaitable[bool]] | None = None,
    ) -> AsyncIterator[None]:
        """Nothing to enter: SQLite has no notifications, so other processes' work is not heard
        (nor their cancels: see ``relay_cancel``).

        The dispatcher's and the sender's polls (``pending_sessions``, ``outbox_schedule``)
        find the inbox and outbox rows another process committed to the same file. This
        process's own rows reach them without any of this (the gateway wakes them directly).
        """
        yield

    async def relay_cancel(self, session_id: str, *, wait_seconds: float) -> bool | None:
        """False: SQLite has no channel between processes, so a turn running in another
        process on the same file (a rolling deploy's few seconds) cannot be cancelled here."""
        validate_session_id(session_id)
        check_seconds("wait_seconds", wait_seconds)
        return False

    # history

    async def get_branch(self, session_id: str, head_id: int | None = None) -> list[Message]:
        """The current branch (or the one ending at ``head_id``), oldest first."""
        args.check_branch(session_id, head_id)
        return await self._db.read(partial(sql.branch_of, session_id=session_id, head_id=head_id))

    async def append_message(
        self,
        session_id: str,
        role: Role,
        text: str | None,
        *,
        agent: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> Message:
        """Append a message after the head and move the head to it."""
        now = self._now()
        new = args.message_row(session_id, role, text, agent, data, now)
        run = partial(sql.append_message, session_id=session_id, new=new, now=now)
        return await self._db.write(run)

    async def set_active_head(self, session_id: str, message_id: int) -> Session:
        """Move the head to one of the session's messages (rewind); RunActive while running."""
        validate_session_id(session_id)
        check_int("message_id", message_id, 1)
        run = partial(
            sql.set_active_head, session_id=session_id, message_id=message_id, now=self._now()
        )
        return await self._db.write(run)

    async def all_messages(self, session_id: str) -> list[Message]:
        """Every message of the session, of every branch, in id order; SessionNotFound."""
        validate_session_id(session_id)
        return await self._db.read(partial(sql.all_messages, session_id=session_id))

    async def latest_user_text(self, session_id: str) -> str | None:
        """The text of the newest user message on the current branch."""
        validate_session_id(session_id)
        return await self._db.read(partial(sql.latest_user_text, session_id=session_id))

    async def record_event(
        self, session_id: str, kind: str, detail: dict[str, Any] | None = None
    ) -> SessionEvent:
        """Record a session event outside a turn (e.g. an operator's handoff)."""
        text, now = args.event_detail(session_id, kind, detail), self._now()

        def run(conn: sqlite3.Connection) -> SessionEvent:
            sql.require_session(conn, session_id)
            return sql.insert_event(conn, session_id, kind, text, now)

        return await self._db.write(run)

    async def list_events(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[SessionEvent]:
        """A session's events with ``seq > after``, oldest first; at most ``limit``."""
        rows = args.events_limit(session_id, after, limit)
        run = partial(sql.list_events, session_id=session_id, after=after, limit=rows)
        return await self._db.read(run)

    def watch_events(self, listener: EventListener) -> Callable[[], None]:
        """Call ``listener(session_ids)`` after each commit that logged events of those sessions.

        Only this process's commits are heard; returns the function that stops the calls.
        """
        listeners = self._db.listeners
        listeners.append(listener)
        return lambda: listeners.remove(listener) if listener in listeners else None

    async def set_agent(self, session_id: str, agent: str, *, reason: str) -> Session:
        """Hand the session to ``agent`` (an ``agent_changed`` event); RunActive while running."""
        stored = args.check_handoff(session_id, agent, reason)
        run = partial(
            sql.set_agent, session_id=session_id, agent=agent, reason=stored, now=self._now()
        )
        return await self._db.write(run)

    # turns

    def turn(
        self,
        session_id: str,
        *,
        recent_turns: int | None = None,
        inbox_ids: Sequence[int] = (),
    ) -> TurnScope:
        """``async with store.turn(id) as turn``: buffered writes, one commit at the end.

        With ``recent_turns``, ``turn.history`` holds only what ``prune_to_turns`` can keep of
        the branch: its last ``recent_turns`` whole turns and every system message.
        The turn owns the session (``sessions.owner`` is this store's ``owner``) until it
        ends; its commit raises TurnActive, writing nothing, if the session was taken over.
        ``inbox_ids``: the rows the turn answers; entering raises InboxNotPending or
        InboxNotFound, writing nothing, unless each is a pending row of the session.
        """
        batch = args.turn_batch(session_id, recent_turns, inbox_ids)
        return TurnScope(
            self._db,
            self._open_turns,
            session_id,
            self._clock,
            recent_turns,
            owner=self._owner,
            inbox_ids=batch,
        )

    # dedup guard

    async def claim(self, keys: Iterable[str]) -> set[str]:
        """Return the keys seen for the first time (or whose earlier claim expired)."""
        distinct = args.dedup_keys(keys)
        if not distinct:
            return set()
        now = self._now()
        run = partial(dedup.claim, keys=distinct, now=now, cutoff=now - self._ttl)
        return await self._db.write(run)

    async def purge(self, chunk_size: int = 1000) -> int:
        """Delete expired dedup rows, each chunk its own short transaction; return the count."""
        check_int("chunk_size", chunk_size, 1)
        run = partial(dedup.purge_chunk, cutoff=self._now() - self._ttl, chunk_size=chunk_size)

        async def chunk() -> int:
            deleted = await self._db.write(run)
            log.debug("purged %d expired dedup rows in one transaction", deleted)
            return deleted

        return await args.in_chunks(chunk, chunk_size)

    async def purge_history(
        self, older_than_seconds: float, chunk_size: int = 1000
    ) -> HistoryPurged:
        """Retention: delete history older than the cutoff, chunk by chunk (store/_retention.py)."""
        cutoff = args.finished_cutoff(older_than_seconds, chunk_size, self._now())
        files = partial(retention.attachments_chunk, cutoff=cutoff, chunk_size=chunk_size)
        empty = partial(retention.empty_sessions_chunk, cutoff=cutoff, chunk_size=chunk_size)
        return await purge_all(
            self._ordered_chunk,
            partial(self._db.write, files),
            partial(self._db.write, empty),
            cutoff,
            chunk_size,
        )

    async def _ordered_chunk(
        self, table: str, cutoff: float, after: int, size: int
    ) -> tuple[int, int, bool]:
        run = partial(
            retention.ordered_chunk, table=table, cutoff=cutoff, after=after, chunk_size=size
        )
        return await self._db.write(run)

    def _now(self) -> float:
        return float(self._clock())


__all__ = ["SQLiteStore", "SQLiteTurn"]
