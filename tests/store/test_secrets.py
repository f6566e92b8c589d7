"""``Store.secret``: a random key of the database, made at its first use, the same for every
store on the database and after a reopen, one per name."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from webhook_bot_gateway.store import Store

from .conftest import SHARED, Backend, Raw


async def test_secret_is_32_random_bytes_kept_per_name(store: Store) -> None:
    first = await store.secret("web_sessions")
    assert len(first) == 32
    assert await store.secret("web_sessions") == first
    other = await store.secret("something_else")
    assert len(other) == 32
    assert other != first


@SHARED
async def test_secret_is_shared_by_every_store_on_the_database(
    store: Store, backend: Backend, raw: Raw
) -> None:
    async with backend.store() as other, backend.store() as third:
        # Two stores making it at once get one value: the first insert wins, both read it.
        made = await asyncio.gather(other.secret("shared"), third.secret("shared"))
        assert made[0] == made[1]
        assert await store.secret("shared") == made[0]
    assert await raw.rows("SELECT name, value FROM secrets") == [("shared", made[0].hex())]


@pytest.mark.parametrize("name", ["", "Web", "web-sessions", "a" * 65, None, 3, "web\x00"])
async def test_secret_refuses_a_bad_name_and_writes_nothing(
    store: Store, raw: Raw, name: Any
) -> None:
    with pytest.raises(ValueError, match="name must be"):
        await store.secret(name)
    assert await raw.rows("SELECT count(*) FROM secrets") == [(0,)]
