"""``PostgresStore``: the ``Store`` protocol on PostgreSQL through an asyncpg pool."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from secrets import token_hex
from typing import Self

from .._args import DEFAULT_DEDUP_TTL_HOURS, check_ttl
from .._checks import SECRET_BYTES, check_seconds, check_secret_name
from .._errors import StoreError
from .._ids import validate_session_id
from .._lifecycle import OpenClose
from . import _work as work
from ._attachments import AttachmentMethods
from ._batch import Batcher
from ._cancel_relay import CancelHandler, CancelRelay, refuse_all
from ._db import Database
from ._pipeline import PENDING_READS_PER_CALL, SENT_MARKS_PER_CALL, PipelineMethods
from ._sessions import SessionMethods
from ._tables import TableMethods
from ._turn import TurnCalls

log = logging.getLogger("store.postgres")  # the names operators filter on stay short

DEFAULT_POOL_SIZE = 10
CONNECT_TIMEOUT = 10.0


class PostgresStore(SessionMethods, PipelineMethods, AttachmentMethods, TableMethods, OpenClose):
    """Sessions, history, the dedup guard and the pipeline in one PostgreSQL database.

    ``url`` is a libpq-style ``postgresql://`` URL; it is never logged or put in an error.
    """

    def __init__(
        self,
        url: str,
        *,
        dedup_ttl_hours: float = DEFAULT_DEDUP_TTL_HOURS,
        clock: Callable[[], float] = time.time,
        pool_size: int = DEFAULT_POOL_SIZE,
    ) -> None:
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise ValueError(f"pool_size must be a positive integer, got {pool_size!r}")
        self._url = url
        self._ttl = check_ttl(dedup_ttl_hours)
        self._clock = clock
        self._pool_size = pool_size
        self._database: Database | None = None
        self._open_turns: set[str] = set()
        self._owner = uuid.uuid4().hex  # one per store object, so one per process
        self._sent_marks = Batcher(self._write_sent_marks, max_size=SENT_MARKS_PER_CALL)
        self._pending_reads = Batcher(self._read_pending_many, max_size=PENDING_READS_PER_CALL)
        self._turn_calls = TurnCalls.of(lambda: self._db)
        self._relay = CancelRelay(lambda: self._db, self._owner)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        dedup_ttl_hours: float = DEFAULT_DEDUP_TTL_HOURS,
        clock: Callable[[], float] = time.time,
        pool_size: int = DEFAULT_POOL_SIZE,
    ) -> Self:
        """Connect (creating and migrating the schema if needed)."""
        store = cls(url, dedup_ttl_hours=dedup_ttl_hours, clock=clock, pool_size=pool_size)
        await store.initialize()
        return store

    async def initialize(self) -> None:
        """Connect and migrate; idempotent."""
        if self._database is None:
            self._database = await Database.open(
                self._url,
                min_size=min(2, self._pool_size),
                max_size=self._pool_size,
                connect_timeout=CONNECT_TIMEOUT,
                owner=self._owner,
            )

    async def aclose(self) -> None:
        """Close the pool; idempotent. A turn still open stays ``running`` in the database."""
        if self._database is not None:
            await self._turn_calls.drained()
            await self._sent_marks.drained()
            await self._pending_reads.drained()
            database, self._database = self._database, None
            await database.close()

    @property
    def _db(self) -> Database:
        self._check_open()
        assert self._database is not None
        return self._database

    def _check_open(self) -> None:
        if self._database is None:
            raise StoreError("the store is not open; call initialize() or use 'async with'")

    async def ping(self) -> None:
        """Raise if the database does not answer."""
        await self._db.call(lambda conn: conn.fetchval("SELECT 1"))

    def _now(self) -> float:
        return float(self._clock())

    # ownership across processes (docs/deployment.md)

    @property
    def owner(self) -> str:
        """This store's identity (random, made with the object): its turns carry it in
        ``sessions.owner``, its outbox claims in ``outbox.claimed_by``, its lease in ``leases``,
        and its connections in ``gateway.origin`` (so it can ignore its own notifications)."""
        return self._owner

    async def secret(self, name: str) -> bytes:
        """The database's random 32-byte secret ``name``, made at its first use (see the
        protocol)."""
        run = partial(work.secret, name=check_secret_name(name), fresh=token_hex(SECRET_BYTES))
        return bytes.fromhex(await self._db.write(run))

    async def renew_lease(self, seconds: float) -> None:
        """Hold this store's lease until ``seconds`` from now (by the store's clock)."""
        length = check_seconds("seconds", seconds)
        run = partial(work.renew_lease, owner=self._owner, expires_at=self._now() + length)
        await self._db.write(run)

    async def release_lease(self) -> None:
        """Drop this store's lease (a clean stop): its running turns may be taken over at once."""
        await self._db.write(partial(work.release_lease, owner=self._owner))

    @asynccontextmanager
    async def watch_work(
        self,
        on_inbox: Callable[[frozenset[str]], None],
        on_outbox: Callable[[], None],
        on_cancel: CancelHandler | None = None,
    ) -> AsyncIterator[None]:
        """While entered, call ``on_inbox({session_id})`` for each inbox row and ``on_outbox()``
        for each outbox row that other stores (processes) commit, as soon as they commit; and
        answer other stores' ``relay_cancel`` of a session with ``on_cancel(session_id)``.

        Listens on a connection of its own, opened on entering (StoreUnavailable if it cannot
        be) and closed on exit. Losing it later logs a warning: the polls still find the work.
        """
        self._check_open()
        relay = self._relay
        watching = work.watch(
            self._url,
            self._owner,
            on_inbox,
            on_outbox,
            relay.heard_request,
            relay.heard_answer,
            connect_timeout=CONNECT_TIMEOUT,
        )
        async with watching:
            relay.handler = on_cancel or refuse_all
            try:
                yield
            finally:
                relay.handler = None
                await relay.drained()

    async def relay_cancel(self, session_id: str, *, wait_seconds: float) -> bool | None:
        """Ask the process whose live lease holds the session's running turn to cancel it,
        through the database, while ``watch_work`` is entered (its answer is heard there):
        that process's answer; False when no other live process runs a turn of the session
        (or this store is not watching); None when no answer came within ``wait_seconds``."""
        validate_session_id(session_id)
        wait = check_seconds("wait_seconds", wait_seconds)
        return await self._relay.ask(session_id, self._now(), wait)
