"""CONTRACT.md's ``/ws`` frames of a handoff, in-process: the whole gateway (pipeline, the demo
agents of config.example.toml) on a real SQLite file, driven through the socket."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.e2e.ws_client import Frame, WebClient, is_turn_end
from webhook_bot_gateway.gateway.app import build_app

from .ingest_helpers import settings

Client = TestClient[web.Request, web.Application]
HELP = "Hello! I can help with bills, invoices, refunds and payments, or pass you to a person."
BILLING = "Billing here. Send me an invoice number such as INV-1001, or say menu to go back."


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path) -> Client:
    app = build_app(settings(tmp_path / "gateway.db", media={"root": str(tmp_path / "media")}))
    made: Client = await aiohttp_client(app)
    return made


async def chat(client: Client, *texts: str) -> list[list[Frame]]:
    """A new web session that says each of ``texts``: the frames of each turn, ack excluded."""
    turns = []
    async with client.ws_connect("/ws") as ws:
        socket = WebClient(ws)
        await socket.next()
        for n, text in enumerate(texts):
            await socket.say(text, f"c{n}")
            turns.append(await socket.until(is_turn_end, "turn end"))
    return turns


def replies(frames: list[Frame]) -> list[tuple[str, str]]:
    """(agent, text) of the assistant's ``message`` frames."""
    return [
        (f["data"]["agent"], f["data"]["text"])
        for f in frames
        if f["type"] == "message" and f["data"]["role"] == "assistant"
    ]


@pytest.mark.parametrize("text", ["my invoice please", "a question about my bill"])
async def test_ws_handoff_sends_agent_changed_and_each_reply_names_its_agent(
    client: Client, text: str
) -> None:
    before, after = await chat(client, "hello", text)
    assert replies(before) == [("triage", HELP)]
    assert [f for f in before if f["type"] == "agent_changed"] == []
    [changed] = [f for f in after if f["type"] == "agent_changed"]
    assert (changed["data"]["from"], changed["data"]["to"]) == ("triage", "billing")
    assert replies(after) == [("billing", BILLING)]
    [reply] = [f for f in after if f["type"] == "message" and f["data"]["role"] == "assistant"]
    assert changed["seq"] < reply["seq"]  # told of the change before billing's answer


async def test_ws_every_message_frame_carries_role_text_agent_and_attachments(
    client: Client,
) -> None:
    [frames] = await chat(client, "my invoice please")
    messages = [f["data"] for f in frames if f["type"] == "message"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    for data in messages:
        assert {"role", "text", "agent", "attachments"} <= set(data), data
