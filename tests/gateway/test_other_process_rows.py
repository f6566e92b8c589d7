"""PostgreSQL: how `gateway serve` learns of inbox rows another process committed.

They are that process's to answer: ``watch_work`` hands their sessions to ``Dispatcher.heard``
(a lane here only after a grace, if they are still pending), never to ``Dispatcher.wake``
(a lane at once, racing the writer for every turn). docs/deployment.md, "Wake-ups".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import pytest

from tests.pg import fresh_schema
from tests.store.pipeline import inbox_of, message, sid
from webhook_bot_gateway.gateway._pipeline._dispatcher import Dispatcher
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.store import open_store

from .ingest_helpers import settings

WAIT = 10.0  # seconds a notification may take before the test fails


@pytest.fixture
async def store_url() -> AsyncIterator[str]:
    async with fresh_schema() as url:  # skipped without GATEWAY_TEST_POSTGRES_URL
        yield url


async def test_another_processs_inbox_rows_are_heard_not_woken(
    store_url: str, aiohttp_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heard: asyncio.Queue[tuple[str, frozenset[str]]] = asyncio.Queue()
    woken: set[str] = set()
    hear, wake = Dispatcher.heard, Dispatcher.wake

    def heard_spy(self: Dispatcher, session_ids: Iterable[str]) -> None:
        ids = list(session_ids)
        for one in ids:
            heard.put_nowait((one, frozenset(woken)))  # what had been woken by then
        hear(self, ids)

    def wake_spy(self: Dispatcher, session_ids: Iterable[str]) -> None:
        ids = list(session_ids)
        woken.update(ids)
        wake(self, ids)

    monkeypatch.setattr(Dispatcher, "heard", heard_spy)
    monkeypatch.setattr(Dispatcher, "wake", wake_spy)
    await aiohttp_client(build_app(settings(tmp_path / "unused.db", store={"url": store_url})))
    other = await open_store(store_url)  # another process's store: another owner
    try:
        await inbox_of(other, message("other-1", "k-other-1"))
        while True:
            session_id, woken_before = await asyncio.wait_for(heard.get(), WAIT)
            if session_id == sid("other-1"):
                break
    finally:
        await other.aclose()
    assert sid("other-1") not in woken_before
