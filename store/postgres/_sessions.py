"""The session, history, event, turn and dedup methods of ``PostgresStore``.

Each method checks its arguments before any I/O (ValueError naming the field), then runs
exactly one transaction through ``Database.write`` or ``Database.read``, as on SQLite.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from functools import partial
from typing import Any

import asyncpg

from .. import _args as args
from .._checks import (
    check_int,
    session_values,
)
from .._errors import SessionExistsError
from .._ids import validate_session_id
from .._retention import HistoryPurged, purge_all
from .._types import AgentCount, Message, Role, Session, SessionEvent, SessionStatus, Waiting
from . import _sql_dedup as dedup
from . import _sql_retention as retention
from . import _sql_sessions as sql
from . import _sql_waiting as waiting
from ._db import Database, EventListener
from ._turn import TurnCalls, TurnScope

log = logging.getLogger("store.postgres")  # the names operators filter on stay short


class SessionMethods:
    """Mixed into ``PostgresStore``, which provides ``_db``, ``_ttl``, ``_clock``,
    ``_open_turns``, ``owner`` and ``_now``."""

    _ttl: float
    _clock: Callable[[], float]
    _open_turns: set[str]
    _turn_calls: TurnCalls

    @property
    def owner(self) -> str:
        raise NotImplementedError

    @property
    def _db(self) -> Database:
        raise NotImplementedError

    def _now(self) -> float:
        raise NotImplementedError

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

        async def run(conn: asyncpg.Connection) -> Session:
            created = await sql.insert_session(conn, values, now)
            return created or await sql.require_session(conn, values["session_id"])

        return await self._db.write(run)

    async def get_session(self, session_id: str) -> Session | None:
        """The session, or None."""
        validate_session_id(session_id)
        return await self._db.query(partial(sql.select_session, session_id=session_id))

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
        there was none. Dead row versions stay in the table files until VACUUM reclaims them."""
        validate_session_id(session_id)
        return await self._db.write(partial(sql.delete_session, session_id=session_id))

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
        return their ids. Sessions a live process (this one too) runs a turn of are left alone.

        Safe while other processes run turns, and from several processes at once: each session
        is taken over by one of them.
        """
        stale = None if running_here is None else (self.owner, running_here)
        run = partial(sql.interrupt_running, now=self._now(), stale=stale)
        return await self._db.write(run)

    # history

    async def get_branch(self, session_id: str, head_id: int | None = None) -> list[Message]:
        """The current branch (or the one ending at ``head_id``), oldest first."""
        args.check_branch(session_id, head_id)
        return await self._db.read(partial(sql.branch_of, session_id=session_id, head_id=head_id))

    async def all_messages(self, session_id: str) -> list[Message]:
        """Every message of the session, of every branch, in id order; SessionNotFound."""
        validate_session_id(session_id)
        return await self._db.read(partial(sql.all_messages, session_id=session_id))

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

    async def latest_user_text(self, session_id: str) -> str | None:
        """The text of the newest user message on the current branch."""
        validate_session_id(session_id)
        return await self._db.read(partial(sql.latest_user_text, session_id=session_id))

    async def record_event(
        self, session_id: str, kind: str, detail: dict[str, Any] | None = None
    ) -> SessionEvent:
        """Record a session event outside a turn (e.g. an operator's handoff)."""
        text, now = args.event_detail(session_id, kind, detail), self._now()
        # insert_event locks the session's row: SessionNotFound if there is none.
        run = partial(sql.insert_event, session_id=session_id, kind=kind, detail=text, now=now)
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

        The turn owns the session (``owner``) until it ends; if another process took it over
        meanwhile, the commit raises TurnActive and writes nothing. Entering raises
        InboxNotPending or InboxNotFound if one of ``inbox_ids`` is not a pending row of the
        session (and then writes nothing).
        """
        batch = args.turn_batch(session_id, recent_turns, inbox_ids)
        return TurnScope(
            self._db,
            self._open_turns,
            session_id,
            self._clock,
            recent_turns,
            owner=self.owner,
            inbox_ids=batch,
            calls=self._turn_calls,
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
