"""A fresh PostgreSQL schema per test, on the server ``GATEWAY_TEST_POSTGRES_URL`` names.

``.ci/run`` sets the variable (and starts the local server if it is down); without it the
PostgreSQL cases are skipped, with the reason shown.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import asyncpg
import pytest

URL_VARIABLE = "GATEWAY_TEST_POSTGRES_URL"


def server_url() -> str:
    """The test server's url, or skip the test."""
    url = os.environ.get(URL_VARIABLE, "")
    if not url:
        pytest.skip(f"{URL_VARIABLE} is not set: no PostgreSQL to test against")
    return url


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
