"""``PostgresStore``: the ``Store`` protocol on PostgreSQL through an asyncpg pool."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

from .._errors import StoreError
from ._attachments import AttachmentMethods
from ._db import Database
from ._pipeline import PipelineMethods
from ._sessions import SessionMethods
from ._tables import TableMethods

log = logging.getLogger(__name__)

DEFAULT_DEDUP_TTL_HOURS = 192.0
DEFAULT_POOL_SIZE = 10
CONNECT_TIMEOUT = 10.0


def _check_ttl(hours: float) -> float:
    if isinstance(hours, bool) or not isinstance(hours, int | float) or not hours > 0:
        raise ValueError(f"dedup_ttl_hours must be a positive number, got {hours!r}")
    return float(hours) * 3600.0


class PostgresStore(SessionMethods, PipelineMethods, AttachmentMethods, TableMethods):
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
        self._ttl = _check_ttl(dedup_ttl_hours)
        self._clock = clock
        self._pool_size = pool_size
        self._database: Database | None = None
        self._open_turns: set[str] = set()

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
            )

    async def __aenter__(self) -> Self:
        try:
            await self.initialize()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the pool; idempotent. A turn still open stays ``running`` in the database."""
        if self._database is not None:
            database, self._database = self._database, None
            await database.close()

    @property
    def _db(self) -> Database:
        if self._database is None:
            raise StoreError("the store is not open; call initialize() or use 'async with'")
        return self._database

    async def ping(self) -> None:
        """Raise if the database does not answer."""
        await self._db.call(lambda conn: conn.fetchval("SELECT 1"))

    def _now(self) -> float:
        return float(self._clock())
