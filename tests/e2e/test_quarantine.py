"""The real ``gateway serve``: an authenticated delivery of a type it does not handle is kept
whole in quarantine and acknowledged (CONTRACT.md), and ``gateway quarantine list`` shows it."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import sys

import aiohttp

from .conftest import MakeGateway, Platforms
from .gateway_proc import APP_SECRET, NUMBER, Gateway, eventually
from .test_roundtrip import HELP
from .webhooks import Delivery, post, telegram_text, telegram_update


def whatsapp_change(field: str, value: dict[str, object]) -> Delivery:
    """A signed delivery of one change of webhook ``field`` (not ``messages``)."""
    envelope = {
        "object": "whatsapp_business_account",
        "entry": [{"id": "1", "changes": [{"field": field, "value": value}]}],
    }
    body = json.dumps(envelope).encode()
    signature = hmac.new(APP_SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {"Content-Type": "application/json", "X-Hub-Signature-256": f"sha256={signature}"}
    return Delivery("/webhooks/whatsapp", body, headers)


async def quarantine_list(gateway: Gateway) -> list[dict[str, object]]:
    """``gateway quarantine list`` on the gateway's own config, while it serves."""
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "webhook_bot_gateway", "quarantine", "list"),
        "--config",
        str(gateway.config_path),
        cwd=gateway.directory,
        env=gateway.environment(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    listed: list[dict[str, object]] = json.loads(out)["quarantine"]
    return listed


async def test_unhandled_types_are_quarantined_whole_and_acknowledged(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    poll = telegram_update(
        {
            "update_id": 9001,
            "poll": {
                "id": "5001",
                "question": "Lunch?",
                "options": [{"text": "yes", "voter_count": 1}, {"text": "no", "voter_count": 0}],
                "total_voter_count": 1,
                "is_closed": False,
                "is_anonymous": True,
                "type": "regular",
                "allows_multiple_answers": False,
            },
        }
    )
    account_update = whatsapp_change(
        "account_update", {"phone_number": NUMBER, "event": "VERIFIED_ACCOUNT"}
    )
    assert await post(http, gateway.url, poll) == 200
    assert await post(http, gateway.url, account_update) == 200

    rows = gateway.query("SELECT channel, body, reason FROM quarantine ORDER BY id")
    assert [(channel, bytes(body)) for channel, body, _ in rows] == [
        ("telegram", poll.body),
        ("whatsapp", account_update.body),
    ]
    assert "'poll' is not handled" in rows[0][2]
    assert rows[1][2] == "no usable part: a change: field account_update is not handled"
    assert gateway.query("SELECT count(*) FROM inbox") == [(0,)]

    listed = await quarantine_list(gateway)
    assert sorted(str(row["channel"]) for row in listed) == ["telegram", "whatsapp"]

    # The pipeline goes on: the next message of a handled type is answered.
    assert await post(http, gateway.url, telegram_text(9002, 777, "hello")) == 200
    await eventually(lambda: platforms.telegram.texts("777") == [HELP], "the reply")
