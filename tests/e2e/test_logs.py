"""The log of the real ``gateway serve`` as JSON lines (docs/logging.md): one message followed
from its webhook (channel, dedup key) to its turn (session id, inbox id, outcome) and its reply
(session id, outbox id); no message
text or file name in a line at INFO or above, though the log runs at DEBUG and holds the text
there (PTB logs each Bot API call's parameters); a secret in a message in no line at all."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp

from .conftest import MakeGateway, Platforms
from .gateway_proc import BOT_TOKEN, Gateway, eventually
from .test_media import PDF, media
from .test_roundtrip import telegram_session
from .webhooks import Delivery, post, telegram_document, telegram_text

Line = dict[str, Any]

MARKER = "quokka-7f3e-marker"  # a text no log line may hold at INFO or above
FILE_NAME = "payslip-of-quokka-91.pdf"
CHAT, DOC_CHAT = 7001, 7002
QUIET = {"DEBUG"}  # the only level a message text may be logged at
# triage hands a refund to echo, which repeats the user's words: the reply carries the text.
AGENTS = """
[agents]
starting_agent = "triage"

[[agents.list]]
name = "triage"
model = "rules"
handoffs = ["echo"]

[[agents.list.rules]]
match = 'refund'
handoff = "echo"

[[agents.list.rules]]
reply = "Hello"

[[agents.list]]
name = "echo"
model = "rules"

[[agents.list.rules]]
match = '(?P<said>.+)'
reply = "heard: {said}"
"""


def json_lines(gateway: Gateway) -> list[Line]:
    """Every line the process wrote, each parsed (a line that is not JSON fails the test)."""
    text = gateway.log_path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if not line.startswith("--- start")]


def turn_ends(gateway: Gateway, session_id: str) -> list[Line]:
    return [
        line
        for line in json_lines(gateway)
        if line.get("session_id") == session_id and "outcome" in line
    ]


def turn_ended(gateway: Gateway, session_id: str) -> bool:
    return bool(turn_ends(gateway, session_id))


def inbox_row(gateway: Gateway, session_id: str) -> tuple[int, str]:
    [(row_id, key)] = gateway.query(
        "SELECT id, dedup_key FROM inbox WHERE session_id = ?", session_id
    )
    return row_id, key


def forged(delivery: Delivery) -> Delivery:
    """The delivery with a wrong secret token header: refused with 401."""
    headers = {**delivery.headers, "X-Telegram-Bot-Api-Secret-Token": "not-the-secret"}
    return Delivery(delivery.path, delivery.body, headers)


async def run_one_turn(gateway: Gateway, platforms: Platforms, http: aiohttp.ClientSession) -> None:
    """A message with the marker and a secret that hands off to echo, whose reply's first send
    fails; its redelivery, a forged copy, and a document with a telling file name; until both
    turns have ended."""
    platforms.telegram.fail(str(CHAT), "500")
    message = telegram_text(9001, CHAT, f"refund please {MARKER} {BOT_TOKEN}")
    assert await post(http, gateway.url, message) == 200
    assert await post(http, gateway.url, forged(message)) == 401
    platforms.telegram.add_media("tg-doc", PDF, file_path="documents/file_9.pdf")
    document = telegram_document(9002, DOC_CHAT, "tg-doc", FILE_NAME, "application/pdf", len(PDF))
    assert await post(http, gateway.url, document) == 200
    await eventually(lambda: len(platforms.telegram.texts(str(CHAT))) == 1, "the reply")
    assert await post(http, gateway.url, message) == 200  # a redelivery: a duplicate
    for chat in (CHAT, DOC_CHAT):
        await eventually(partial(turn_ended, gateway, telegram_session(chat)), f"turn of {chat}")


async def test_json_log_follows_a_message_from_webhook_to_turn_with_no_text_at_info(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    sections = {"logging": {"level": "DEBUG", "format": "json"}, **media(tmp_path)}
    gateway = await make_gateway(AGENTS, sections=sections)
    await run_one_turn(gateway, platforms, http)
    await gateway.stop()
    lines = json_lines(gateway)
    sid = telegram_session(CHAT)
    inbox_id, key = inbox_row(gateway, sid)

    # The webhook: every line of gateway.webhooks names its channel; once the key is known,
    # the key too: stored, then the redelivery found a duplicate.
    hooks = [line for line in lines if line["logger"] == "gateway.webhooks"]
    assert hooks
    assert all(line["channel"] == "telegram" for line in hooks), hooks
    keyed = [line["message"] for line in hooks if line.get("dedup_keys") == [key]]
    assert any("stored" in message for message in keyed), hooks
    assert any("duplicate" in message for message in keyed), hooks
    [refused] = [line for line in hooks if "refused" in line["message"]]
    assert "dedup_keys" not in refused  # a forged delivery is not parsed

    # The turn: a line of it found by its content (the runner's handoff names the session)
    # carries the session, the inbox row and its key; one line ends it with the outcome.
    # (The reply's lines, written by the sender after the turn, name the outbox row instead.)
    about = [line for line in lines if sid in line["message"] or line.get("session_id") == sid]
    turn = [line for line in about if "outbox_id" not in line]
    assert any("handoff" in line["message"] for line in turn), turn
    for line in turn:
        assert (line["session_id"], line["inbox_ids"], line["dedup_keys"]) == (
            sid,
            [inbox_id],
            [key],
        ), line
    [end] = turn_ends(gateway, sid)
    assert (end["level"], end["outcome"]) == ("INFO", "committed"), end
    assert end["duration_ms"] >= 0

    # The reply: the sender's retry line names the outbox row and its session.
    [(outbox_id,)] = gateway.query("SELECT id FROM outbox WHERE session_id = ?", sid)
    [retry] = [line for line in lines if "retry in" in line["message"]]
    assert (retry["session_id"], retry["outbox_id"]) == (sid, outbox_id), retry

    loud = [json.dumps(line) for line in lines if line["level"] not in QUIET]
    assert not [line for line in loud if MARKER in line or FILE_NAME in line]
    quiet = [line["message"] for line in lines if line["level"] in QUIET]
    echoed = [message for message in quiet if MARKER in message]
    assert echoed, quiet
    assert all("<redacted>" in message for message in echoed), echoed
    assert BOT_TOKEN not in gateway.log_path.read_text(encoding="utf-8")
