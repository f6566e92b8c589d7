"""The console's routes in-process, with the whole pipeline: the human queue, agents, cancel,
the live feed's ticket and frames, search, an operator's name, and the console's page."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.e2e.ws_client import WebClient, is_turn_end
from webhook_bot_gateway.gateway._keys import DISPATCHER, STORE
from webhook_bot_gateway.gateway.app import build_app

from .ingest_helpers import ADMIN_TOKEN, AUTH, settings

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path) -> Client:
    app = build_app(settings(tmp_path / "gateway.db", media={"root": str(tmp_path / "media")}))
    made: Client = await aiohttp_client(app)
    return made


async def web_turn(client: Client, text: str) -> str:
    """A web session that said ``text`` and got its answer; its id."""
    async with client.ws_connect("/ws") as ws:
        socket = WebClient(ws)
        await socket.next()
        await socket.say(text, "c1")
        await socket.until(is_turn_end, "turn end")
        return socket.session_id


async def json_of(response: aiohttp.ClientResponse, status: int) -> Any:
    assert response.status == status, await response.text()
    return await response.json()


async def test_home_redirects_to_the_console(client: Client) -> None:
    response = await client.get("/", allow_redirects=False)
    assert (response.status, response.headers["Location"]) == (302, "/console")


async def test_queue_lists_sessions_held_by_a_human_agent_oldest_first(client: Client) -> None:
    first = await web_turn(client, "I want to talk to a person")
    second = await web_turn(client, "operator please")
    await web_turn(client, "hello")  # stays with triage: not in the queue
    queue = (await json_of(await client.get("/api/queue", headers=AUTH), 200))["queue"]
    assert [entry["session_id"] for entry in queue] == [first, second]
    assert all(entry["active_agent"] == "human" for entry in queue)
    assert queue[0]["waiting_since"] <= queue[1]["waiting_since"]
    assert all(entry["waiting_seconds"] >= 0 for entry in queue)


async def test_queue_past_500_sessions_starts_with_the_one_waiting_longest(
    client: Client,
) -> None:
    store = client.app[STORE]
    for n in range(501):  # created in order: the first waits longest and was updated least
        await store.create_session("telegram", "support", f"{n:03d}", "human")
    page = await json_of(await client.get("/api/queue?limit=2", headers=AUTH), 200)
    assert page["total"] == 501
    ids = [entry["session_id"] for entry in page["queue"]]
    assert ids == ["telegram-support-000", "telegram-support-001"]
    last = await json_of(await client.get("/api/queue?limit=2&offset=500", headers=AUTH), 200)
    assert [entry["session_id"] for entry in last["queue"]] == ["telegram-support-500"]
    await json_of(await client.get("/api/queue?limit=0", headers=AUTH), 400)


async def test_queue_marks_a_session_whose_user_wrote_since_the_handoff(client: Client) -> None:
    sid = await web_turn(client, "a person please")
    [entry] = (await json_of(await client.get("/api/queue", headers=AUTH), 200))["queue"]
    assert entry["unanswered"] is False  # told that a person will answer
    async with client.ws_connect(f"/ws?session_id={sid}") as ws:
        socket = WebClient(ws)
        await socket.next()
        await socket.say("hello? anyone?", "c2")
        await socket.until(is_turn_end, "turn end")
    [entry] = (await json_of(await client.get("/api/queue", headers=AUTH), 200))["queue"]
    assert entry["unanswered"] is True


async def test_agents_are_listed_with_their_kind(client: Client) -> None:
    agents = (await json_of(await client.get("/api/agents", headers=AUTH), 200))["agents"]
    assert {a["name"]: a["kind"] for a in agents} == {
        "triage": "bot",
        "billing": "bot",
        "human": "human",
    }


async def test_search_finds_sessions_by_a_piece_of_the_chat_id(client: Client) -> None:
    sid = await web_turn(client, "hello")
    await web_turn(client, "hello again")
    piece = sid[4:12]
    found = await json_of(await client.get(f"/api/sessions?q={piece}", headers=AUTH), 200)
    assert [s["session_id"] for s in found["sessions"]] == [sid]
    assert found["total"] == 1
    none = await json_of(await client.get("/api/sessions?q=%25_", headers=AUTH), 200)
    assert none["total"] == 0  # LIKE's wildcards are matched as themselves


async def test_operator_reply_keeps_the_operators_name(client: Client) -> None:
    sid = await web_turn(client, "a person please")
    body = {"text": "Hi, Ann here.", "operator": "Ann"}
    answer = await json_of(
        await client.post(f"/api/sessions/{sid}/reply", json=body, headers=AUTH), 202
    )
    assert answer["message"]["data"] == {"operator": "Ann"}
    assert answer["message"]["role"] == "operator"
    events = await client.app[STORE].list_events(sid)
    [shown] = [e.detail for e in events if e.kind == "message" and e.detail["role"] == "operator"]
    assert (shown["text"], shown["operator"]) == ("Hi, Ann here.", "Ann")


async def test_cancel_without_a_running_turn_is_409_in_words(client: Client) -> None:
    sid = await web_turn(client, "hello")
    error = await json_of(await client.post(f"/api/sessions/{sid}/cancel", headers=AUTH), 409)
    assert error["error"]["code"] == "no_turn_running"
    missing = await client.post("/api/sessions/web-nobody/cancel", headers=AUTH)
    assert missing.status == 404


async def test_console_config_says_whether_the_sandbox_is_on(client: Client) -> None:
    config = await json_of(await client.get("/api/console/config", headers=AUTH), 200)
    assert config["sandbox"]["enabled"] is False
    assert config["sandbox"]["telegram"] == ["support", "sales"]
    assert (await client.get("/api/console/config")).status == 401


async def live(client: Client) -> aiohttp.ClientWebSocketResponse:
    ticket = await json_of(await client.post("/api/console/ticket", headers=AUTH), 200)
    assert ticket["expires_in"] > 0
    ws = await client.ws_connect("/console/live")
    await ws.send_json({"type": "auth", "ticket": ticket["ticket"]})
    assert await ws.receive_json(timeout=10) == {"type": "ready"}
    return ws


async def test_live_feed_needs_a_fresh_ticket_used_once(client: Client) -> None:
    ticket = (await json_of(await client.post("/api/console/ticket", headers=AUTH), 200))["ticket"]
    first = await client.ws_connect("/console/live")
    await first.send_json({"type": "auth", "ticket": ticket})
    assert (await first.receive_json(timeout=10))["type"] == "ready"
    await first.close()
    for offered in (ticket, ADMIN_TOKEN, "made-up"):  # used already; the token is not a ticket
        again = await client.ws_connect("/console/live")
        await again.send_json({"type": "auth", "ticket": offered})
        frame = await again.receive_json(timeout=10)
        assert frame["data"]["code"] == "unauthorized"
        assert (await again.receive(timeout=10)).type in (
            aiohttp.WSMsgType.CLOSE,
            aiohttp.WSMsgType.CLOSED,
        )
    assert (await client.post("/api/console/ticket")).status == 401


async def test_a_ticket_from_one_process_opens_the_live_feed_of_another(
    client: Client, aiohttp_client: Any, tmp_path: Path
) -> None:
    """Behind a load balancer the ticket's POST and the feed's handshake reach any process:
    the tickets were kept in the memory of the process that gave them, so the feed was
    refused there (with nginx's round robin, every time). Two apps on one store here."""
    other = build_app(settings(tmp_path / "gateway.db", media={"root": str(tmp_path / "media")}))
    second: Client = await aiohttp_client(other)
    ticket = (await json_of(await client.post("/api/console/ticket", headers=AUTH), 200))["ticket"]
    ws = await second.ws_connect("/console/live")
    await ws.send_json({"type": "auth", "ticket": ticket})
    assert await ws.receive_json(timeout=10) == {"type": "ready"}
    await ws.close()
    again = await second.ws_connect("/console/live")  # used: not twice in one process
    await again.send_json({"type": "auth", "ticket": ticket})
    assert (await again.receive_json(timeout=10))["data"]["code"] == "unauthorized"
    forged = ticket[:-2] + ("AA" if not ticket.endswith("AA") else "BB")
    third = await second.ws_connect("/console/live")
    await third.send_json({"type": "auth", "ticket": forged})
    assert (await third.receive_json(timeout=10))["data"]["code"] == "unauthorized"


async def test_the_live_feed_tells_of_sessions_another_process_changed(
    client: Client, aiohttp_client: Any, tmp_path: Path
) -> None:
    """The store tells a process only of its own commits: a console whose feed reached one
    process never heard of the users another process answered (nor of their handoffs to a
    person), so its list and queue stood still. They are polled for now."""
    other = build_app(settings(tmp_path / "gateway.db", media={"root": str(tmp_path / "media")}))
    second: Client = await aiohttp_client(other)
    ws = await live(client)
    sid = await web_turn(second, "hello")
    async with asyncio.timeout(10):
        while True:
            frame = await ws.receive_json()
            if frame["type"] == "sessions_changed" and sid in frame["session_ids"]:
                break
    await ws.close()


async def test_live_feed_replays_a_watched_session_then_tells_of_every_change(
    client: Client,
) -> None:
    sid = await web_turn(client, "hello")
    ws = await live(client)
    await ws.send_json({"type": "watch", "session_id": sid, "after": 1})
    replayed = [await ws.receive_json(timeout=10) for _ in range(3)]
    assert [(f["type"], f["seq"], f["session_id"]) for f in replayed] == [
        ("turn_started", 2, sid),
        ("message", 3, sid),
        ("turn_finished", 4, sid),
    ]
    other = await web_turn(client, "another chat")
    changed: set[str] = set()
    while other not in changed:
        frame = await ws.receive_json(timeout=10)
        if frame["type"] == "sessions_changed":
            changed |= set(frame["session_ids"])
        else:
            pytest.fail(f"only the watched session's events may come: {frame}")
    await ws.send_json({"type": "watch", "session_id": "bad id!", "after": 0})
    assert (await not_a_change(ws))["data"]["code"] == "invalid_session_id"
    await ws.close()


async def not_a_change(ws: aiohttp.ClientWebSocketResponse) -> Any:
    """The next frame that is not a ``sessions_changed``."""
    while (frame := await ws.receive_json(timeout=10))["type"] == "sessions_changed":
        pass
    return frame


async def test_console_page_and_its_files_are_served(client: Client) -> None:
    page = await client.get("/console")
    assert page.status == 200
    assert "text/html" in page.headers["Content-Type"]
    missing = await client.get("/console/static/nothing-here.js")
    assert missing.status == 404


async def test_live_feed_says_when_a_watched_session_does_not_exist(client: Client) -> None:
    ws = await live(client)
    await ws.send_json({"type": "watch", "session_id": "telegram-support-404", "after": 0})
    assert (await not_a_change(ws))["data"]["code"] == "unknown_session"
    await ws.close()


@pytest.mark.parametrize("after", [-1, 2**63, 10**23, "1", True, 1.5])
async def test_live_feed_refuses_an_after_the_store_cannot_hold_and_stays_open(
    client: Client, after: object
) -> None:
    """``after`` past 2^63-1 was taken, failed in the watch's task without a word, and the next
    frame (or the close) raised it: a traceback in the log and the socket dropped."""
    sid = await web_turn(client, "hello")
    ws = await live(client)
    await ws.send_json({"type": "watch", "session_id": sid, "after": after})
    assert (await not_a_change(ws))["data"]["code"] == "invalid_after"
    await ws.send_json({"type": "watch", "session_id": sid, "after": 3})  # the socket still works
    assert (await not_a_change(ws))["seq"] == 4
    await ws.send_json({"type": "unwatch"})
    await ws.close()


def is_billings(frame: dict[str, Any]) -> bool:
    return frame["type"] == "message" and frame["data"].get("agent") == "billing"


async def test_handing_back_to_a_bot_answers_what_the_user_wrote_to_the_person(
    client: Client,
) -> None:
    """The user wrote to the human queue and nobody answered: handed back to billing, billing
    answers that message at once, not at the user's next message."""
    sid = await web_turn(client, "a person please")
    async with client.ws_connect(f"/ws?session_id={sid}") as ws:
        socket = WebClient(ws)
        await socket.next()
        await socket.say("my invoice INV-1002 please", "c2")
        await socket.until(is_turn_end, "turn end")
        handoff = {"agent": "billing"}
        url = f"/api/sessions/{sid}/handoff"
        await json_of(await client.post(url, json=handoff, headers=AUTH), 200)
        answer = await socket.has(is_billings, "billing's answer")
    assert "INV-1002: 120.50 EUR" in answer["data"]["text"]
    queue = (await json_of(await client.get("/api/queue", headers=AUTH), 200))["queue"]
    assert queue == []


async def test_handing_back_after_the_operator_answered_runs_no_turn(client: Client) -> None:
    sid = await web_turn(client, "a person please")
    reply = {"text": "Sorted: your invoice is paid."}
    await json_of(await client.post(f"/api/sessions/{sid}/reply", json=reply, headers=AUTH), 202)
    before = await client.app[STORE].list_events(sid)
    url = f"/api/sessions/{sid}/handoff"
    await json_of(await client.post(url, json={"agent": "triage"}, headers=AUTH), 200)
    await client.app[DISPATCHER].wait_idle()
    after = await client.app[STORE].list_events(sid)
    assert [e.kind for e in after[len(before) :]] == ["agent_changed"]  # no turn_started
