"""Fixtures shared by the gateway's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.pg import fresh_schema


@pytest.fixture(params=["sqlite", "postgres"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The url of a fresh store on each backend: a SQLite file, a new PostgreSQL schema
    (skipped without a server; see tests/pg.py). A module may define its own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gateway.db'}"
        return
    async with fresh_schema() as url:
        yield url
