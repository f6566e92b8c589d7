"""PostgreSQL for the benchmarks: a fresh schema per run, and CPU seconds from ``/proc``.

``fresh_schema(server_url)`` creates ``bench_<random>``, yields a url whose connections use it
(``search_path``) and carry its name as their ``application_name``, and drops it afterwards.

CPU is utime + stime of ``/proc/<pid>/stat`` in clock ticks (``SC_CLK_TCK``). PostgreSQL's share
is the postmaster and every child of it except the client backends of other applications:
the backends that serve the gateways (found by ``application_name`` in ``pg_stat_activity``),
and the auxiliary processes (WAL writer, checkpointer, background writer, autovacuum, ...) that
work for every database on the server, ours included. Backends of other sessions' tests on the
same server are left out and counted apart (``foreign``) so a report can say they ran.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from webhook_bot_gateway.store._url import is_postgres

TICK = os.sysconf("SC_CLK_TCK")
SQLITE = "sqlite"  # the --store value that means a SQLite file, as before


def store_kind(url: str) -> str:
    """'postgresql' or 'sqlite' for a ``--store`` value (ValueError for anything else)."""
    if is_postgres(url):
        return "postgresql"
    if url == SQLITE:
        return SQLITE
    raise ValueError(f"--store takes 'sqlite' or a postgresql:// url, not {url.split(':')[0]!r}")


def with_settings(url: str, schema: str) -> str:
    """``url`` whose connections use ``schema`` and name themselves after it."""
    return f"{url}{'&' if '?' in url else '?'}search_path={schema}&application_name={schema}"


@asynccontextmanager
async def fresh_schema(server_url: str) -> AsyncIterator[str]:
    """A url on a new, empty ``bench_<random>`` schema, dropped afterwards."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    await _execute(server_url, f"CREATE SCHEMA {schema}")
    try:
        yield with_settings(server_url, schema)
    finally:
        await _execute(server_url, f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@contextmanager
def fresh_schema_sync(server_url: str) -> Iterator[str]:
    """``fresh_schema`` outside an event loop (each statement in an ``asyncio.run`` of its own)."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    asyncio.run(_execute(server_url, f"CREATE SCHEMA {schema}"))
    try:
        yield with_settings(server_url, schema)
    finally:
        asyncio.run(_execute(server_url, f"DROP SCHEMA IF EXISTS {schema} CASCADE"))


async def _execute(server_url: str, statement: str) -> None:
    """One statement on a connection of its own (none stays open during a run)."""
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(statement)
    finally:
        await admin.close()


def schema_of(url: str) -> str:
    """The schema (and application name) ``with_settings`` put in ``url``."""
    return url.rsplit("application_name=", 1)[1].split("&", 1)[0]


async def server_version(server_url: str) -> str:
    admin = await asyncpg.connect(server_url)
    try:
        return str(await admin.fetchval("SHOW server_version"))
    finally:
        await admin.close()


async def count_rows(url: str, table: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))
    finally:
        await conn.close()


def ticks(pid: int) -> int:
    """utime + stime of a process (all its threads), in clock ticks; 0 once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def cpu_seconds(pids: Iterable[int]) -> float:
    return sum(ticks(pid) for pid in pids) / TICK


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def _children(parent: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _parent(int(entry.name)) == parent:
            pids.append(int(entry.name))
    return pids


@dataclass(frozen=True)
class PgSample:
    ticks: dict[int, int]  # ours: postmaster, auxiliaries, the gateways' backends
    foreign: frozenset[int]  # client backends of other applications (not counted)


class PgCpu:
    """Samples the CPU of the PostgreSQL server's processes that serve ``application``."""

    def __init__(self, admin: asyncpg.Connection, application: str) -> None:
        self._admin = admin
        self._application = application

    @classmethod
    async def connect(cls, server_url: str, application: str) -> PgCpu:
        return cls(await asyncpg.connect(server_url), application)

    async def close(self) -> None:
        await self._admin.close()

    async def sample(self) -> PgSample:
        backend = int(await self._admin.fetchval("SELECT pg_backend_pid()"))
        postmaster = _parent(backend)
        rows = await self._admin.fetch(
            "SELECT pid, backend_type, application_name FROM pg_stat_activity"
        )
        clients = {
            r["pid"]: r["application_name"] for r in rows if r["backend_type"] == "client backend"
        }
        ours: dict[int, int] = {postmaster: ticks(postmaster)}
        foreign = set()
        for pid in _children(postmaster):
            if pid in clients and clients[pid] != self._application:
                if pid != backend:
                    foreign.add(pid)
                continue
            ours[pid] = ticks(pid)
        return PgSample(ours, frozenset(foreign))


def pg_seconds(before: PgSample, after: PgSample) -> float:
    """CPU seconds between two samples; a process that started meanwhile counts from 0."""
    return sum(t - before.ticks.get(pid, 0) for pid, t in after.ticks.items()) / TICK
