"""The real ``gateway serve`` with its ``openai`` model behind a proxy that refuses, quoting the
request's headers (the API key with them): the failed turns are dead-lettered, and the key is in
none of what the gateway keeps or shows of them (the inbox error in SQLite, the dead letters
API, the log), while what a JSON refusal said is kept."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
from pytest_aiohttp import AiohttpServer

from tests.openai_strict import StrictOpenAI

from .conftest import Platforms
from .gateway_proc import BOT, Gateway, config_text, eventually, free_port
from .webhooks import post_until_ok, telegram_text

KEY = "sk-SECRETKEY-walk-1234567890"
CHAT = 4343
APOLOGY = "Sorry, that went wrong."
PROXY_PAGE = (
    f"<html><body>Forbidden by proxy. Request headers: Authorization: Bearer {KEY}</body></html>"
).encode()
# A provider that quotes the key whole in its refusal (OpenAI masks it: sk-SECR****7890).
KEY_REFUSED = {
    "error": {
        "message": f"Incorrect API key provided: {KEY}. Check it in your account settings.",
        "type": "invalid_request_error",
        "code": "invalid_api_key",
    }
}
AGENTS = """
[agents]
starting_agent = "bot"

[agents.models.fake]
base_url = "{base_url}/v1"
model = "fake-model"
api_key_env = "OPENAI_API_KEY"
max_retries = 0

[[agents.list]]
name = "bot"
instructions = "You help."
model = "fake"
"""


async def test_e2e_a_model_refusal_quoting_the_key_is_kept_nowhere_with_it(
    platforms: Platforms,
    aiohttp_server: AiohttpServer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    api = StrictOpenAI()
    # each message: refused as such (a 4xx), so dead-lettered at once, not tried again
    api.answer(PROXY_PAGE, status=403, **{"Content-Type": "text/html"})
    api.answer(KEY_REFUSED, status=401)
    server = await aiohttp_server(api.app(), host="127.0.0.1")
    port, db = free_port(), tmp_path / "gateway.db"
    dispatcher = {
        "max_attempts": 2,
        "retry_base_seconds": 0.05,
        "dead_letter_handoff": "",  # no person to hand to: the apology that promises none
        "apology_no_person": APOLOGY,
    }
    text = config_text(
        port=port,
        db=db,
        telegram_url=platforms.telegram_url,
        graph_url=platforms.graph_url,
        agents=AGENTS.format(base_url=str(server.make_url("")).rstrip("/")),
        sections={"dispatcher": dispatcher, "logging": {"level": "DEBUG"}},
    )
    gateway = Gateway(tmp_path, text, port, db, env={"OPENAI_API_KEY": KEY})
    await gateway.start()
    try:
        for update_id, words in ((1, "first"), (2, "second")):
            await post_until_ok(http, gateway.url, telegram_text(update_id, CHAT, words, bot=BOT))
            await eventually(
                lambda n=update_id: platforms.telegram.texts(str(CHAT)).count(APOLOGY) == n,
                f"the apology for message {update_id}",
                seconds=30,
            )
        letters = await gateway.admin(http, "/api/deadletters")
    finally:
        await gateway.stop()
    assert [h["Authorization"] for h in api.headers] == [f"Bearer {KEY}"] * 2  # sent, and echoed
    errors = sorted(row["error"] for row in letters["inbox"])
    assert errors == [
        "ModelBackendError: model backend 'fake': HTTP 401: model said: Incorrect API key"
        " provided: <redacted>. Check it in your account settings. (code invalid_api_key,"
        " type invalid_request_error)",
        "ModelBackendError: model backend 'fake': HTTP 403 (content-type 'text/html',"
        f" {len(PROXY_PAGE)} bytes)",
    ]
    stored = gateway.query("SELECT error FROM inbox ORDER BY id")
    assert sorted(error for (error,) in stored) == errors
    assert KEY not in json.dumps(letters)
    log = gateway.log_path.read_text(encoding="utf-8")
    assert "HTTP 403 (content-type 'text/html'" in log  # the failed turns were logged...
    assert KEY not in log  # ...without the key, DEBUG lines too
    files = {name: tmp_path / name for name in ("gateway.db", "gateway.db-wal")}
    for name, path in files.items():  # the database and its WAL, as they are on disk
        assert not path.exists() or KEY.encode() not in path.read_bytes(), name
