"""``gateway serve`` migrates the store it is given (CONTRACT.md) and carries on from it: a file
of the first schema, left by an old version, is brought to the latest at start, its session
keeps its history and its active agent, and a new message of that chat is answered in it."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.store.test_schema import SID, make_v1_file
from webhook_bot_gateway.store.sqlite._schema import LATEST

from .conftest import MakeGateway, Platforms
from .gateway_proc import eventually
from .test_roundtrip import HELP, user_texts
from .webhooks import post, telegram_text


async def test_serve_migrates_a_first_schema_file_and_answers_its_session(
    tmp_path: Path, make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    make_v1_file(tmp_path / "gateway.db")  # where make_gateway's config puts the store
    gateway = await make_gateway()
    assert gateway.query("PRAGMA user_version") == [(LATEST,)]
    assert await post(http, gateway.url, telegram_text(7, 1, "hello")) == 200
    await eventually(lambda: platforms.telegram.texts("1") == [HELP], "the reply")
    assert user_texts(gateway, SID) == ["hi", "hello"]  # the old history, then the new message
    session = await gateway.admin(http, f"/api/sessions/{SID}")
    assert (session["active_agent"], session["metadata"]["lang"]) == ("triage", "en")
    assert await gateway.stop() == 0
