"""A fresh PostgreSQL schema per test, on the server ``GATEWAY_TEST_POSTGRES_URL`` names.

``.ci/run`` sets the variable (and starts the local server if it is down); without it the
PostgreSQL cases are skipped, with the reason shown.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

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


@asynccontextmanager
async def fresh_schema() -> AsyncIterator[str]:
    """A url whose tables live in a new, empty schema, dropped afterwards."""
    url = server_url()
    schema = f"t_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f"CREATE SCHEMA {schema}")
        yield with_search_path(url, schema)
    finally:
        await admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await admin.close()
