"""A fresh PostgreSQL schema per test, on the server ``GATEWAY_TEST_POSTGRES_URL`` names.

``.ci/run`` sets the variable (and starts the local server if it is down). Without it the
server on 127.0.0.1:5432 is used when one answers there (database ``postgres``, the user libpq
would take: ``PGUSER`` or the login name), as CONTRACT.md says; else the PostgreSQL cases are
skipped, with the reason shown.
"""

from __future__ import annotations

import asyncio
import functools
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager

import asyncpg
import pytest

URL_VARIABLE = "GATEWAY_TEST_POSTGRES_URL"
LOCAL_URL = "postgresql://127.0.0.1:5432/postgres"


def server_url() -> str:
    """The test server's url, or skip the test."""
    url = os.environ.get(URL_VARIABLE, "") or local_server()
    if not url:
        pytest.skip(
            f"{URL_VARIABLE} is not set and no PostgreSQL answers on 127.0.0.1:5432: "
            "no PostgreSQL to test against"
        )
    return url


@functools.cache
def local_server() -> str:
    """LOCAL_URL when a connection to it succeeds (asked once per test run), else ""."""

    async def connects() -> bool:
        try:
            conn = await asyncpg.connect(LOCAL_URL, timeout=3)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return False
        await conn.close()
        return True

    with ThreadPoolExecutor(1) as pool:  # callers may be inside a running event loop
        return LOCAL_URL if pool.submit(asyncio.run, connects()).result() else ""


def with_search_path(url: str, schema: str) -> str:
    """``url`` whose connections use ``schema`` (asyncpg passes query keys as settings)."""
    return f"{url}{'&' if '?' in url else '?'}search_path={schema}"


def new_schema_name() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


@asynccontextmanager
async def fresh_schema() -> AsyncIterator[str]:
    """A url whose tables live in a new, empty schema, dropped afterwards."""
    url = server_url()
    schema = new_schema_name()
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f"CREATE SCHEMA {schema}")
        yield with_search_path(url, schema)
    finally:
        await admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await admin.close()


async def _run(url: str, statement: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextmanager
def fresh_schema_sync() -> Iterator[str]:
    """``fresh_schema`` for a synchronous test, e.g. one of Hypothesis that runs an event loop
    per example: the schema outlives each loop."""
    url = server_url()
    schema = new_schema_name()
    asyncio.run(_run(url, f"CREATE SCHEMA {schema}"))
    try:
        yield with_search_path(url, schema)
    finally:
        asyncio.run(_run(url, f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
