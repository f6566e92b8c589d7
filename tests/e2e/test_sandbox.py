"""The sandbox as ``make run`` serves it: config.example.toml, unchanged, on a free port; the
simulator's deliveries go through the real webhook routes and every reply reaches the fake APIs.
The admin token is the one the first start made in data/admin-token, as a newcomer finds it."""

from __future__ import annotations

import asyncio
import re
import stat
import time
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from webhook_bot_gateway.gateway._sandbox import sandbox_warnings
from webhook_bot_gateway.gateway.config import parse_settings

from .gateway_proc import REPO, Gateway, eventually, free_port
from .test_roundtrip import BILLING, HELP

WA_USER = "4915112345678"
NUMBER = "100000000000001"
DEMO_BOT_TOKEN = "123456:demo-token-not-valid"  # config.example.toml's fallback


class Demo(Gateway):
    """The gateway of ``make run``; no GATEWAY_ADMIN_TOKEN, so its token is in a file."""

    @property
    def token_file(self) -> Path:
        return self.directory / "data" / "admin-token"

    @property
    def auth(self) -> dict[str, str]:
        token = self.token_file.read_text(encoding="utf-8").strip()
        return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def demo(tmp_path: Path) -> AsyncIterator[Demo]:
    """``gateway serve --config config.example.toml`` in an empty directory, as ``make run``."""
    port = free_port()
    text = (REPO / "config.example.toml").read_text(encoding="utf-8")
    env = {"GATEWAY_PORT": str(port)}
    gateway = Demo(tmp_path, text, port, tmp_path / "data" / "gateway.db", env)
    await gateway.start()
    yield gateway
    await gateway.ensure_stopped()


async def simulate(http: aiohttp.ClientSession, gateway: Demo, **body: Any) -> Any:
    url = f"{gateway.url}/sandbox/api/simulate"
    async with http.post(url, json=body, headers=gateway.auth) as r:
        assert r.status == 200, await r.text()
        answer = await r.json()
    assert answer["webhook_status"] == 200
    return answer


async def sent_texts(http: aiohttp.ClientSession, gateway: Demo, channel: str, chat: str) -> Any:
    query = {"channel": channel, "chat_id": chat}
    url = f"{gateway.url}/sandbox/api/sent"
    async with http.get(url, params=query, headers=gateway.auth) as r:
        assert r.status == 200
        calls = (await r.json())["sent"]
    return [c for c in calls if c["method"] in ("sendMessage", "messages")]


async def test_make_run_prints_where_to_sign_in_and_its_new_token_once(
    demo: Demo, http: aiohttp.ClientSession
) -> None:
    await eventually(lambda: "Sandbox on: open" in demo.log(), "the banner")
    assert f"http://127.0.0.1:{demo.port}/" in demo.log()
    assert "change-me" not in demo.log()
    token = demo.token_file.read_text(encoding="utf-8").strip()
    assert len(token) >= 43
    assert stat.S_IMODE(demo.token_file.stat().st_mode) == 0o600
    assert f"stored in data/admin-token with mode 0600; printed this once): {token}" in demo.log()
    async with http.get(f"{demo.url}/api/sessions", headers=demo.auth) as r:
        assert r.status == 200
    for public in ("change-me", "demo-secret", ""):
        async with http.get(
            f"{demo.url}/api/sessions", headers={"Authorization": f"Bearer {public}"}
        ) as r:
            assert r.status == 401, public
    assert await demo.stop() == 0
    await demo.start()  # the same token, not printed again
    assert demo.token_file.read_text(encoding="utf-8").strip() == token
    assert demo.log().count(token) == 1


async def test_telegram_round_trip_with_a_button_press(
    demo: Demo, http: aiohttp.ClientSession
) -> None:
    await simulate(http, demo, channel="telegram", chat_id="42", text="hello")
    await eventually(
        lambda: _has(http, demo, "telegram", "42", HELP), "the help reply at the fake Bot API"
    )
    [first] = await sent_texts(http, demo, "telegram", "42")
    assert [b["title"] for b in first["buttons"]] == ["Billing", "Talk to a person"]
    await simulate(http, demo, channel="telegram", chat_id="42", button="Billing")
    await eventually(lambda: _has(http, demo, "telegram", "42", BILLING), "billing's reply")
    async with http.get(f"{demo.url}/api/sessions/telegram-support-42", headers=demo.auth) as r:
        assert (await r.json())["active_agent"] == "billing"
    # The fake Bot API records a reply before the sender's commit marks its row sent.
    await eventually(
        lambda: outbox_states(demo, "telegram-support-42") == {"sent"}, "every reply marked sent"
    )


async def test_whatsapp_invoice_status_and_image(demo: Demo, http: aiohttp.ClientSession) -> None:
    sid = f"whatsapp-{NUMBER}-{WA_USER}"
    await simulate(http, demo, channel="whatsapp", chat_id=WA_USER, text="my invoice INV-1001")
    invoice = "Invoice INV-1001: 49.00 EUR, paid, due 2024-05-01."
    await eventually(lambda: _has(http, demo, "whatsapp", WA_USER, invoice), "the invoice")
    [reply] = await sent_texts(http, demo, "whatsapp", WA_USER)
    # A status names the reply by the id the sender records with its row once the fake Graph
    # API answered; a status for an id not recorded yet would be dropped.
    await eventually(lambda: outbox_states(demo, sid) == {"sent"}, "the reply marked sent")
    await simulate(
        http,
        demo,
        channel="whatsapp",
        chat_id=WA_USER,
        status={"message_id": reply["platform_id"], "state": "read"},
    )
    await eventually(
        lambda: (
            demo.query("SELECT delivery_state FROM outbox WHERE session_id = ?", sid) == [("read",)]
        ),
        "the read status on the reply's row",
    )
    await simulate(http, demo, channel="whatsapp", chat_id=WA_USER, image={"caption": "receipt"})
    await eventually(
        lambda: (
            demo.query("SELECT state, content_type FROM attachments WHERE session_id = ?", sid)
            == [("ready", "image/png")]
        ),
        "the image fetched from the sandbox's Graph API",
    )
    [(name,)] = demo.query("SELECT id FROM attachments WHERE session_id = ?", sid)
    assert (demo.directory / "data" / "media" / sid / name).read_bytes().startswith(b"\x89PNG")


async def test_simulate_refusals_name_the_problem(demo: Demo, http: aiohttp.ClientSession) -> None:
    cases: list[tuple[dict[str, Any], int, str]] = [
        (
            {"channel": "telegram", "chat_id": "42", "text": "a", "button": "b"},
            400,
            "invalid_field",
        ),
        ({"channel": "telegram", "chat_id": "42"}, 400, "invalid_field"),
        ({"channel": "sms", "chat_id": "42", "text": "a"}, 400, "invalid_field"),
        ({"channel": "telegram", "chat_id": "x", "text": "a"}, 400, "invalid_field"),
        ({"channel": "telegram", "chat_id": "42", "button": "nowhere"}, 404, "unknown_button"),
        (
            {
                "channel": "telegram",
                "chat_id": "42",
                "status": {"message_id": "1", "state": "read"},
            },
            400,
            "invalid_field",
        ),
        (
            {"channel": "telegram", "chat_id": "42", "text": "a", "account": "x"},
            400,
            "unknown_account",
        ),
    ]
    for body, status, code in cases:
        url = f"{demo.url}/sandbox/api/simulate"
        async with http.post(url, json=body, headers=demo.auth) as r:
            assert r.status == status, (body, await r.text())
            assert (await r.json())["error"]["code"] == code
    async with http.post(f"{demo.url}/sandbox/api/simulate", json=cases[0][0]) as r:
        assert r.status == 401
    assert demo.query("SELECT count(*) FROM sessions") == [(0,)]


async def test_fake_apis_refuse_a_wrong_token_as_the_platforms_do(
    demo: Demo, http: aiohttp.ClientSession
) -> None:
    async with http.post(f"{demo.url}/sandbox/telegram/bot1:wrong/sendMessage", data={}) as r:
        assert (r.status, (await r.json())["description"]) == (401, "Unauthorized")
    async with http.get(f"{demo.url}/sandbox/telegram/bot1:wrong/getMe") as r:
        assert r.status == 401
    # A user's first curl: Telegram answers getMe by GET too (config.example.toml's token).
    async with http.get(f"{demo.url}/sandbox/telegram/bot{DEMO_BOT_TOKEN}/getMe") as r:
        assert r.status == 200
        assert (await r.json())["result"]["username"] == "support_bot"
    url = f"{demo.url}/sandbox/graph/v21.0/{NUMBER}/messages"
    async with http.post(url, json={}, headers={"Authorization": "Bearer nope"}) as r:
        assert r.status == 401
        assert (await r.json())["error"]["code"] == 190


def test_the_sandbox_says_when_it_is_misplaced() -> None:
    raw = tomllib.loads((REPO / "config.example.toml").read_text(encoding="utf-8"))
    assert sandbox_warnings(parse_settings(raw, {})) == []
    raw["server"]["host"] = "0.0.0.0"  # where the example's public demo secrets are refused:
    raw["telegram"]["bots"][0]["secret_token"] = "an-own-telegram-webhook-secret"
    raw["whatsapp"] |= {"app_secret": "an-own-app-secret", "verify_token": "an-own-verify-token"}
    raw["telegram"]["bots"][0]["token"] = "123456789:" + "A" * 35
    raw["whatsapp"]["numbers"][0]["access_token"] = "EAAG" + "x" * 100
    raw["whatsapp"]["graph_base_url"] = "https://graph.facebook.com"
    warnings = sandbox_warnings(parse_settings(raw, {}))
    assert len(warnings) == 4
    assert "not a loopback address" in warnings[0]
    raw["sandbox"]["enabled"] = False
    raw["telegram"]["api_base_url"] = "https://api.telegram.org"  # the sandbox's: refused now
    assert sandbox_warnings(parse_settings(raw, {})) == []


def test_a_channel_without_accounts_is_not_warned_about_where_its_api_url_points() -> None:
    """Its API is never called; the warning named a URL nothing uses, as if it were wrong."""
    raw = tomllib.loads((REPO / "config.example.toml").read_text(encoding="utf-8"))
    raw["telegram"] = {"api_base_url": "https://api.telegram.org"}  # no bots: WhatsApp only
    assert sandbox_warnings(parse_settings(raw, {})) == []
    raw["whatsapp"]["graph_base_url"] = "https://graph.facebook.com"
    [warning] = sandbox_warnings(parse_settings(raw, {}))
    assert warning.startswith("the sandbox is enabled but whatsapp.graph_base_url does not point")


def outbox_states(gateway: Demo, session_id: str) -> set[str]:
    rows = gateway.query("SELECT state FROM outbox WHERE session_id = ?", session_id)
    return {state for (state,) in rows}


async def _has(
    http: aiohttp.ClientSession, gateway: Demo, channel: str, chat: str, text: str
) -> bool:
    return any(c["text"] == text for c in await sent_texts(http, gateway, channel, chat))


async def test_sigterm_closes_sockets_and_long_polls_instead_of_waiting_for_them(
    demo: Demo, http: aiohttp.ClientSession
) -> None:
    url = f"{demo.url}/sandbox/api/sent?wait=25"
    poll = asyncio.create_task(http.get(url, headers=demo.auth))  # sent before the socket connects
    ws = await http.ws_connect(f"{demo.url}/ws")
    assert (await ws.receive_json())["type"] == "connection"
    await eventually(lambda: "attached" in demo.log(), "the socket's attach in the log")
    stopping = asyncio.create_task(demo.stop())
    closing = await ws.receive(timeout=20)
    assert (closing.type, closing.data) == (aiohttp.WSMsgType.CLOSE, 1001)
    answer = await poll
    assert (answer.status, await answer.json()) == (200, {"sent": []})
    assert await stopping == 0


async def test_a_group_command_for_the_bot_by_name_is_answered(
    demo: Demo, http: aiohttp.ClientSession
) -> None:
    """The bot's getMe asked the sandbox before the server listened: it failed on every start,
    and ``/start@support_bot`` or ``@support_bot hi`` in a group were ignored."""
    await eventually(lambda: "bot support: getMe" in demo.log(), "the bot's getMe in the log")
    assert "getMe failed" not in demo.log()
    assert "bot support: getMe answered: @support_bot" in demo.log()
    group = {"id": -1001234567890, "type": "supergroup", "title": "Support group"}
    sender = {"id": 4242, "is_bot": False, "first_name": "Ann"}
    for update_id, text, kind in [
        (1, "/start@support_bot", "bot_command"),
        (2, "@support_bot hi", "mention"),
    ]:
        word = text.split()[0]
        message = {
            "message_id": 10 + update_id,
            "date": int(time.time()),
            "chat": group,
            "from": sender,
            "text": text,
            "entities": [{"type": kind, "offset": 0, "length": len(word)}],
        }
        headers = {"X-Telegram-Bot-Api-Secret-Token": "demo-secret"}  # config.example.toml's
        body = {"update_id": update_id, "message": message}
        async with http.post(
            f"{demo.url}/webhooks/telegram/support", json=body, headers=headers
        ) as r:
            assert r.status == 200
    chat = str(group["id"])
    await eventually(
        lambda: _replies(http, demo, chat, 2), "two replies in the group at the fake Bot API"
    )
    async with http.get(f"{demo.url}/metrics") as r:
        assert (
            'gateway_updates_ignored_total{channel="telegram",type="message"}' not in await r.text()
        )


async def _replies(http: aiohttp.ClientSession, gateway: Demo, chat: str, count: int) -> bool:
    return len(await sent_texts(http, gateway, "telegram", chat)) >= count


class OnPortZero(Demo):
    """``server.port = 0``: the system picks the port; the start line names it."""

    async def _ready(self) -> bool:
        if not self.port:
            found = re.search(r"Running on http://127\.0\.0\.1:(\d+)", self.log())
            if found is None:
                assert self.process is not None
                assert self.process.returncode is None, self.log()
                return False
            self.port = int(found.group(1))
            self.url = f"http://127.0.0.1:{self.port}"
        return await super()._ready()

    async def start(self) -> None:
        self.port, self.url = 0, ""
        await super().start()


async def test_on_port_zero_the_sandbox_follows_the_port_bound(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """The sandbox's fake APIs are this gateway's own URLs: made with port 0, every reply went
    to http://127.0.0.1:0/sandbox/... and failed."""
    text = (REPO / "config.example.toml").read_text(encoding="utf-8")
    gateway = OnPortZero(tmp_path, text, 0, tmp_path / "data" / "gateway.db", {"GATEWAY_PORT": "0"})
    try:
        await gateway.start()
        assert gateway.port > 0
        assert f"Sandbox on: open http://127.0.0.1:{gateway.port}/" in gateway.log()
        await simulate(http, gateway, channel="telegram", chat_id="42", text="hello")

        async def answered() -> bool:
            return len(await sent_texts(http, gateway, "telegram", "42")) == 1

        await eventually(answered, "the reply at the sandbox's fake Bot API")
    finally:
        await gateway.ensure_stopped()


async def test_the_sandbox_on_ipv6_loopback_answers_and_its_banner_url_opens(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """With ``server.host = "::1"`` (a loopback address, which the sandbox asks for) every
    simulated message was 502 ``webhook_unreachable``: the simulator posted to 127.0.0.1. The
    banner said ``http://::1:PORT/``, which no browser opens."""
    port = free_port()
    text = (REPO / "config.example.toml").read_text(encoding="utf-8")
    text = text.replace('host = "127.0.0.1"', 'host = "::1"', 1)
    demo = Demo(tmp_path, text, port, tmp_path / "data" / "gateway.db", {"GATEWAY_PORT": str(port)})
    demo.url = f"http://[::1]:{port}"
    await demo.start()
    try:
        await eventually(lambda: "Sandbox on: open" in demo.log(), "the banner")
        assert f"Sandbox on: open http://[::1]:{port}/ " in demo.log()
        await simulate(http, demo, channel="telegram", chat_id="42", text="hello")
        await eventually(lambda: _has(http, demo, "telegram", "42", HELP), "the help reply")
    finally:
        await demo.ensure_stopped()
