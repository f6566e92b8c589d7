"""The pipeline methods of ``PostgresStore``: ingest, intake, inbox, outbox and quarantine.

Each method checks its arguments before any I/O (ValueError naming the field) and then runs
exactly one transaction through ``Database.write`` or ``Database.read``, as on SQLite. The
SQL modules keep their rows safe from other processes writing at the same time (see each).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import partial

import asyncpg

from .. import _args as args
from .._checks import (
    MAX_LIST_LIMIT,
    check_agent,
    check_ids,
    check_int,
    check_seconds,
    check_text,
    check_time,
    outbox_values,
)
from .._ids import validate_session_id
from .._pipeline_types import (
    Delivery,
    DeliveryIn,
    InboxItem,
    IngestResult,
    OutboxIn,
    OutboxItem,
    ParsedDelivery,
    PipelineCounts,
    QuarantineIn,
    QuarantineItem,
    SessionInbox,
)
from . import _sql_inbox as inbox
from . import _sql_ingest as ingest_sql
from . import _sql_intake as intake
from . import _sql_outbox as outbox
from . import _sql_quarantine as quarantine
from ._batch import Batcher
from ._db import Database, StoreUnavailable
from ._sql_sessions import require_session

SentMark = tuple[int, list[str]]  # an outbox row's id and its platform ids
SENT_MARKS_PER_CALL = 500
PENDING_READS_PER_CALL = 100


class PipelineMethods:
    """Mixed into ``PostgresStore``, which provides ``_db``, ``_ttl``, ``owner`` and ``_now``."""

    _ttl: float
    _sent_marks: Batcher[SentMark, None]
    _pending_reads: Batcher[tuple[str, int], list[InboxItem]]

    @property
    def _db(self) -> Database:
        raise NotImplementedError

    @property
    def owner(self) -> str:
        raise NotImplementedError

    def _now(self) -> float:
        raise NotImplementedError

    # ingest and intake

    async def ingest(self, items: Sequence[DeliveryIn | QuarantineIn]) -> list[IngestResult]:
        """Claim keys, store new deliveries and quarantine rows in ONE transaction, in order."""
        items = [args.ingest_item(item) for item in items]
        if not items:
            return []
        now = self._now()
        run = partial(ingest_sql.ingest, items=items, now=now, cutoff=now - self._ttl)
        return await self._db.write(run, urgent=True)  # a platform waits for its 200 on it

    async def unparsed_deliveries(self, limit: int = 100) -> list[Delivery]:
        """Stored deliveries awaiting parse, oldest first."""
        check_int("limit", limit, 1, MAX_LIST_LIMIT)
        return await self._db.query(partial(ingest_sql.unparsed, limit=limit))

    async def record_parsed(
        self, delivery_id: int | None, parsed: ParsedDelivery, *, starting_agent: str
    ) -> list[str]:
        """Apply a parsed delivery and delete it in one transaction; sessions with new inbox rows.

        ``delivery_id=None`` (a quarantine replay) applies ``parsed`` and deletes nothing.
        """
        if delivery_id is not None:
            check_int("delivery_id", delivery_id, 1)
        check_agent(starting_agent)
        now = self._now()
        rows = intake.prepare(parsed, starting_agent, now)
        if delivery_id is None and rows.failure is not None:
            raise ValueError("parsed.failure needs a delivery_id: the body to quarantine")
        return await self._db.write(
            partial(intake.record, delivery_id=delivery_id, rows=rows, now=now)
        )

    async def record_parsed_many(
        self,
        items: Sequence[tuple[int, ParsedDelivery]],
        *,
        starting_agent: str,
        oldest_first: bool = False,
    ) -> list[SessionInbox]:
        """``record_parsed`` for several deliveries in ONE transaction.

        A delivery no longer stored is skipped. Returns the sessions with new inbox rows, each
        with those rows and whether they are all its pending rows.
        """
        check_agent(starting_agent)
        now = self._now()
        prepared = []
        for delivery_id, parsed in items:
            check_int("delivery_id", delivery_id, 1)
            prepared.append((delivery_id, intake.prepare(parsed, starting_agent, now)))
        if not prepared:
            return []
        return await self._db.write(
            partial(intake.record_many, items=prepared, now=now, oldest_first=oldest_first)
        )

    # inbox

    async def pending_sessions(self) -> list[str]:
        """Sessions with pending inbox rows, by their oldest pending row."""
        return await self._db.query(inbox.pending_sessions)

    async def pending_inbox(self, session_id: str, limit: int = 100) -> list[InboxItem]:
        """A session's pending inbox rows, oldest first ([] for an unknown session)."""
        validate_session_id(session_id)
        check_int("limit", limit, 1, MAX_LIST_LIMIT)
        return await self._pending_reads.submit((session_id, limit))

    async def _read_pending_many(
        self, reads: list[tuple[str, int]]
    ) -> list[list[InboxItem] | BaseException]:
        """The lanes' reads made while one runs share the next statement."""
        if len(reads) == 1:
            [(session_id, limit)] = reads
            return [
                await self._db.query(partial(inbox.pending, session_id=session_id, limit=limit))
            ]
        return list(await self._db.query(partial(inbox.pending_many, reads=reads)))

    async def cancel_inbox(self, ids: Sequence[int]) -> None:
        """Keep a cancel accepted for these rows' turn with the rows still pending."""
        checked = check_ids("ids", ids)
        await self._db.write(partial(inbox.mark_cancelled, ids=checked, now=self._now()))

    async def cancelled_inbox(
        self, session_ids: Collection[str] | None = None
    ) -> dict[str, frozenset[int]]:
        """Pending rows whose turn was cancelled (``cancel_inbox``), by session."""
        wanted = None
        if session_ids is not None:
            wanted = [validate_session_id(session_id) for session_id in session_ids]
            if not wanted:
                return {}
        return await self._db.query(partial(inbox.cancelled, session_ids=wanted))

    async def backlog_count(self) -> int:
        """Stored deliveries plus pending inbox rows, in one read snapshot."""
        return await self._db.query(_backlog_count)

    async def pipeline_counts(self) -> PipelineCounts:
        """Pending and dead inbox and outbox rows, running and interrupted sessions."""
        return await self._db.query(_pipeline_counts)

    async def fail_inbox(
        self, ids: Sequence[int], error: str, *, next_attempt_at: float, dead: bool
    ) -> None:
        """Record a failed try of pending rows: attempts + 1, error, retry time or dead."""
        checked, stored, retry_at = args.check_inbox_failure(ids, error, next_attempt_at, dead)
        run = partial(inbox.fail, ids=checked, error=stored, next_attempt_at=retry_at, dead=dead)
        await self._db.write(partial(run, now=self._now()))

    async def list_dead_inbox(self, limit: int = 50, offset: int = 0) -> list[InboxItem]:
        """Dead inbox rows, newest first."""
        args.check_page(limit, offset)
        return await self._db.read(partial(inbox.list_dead, limit=limit, offset=offset))

    # outbox

    async def enqueue_outbox(self, item: OutboxIn) -> OutboxItem:
        """Insert an outbox row outside a turn (operator replies, apologies)."""
        values = outbox_values(item)
        return await self._db.write(partial(outbox.insert, values=values, now=self._now()))

    async def park_outbox(self, session_id: str) -> int:
        """Park the session's pending rows until ``unpark_outbox``; how many."""
        validate_session_id(session_id)
        return await self._db.write(partial(outbox.park, session_id=session_id))

    async def unpark_outbox(self, session_id: str) -> int:
        """Make the session's parked rows due now; how many."""
        validate_session_id(session_id)
        return await self._db.write(partial(outbox.unpark, session_id=session_id, now=self._now()))

    async def due_outbox(self, now: float, limit: int = 100) -> list[OutboxItem]:
        """Pending rows with ``next_attempt_at <= now``, in id order: the oldest of each chat,
        unless another store's claim on it still runs (by the store's clock).

        A read, not a claim: two senders may both get these rows; ``claim_outbox`` decides
        which sends one (see ``_sql_outbox``).
        """
        at = check_time("now", now)
        check_int("limit", limit, 1, MAX_LIST_LIMIT)
        run = partial(outbox.due, now=at, limit=limit, owner=self.owner, at=self._now())
        return await self._db.query(run)

    async def outbox_schedule(
        self, now: float, limit: int = 100, skip_channels: Collection[str] = ()
    ) -> tuple[list[OutboxItem], float | None]:
        """``due_outbox`` and the earliest ``next_attempt_at`` after ``now`` of the rows it
        could return later, both without ``skip_channels``, in one statement (one snapshot)."""
        at = check_time("now", now)
        check_int("limit", limit, 1, MAX_LIST_LIMIT)
        skip = args.channel_names("skip_channels", skip_channels)
        run = partial(
            outbox.schedule,
            now=at,
            limit=limit,
            owner=self.owner,
            at=self._now(),
            skip_channels=skip,
        )
        return await self._db.query(run)

    async def next_outbox_due(self) -> float | None:
        """The earliest ``next_attempt_at`` of the rows ``due_outbox`` could give, or None
        (claims of other stores as at the store's clock)."""
        run = partial(outbox.next_due, owner=self.owner, at=self._now())
        return await self._db.query(run)

    async def claim_outbox(self, outbox_id: int, seconds: float) -> bool:
        """Claim a pending row for sending for ``seconds``: False if it is missing, not pending,
        or another store's claim on it still runs. Sent, retry, failed, progress and redirect
        end the claim."""
        check_int("outbox_id", outbox_id, 1)
        return bool(await self.claim_outbox_many([outbox_id], seconds))

    async def claim_outbox_many(self, outbox_ids: Sequence[int], seconds: float) -> list[int]:
        """``claim_outbox`` of each row, in one statement: the ids claimed, in the order given."""
        ids = check_ids("outbox_ids", outbox_ids)
        length = check_seconds("seconds", seconds)
        now = self._now()
        run = partial(
            outbox.claim_many, outbox_ids=ids, owner=self.owner, until=now + length, now=now
        )
        return await self._db.write_one(run)

    async def outbox_sent(self, outbox_id: int, platform_ids: Sequence[str]) -> None:
        """Mark a pending row sent with the platform's ids. One call, no transaction around;
        the marks of sends that finish while one is written share the next call."""
        check_int("outbox_id", outbox_id, 1)
        ids = args.platform_ids(platform_ids)
        await self._sent_marks.submit((outbox_id, ids))

    async def _write_sent_marks(self, marks: list[SentMark]) -> list[BaseException | None]:
        """The outcome of each mark: one call for all, or one each for one alone, for a row
        given twice, or when the call for all failed (so a row's fault fails its caller only)."""
        if len(marks) == 1 or len({outbox_id for outbox_id, _ in marks}) < len(marks):
            return [await self._write_sent_mark(mark) for mark in marks]
        run = partial(outbox.sent_many, marks=marks, now=self._now())
        try:
            done = await self._db.write_one(run)
        except StoreUnavailable:
            raise  # the database did not answer: each alone would fail as well
        except Exception:  # a value one of them holds (PostgreSQL's error, or its encoding's)
            return [await self._write_sent_mark(mark) for mark in marks]
        return [None if i in done else await self._sent_refusal(i) for i, _ in marks]

    async def _write_sent_mark(self, mark: SentMark) -> BaseException | None:
        outbox_id, ids = mark
        run = partial(outbox.sent, outbox_id=outbox_id, platform_ids=ids, now=self._now())
        try:
            await self._db.write_one(run)
        except Exception as exc:  # the caller's, as a call alone would raise it
            return exc
        return None

    async def _sent_refusal(self, outbox_id: int) -> BaseException:
        return await self._db.query(partial(outbox.refusal, outbox_id=outbox_id))

    async def outbox_retry(self, outbox_id: int, *, next_attempt_at: float, error: str) -> None:
        """Record a retryable failure: attempts + 1, stays pending until ``next_attempt_at``."""
        check_int("outbox_id", outbox_id, 1)
        retry_at = check_time("next_attempt_at", next_attempt_at)
        stored = args.outside_text("error", error)
        run = partial(outbox.retry, outbox_id=outbox_id, next_attempt_at=retry_at, error=stored)
        await self._db.write(run)

    async def outbox_progress(
        self, outbox_id: int, *, skip_parts: int, platform_ids: Sequence[str]
    ) -> None:
        """A split reply delivered its first ``skip_parts`` parts (``platform_ids``, all so far)."""
        check_int("outbox_id", outbox_id, 1)
        check_int("skip_parts", skip_parts, 1)
        ids = args.platform_ids(platform_ids)
        run = partial(outbox.progress, outbox_id=outbox_id, skip_parts=skip_parts, platform_ids=ids)
        await self._db.write(run)

    async def outbox_redirect(self, outbox_id: int, *, chat_id: str, error: str) -> None:
        """Send a pending row to ``chat_id`` instead (a migrated chat); attempts + 1."""
        check_int("outbox_id", outbox_id, 1)
        check_text("chat_id", chat_id)
        stored = args.outside_text("error", error)
        run = partial(outbox.redirect, outbox_id=outbox_id, chat_id=chat_id, error=stored)
        await self._db.write(run)

    async def outbox_failed(self, outbox_id: int, *, error: str, state: str) -> None:
        """End a pending row as ``failed``, ``dead`` or ``uncertain``; attempts + 1."""
        stored = args.check_outbox_failed(outbox_id, error, state)
        now = self._now()
        run = partial(outbox.failed, outbox_id=outbox_id, error=stored, state=state, now=now)
        await self._db.write(run)

    async def list_outbox(self, session_id: str) -> list[OutboxItem]:
        """A session's outbox rows in id order; SessionNotFound for an unknown session."""
        validate_session_id(session_id)

        async def run(conn: asyncpg.Connection) -> list[OutboxItem]:
            await require_session(conn, session_id)
            return await outbox.of_session(conn, session_id)

        return await self._db.read(run)

    async def list_dead_outbox(self, limit: int = 50, offset: int = 0) -> list[OutboxItem]:
        """Dead outbox rows, newest first."""
        args.check_page(limit, offset)
        return await self._db.read(partial(outbox.list_dead, limit=limit, offset=offset))

    # quarantine

    async def list_quarantine(
        self, limit: int = 50, offset: int = 0, *, pending_only: bool = False
    ) -> list[QuarantineItem]:
        """Quarantined deliveries, newest first; ``pending_only``: those not replayed yet."""
        args.check_page(limit, offset)
        if not isinstance(pending_only, bool):
            raise ValueError("pending_only must be a bool")
        page = partial(quarantine.list_page, limit=limit, offset=offset, pending_only=pending_only)
        return await self._db.read(page)

    async def get_quarantine(self, quarantine_id: int) -> QuarantineItem | None:
        """One quarantined delivery, or None."""
        check_int("quarantine_id", quarantine_id, 1)
        return await self._db.read(partial(quarantine.get, quarantine_id=quarantine_id))

    async def mark_replayed(self, quarantine_id: int) -> None:
        """Record that a quarantined delivery was replayed (sets ``replayed_at``)."""
        check_int("quarantine_id", quarantine_id, 1)
        run = partial(quarantine.mark_replayed, quarantine_id=quarantine_id, now=self._now())
        await self._db.write(run)

    async def delete_quarantine(self, quarantine_id: int) -> bool:
        """Erase one quarantined delivery; False if there was none. Dead row versions stay in
        the table files until VACUUM reclaims them."""
        check_int("quarantine_id", quarantine_id, 1)
        return await self._db.write(partial(quarantine.delete, quarantine_id=quarantine_id))

    async def delete_chat_quarantine(self, channel: str, chat_id: str) -> int:
        """Erase the quarantined deliveries of ``channel`` that name ``chat_id``; how many."""
        check_text("channel", channel)
        check_text("chat_id", chat_id)
        run = partial(quarantine.delete_naming_chat, channel=channel, chat_id=chat_id)
        return await self._db.write(run)

    async def purge_finished(self, older_than_seconds: float, chunk_size: int = 1000) -> int:
        """Delete done inbox rows and sent outbox rows older than the cutoff, in chunks."""
        cutoff = args.finished_cutoff(older_than_seconds, chunk_size, self._now())
        total = 0
        for chunk in (inbox.purge_done_chunk, outbox.purge_sent_chunk):
            run = partial(self._db.write, partial(chunk, cutoff=cutoff, chunk_size=chunk_size))
            total += await args.in_chunks(run, chunk_size)
        return total


async def _backlog_count(conn: asyncpg.Connection) -> int:
    count = await conn.fetchval(
        "SELECT (SELECT count(*) FROM deliveries)"
        " + (SELECT count(*) FROM inbox WHERE state = 'pending')"
    )
    return int(count)


# Index ranges only: inbox_due and outbox_due lead with the state, sessions_status with the
# status. Idle sessions are left out on purpose: counting them would read every session.
PIPELINE_COUNTS = (
    "SELECT 'inbox', '', state, count(*) FROM inbox"
    " WHERE state IN ('pending', 'dead') GROUP BY state"
    " UNION ALL SELECT 'outbox', channel, state, count(*) FROM outbox"
    " WHERE state IN ('pending', 'dead') GROUP BY channel, state"
    " UNION ALL SELECT 'sessions', '', status, count(*) FROM sessions"
    " WHERE status IN ('running', 'interrupted') GROUP BY status"
)


async def _pipeline_counts(conn: asyncpg.Connection) -> PipelineCounts:
    rows = await conn.fetch(PIPELINE_COUNTS)
    return PipelineCounts.from_rows(tuple(row) for row in rows)
