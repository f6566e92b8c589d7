"""The admin API in-process on a real SQLite file: every route, every error."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway._keys import SENDER_WAKE, STORE
from gateway.app import build_app
from store import InboxIn, OutboxIn, ParsedDelivery, QuarantineIn, Store

from .ingest_helpers import ADMIN_TOKEN, AUTH, rows, settings

Client = TestClient[web.Request, web.Application]
SID = "telegram-support-42"
ROUTES = [
    ("GET", "/api/sessions"),
    ("GET", f"/api/sessions/{SID}"),
    ("GET", f"/api/sessions/{SID}/messages"),
    ("DELETE", f"/api/sessions/{SID}"),
    ("POST", f"/api/sessions/{SID}/reply"),
    ("POST", f"/api/sessions/{SID}/handoff"),
    ("GET", "/api/deadletters"),
    ("GET", "/api/quarantine"),
    ("GET", "/api/quarantine/1"),
    ("GET", "/api/nothing-here"),
]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "gateway.db"


async def make_client(aiohttp_client: Any, db_path: Path, token: str = ADMIN_TOKEN) -> Client:
    app = build_app(settings(db_path, admin={"token": token}), ingest_only=True)
    client: Client = await aiohttp_client(app)
    return client


@pytest.fixture
async def client(aiohttp_client: Any, db_path: Path) -> Client:
    client = await make_client(aiohttp_client, db_path)
    store = client.app[STORE]
    await store.create_session("telegram", "support", "42", "triage")
    await store.append_message(SID, "user", "hello")
    await store.append_message(SID, "assistant", "hi, how can I help?", agent="triage")
    await store.create_session("whatsapp", "1122334455667", "972987654321", "billing")
    return client


def store_of(client: Client) -> Store:
    return client.app[STORE]


async def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status == status
    error: dict[str, Any] = (await response.json())["error"]
    return error


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {ADMIN_TOKEN}"}],
    ids=["none", "wrong", "basic"],
)
async def test_admin_routes_refuse_without_the_token(
    client: Client, method: str, path: str, headers: dict[str, str]
) -> None:
    response = await client.request(method, path, headers=headers, json={"text": "x"})
    assert (await error_of(response, 401))["code"] == "unauthorized"
    assert await store_of(client).get_session(SID) is not None


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_admin_routes_are_off_when_no_token_is_configured(
    aiohttp_client: Any, db_path: Path, method: str, path: str
) -> None:
    client = await make_client(aiohttp_client, db_path, token="")
    response = await client.request(method, path, headers={"Authorization": "Bearer "})
    error = await error_of(response, 403)
    assert error["code"] == "admin_disabled"
    assert "admin.token" in error["message"]


async def test_admin_sessions_list_has_total_and_filters(client: Client) -> None:
    response = await client.get("/api/sessions", headers=AUTH)
    listed = await response.json()
    assert listed["total"] == 2
    assert {s["session_id"] for s in listed["sessions"]} == {
        SID,
        "whatsapp-1122334455667-972987654321",
    }
    only = await (await client.get("/api/sessions?channel=telegram", headers=AUTH)).json()
    assert [s["session_id"] for s in only["sessions"]] == [SID]
    assert only["total"] == 1
    billing = await (
        await client.get("/api/sessions?agent=billing&status=idle", headers=AUTH)
    ).json()
    assert billing["total"] == 1
    page = await (await client.get("/api/sessions?limit=1&offset=1", headers=AUTH)).json()
    assert len(page["sessions"]) == 1
    assert page["total"] == 2


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=x", "limit"),
        ("offset=-1", "offset"),
        ("status=busy", "status"),
        ("color=red", "color"),
    ],
)
async def test_admin_sessions_list_names_a_bad_query_field(
    client: Client, query: str, field: str
) -> None:
    error = await error_of(await client.get(f"/api/sessions?{query}", headers=AUTH), 400)
    assert error["code"] == "invalid_field"
    assert error["field"] == field
    assert field in error["message"]


async def test_admin_show_session_has_the_contract_fields(client: Client) -> None:
    session = await (await client.get(f"/api/sessions/{SID}", headers=AUTH)).json()
    fields = {"session_id", "channel", "account", "chat_id", "active_agent", "status", "metadata"}
    assert fields | {"created_at", "updated_at", "head_id"} <= set(session)
    assert (session["channel"], session["account"], session["chat_id"]) == (
        "telegram",
        "support",
        "42",
    )
    assert session["status"] == "idle"


@pytest.mark.parametrize(
    "path", ["/api/sessions/bad.id", "/api/sessions/", "/api/sessions/" + "a" * 129]
)
async def test_admin_refuses_a_malformed_session_id(client: Client, path: str) -> None:
    error = await error_of(await client.get(path, headers=AUTH), 400)
    assert error["code"] == "invalid_session_id"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/sessions/telegram-support-404"),
        ("GET", "/api/sessions/telegram-support-404/messages"),
        ("DELETE", "/api/sessions/telegram-support-404"),
        ("POST", "/api/sessions/telegram-support-404/reply"),
        ("POST", "/api/sessions/telegram-support-404/handoff"),
    ],
)
async def test_admin_answers_404_for_an_unknown_session(
    client: Client, method: str, path: str
) -> None:
    response = await client.request(
        method, path, headers=AUTH, json={"text": "x", "agent": "human"}
    )
    assert (await error_of(response, 404))["code"] == "unknown_session"


async def test_admin_messages_are_the_current_branch_oldest_first(client: Client) -> None:
    messages = (await (await client.get(f"/api/sessions/{SID}/messages", headers=AUTH)).json())[
        "messages"
    ]
    assert [(m["role"], m["text"], m["agent"]) for m in messages] == [
        ("user", "hello", None),
        ("assistant", "hi, how can I help?", "triage"),
    ]
    assert messages[1]["parent_id"] == messages[0]["id"]
    assert all(m["created_at"] for m in messages)


async def test_admin_delete_erases_the_session(client: Client, db_path: Path) -> None:
    response = await client.delete(f"/api/sessions/{SID}", headers=AUTH)
    assert response.status == 204
    assert await store_of(client).get_session(SID) is None
    assert rows(db_path, "SELECT count(*) FROM messages WHERE session_id = ?", SID) == [(0,)]
    again = await client.delete(f"/api/sessions/{SID}", headers=AUTH)
    assert (await error_of(again, 404))["code"] == "unknown_session"


async def test_admin_reply_goes_to_history_and_outbox_in_one_commit(
    client: Client, db_path: Path
) -> None:
    response = await client.post(
        f"/api/sessions/{SID}/reply", headers=AUTH, json={"text": "A person here."}
    )
    assert response.status == 202
    answer = await response.json()
    assert answer["message"]["role"] == "assistant"
    assert answer["message"]["agent"] == "operator"
    [outbox] = await store_of(client).list_outbox(SID)
    assert outbox.id == answer["outbox_id"]
    assert (outbox.channel, outbox.account, outbox.chat_id) == ("telegram", "support", "42")
    assert outbox.payload["text"] == "A person here."
    assert outbox.state == "pending"
    branch = await store_of(client).get_branch(SID)
    assert branch[-1].text == "A person here."
    assert client.app[SENDER_WAKE].is_set()


async def test_admin_reply_while_a_turn_runs_is_refused_with_409(
    client: Client, db_path: Path
) -> None:
    async with store_of(client).turn(SID):  # a turn open in this process
        response = await client.post(f"/api/sessions/{SID}/reply", headers=AUTH, json={"text": "x"})
        assert (await error_of(response, 409))["code"] == "run_active"
    assert await store_of(client).list_outbox(SID) == []


async def test_admin_reply_to_a_session_left_running_is_refused_with_409(
    client: Client, db_path: Path
) -> None:
    await mark_running(db_path)
    response = await client.post(f"/api/sessions/{SID}/reply", headers=AUTH, json={"text": "x"})
    assert (await error_of(response, 409))["code"] == "run_active"


async def mark_running(db_path: Path) -> None:
    """Another process's turn, as the store sees it."""
    conn = sqlite3.connect(db_path)
    try:
        conn.execute("UPDATE sessions SET status = 'running' WHERE session_id = ?", (SID,))
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        (b"{not json", "invalid_json", None),
        (b'"just a string"', "invalid_json", None),
        (b"{}", "invalid_field", "text"),
        (b'{"text": ""}', "invalid_field", "text"),
        (b'{"text": 5}', "invalid_field", "text"),
        (b'{"text": "hi", "urgent": true}', "invalid_field", "urgent"),
    ],
)
async def test_admin_reply_names_what_is_wrong_with_the_body(
    client: Client, body: bytes, code: str, field: str | None
) -> None:
    headers = {**AUTH, "Content-Type": "application/json"}
    response = await client.post(f"/api/sessions/{SID}/reply", headers=headers, data=body)
    error = await error_of(response, 400)
    assert error["code"] == code
    assert error.get("field") == field


async def test_admin_handoff_changes_the_agent_and_records_an_event(client: Client) -> None:
    response = await client.post(
        f"/api/sessions/{SID}/handoff", headers=AUTH, json={"agent": "human"}
    )
    assert response.status == 200
    assert (await response.json())["active_agent"] == "human"
    session = await store_of(client).get_session(SID)
    assert session is not None
    assert session.active_agent == "human"
    [event] = await store_of(client).list_events(SID)
    assert (event.kind, event.detail) == (
        "handoff",
        {"from": "triage", "to": "human", "reason": "operator"},
    )


async def test_admin_handoff_to_an_unknown_agent_is_refused(client: Client) -> None:
    response = await client.post(
        f"/api/sessions/{SID}/handoff", headers=AUTH, json={"agent": "nobody"}
    )
    error = await error_of(response, 400)
    assert (error["code"], error["field"]) == ("unknown_agent", "agent")


async def test_admin_handoff_while_running_is_refused_with_409(
    client: Client, db_path: Path
) -> None:
    await mark_running(db_path)
    response = await client.post(
        f"/api/sessions/{SID}/handoff", headers=AUTH, json={"agent": "human"}
    )
    assert (await error_of(response, 409))["code"] == "run_active"


async def test_admin_handoff_without_an_agent_names_the_field(client: Client) -> None:
    response = await client.post(f"/api/sessions/{SID}/handoff", headers=AUTH, json={})
    error = await error_of(response, 400)
    assert (error["code"], error["field"]) == ("invalid_field", "agent")


async def test_admin_dead_letters_list_dead_inbox_and_outbox_rows(client: Client) -> None:
    store = store_of(client)
    event = {"text": "please help"}
    parsed = ParsedDelivery(
        inbox=(InboxIn("telegram", "support", "42", "telegram:support:1", event),)
    )
    await store.record_parsed(None, parsed, starting_agent="triage")
    [pending] = await store.pending_inbox(SID)
    await store.fail_inbox([pending.id], "model down", next_attempt_at=0, dead=True)
    queued = await store.enqueue_outbox(OutboxIn(SID, "telegram", "support", "42", {"text": "x"}))
    await store.outbox_failed(queued.id, error="blocked", state="dead")
    letters = await (await client.get("/api/deadletters", headers=AUTH)).json()
    assert [(i["id"], i["error"], i["state"]) for i in letters["inbox"]] == [
        (pending.id, "model down", "dead")
    ]
    assert [(o["id"], o["state"]) for o in letters["outbox"]] == [(queued.id, "dead")]
    bad = await client.get("/api/deadletters?limit=-5", headers=AUTH)
    assert (await error_of(bad, 400))["field"] == "limit"


async def test_admin_quarantine_lists_rows_and_shows_one_with_its_body(client: Client) -> None:
    [result] = await store_of(client).ingest(
        [QuarantineIn("whatsapp", None, b"<not json>", "body is not JSON")]
    )
    listed = (await (await client.get("/api/quarantine", headers=AUTH)).json())["quarantine"]
    assert [(q["id"], q["reason"], q["size"], q["replayed_at"]) for q in listed] == [
        (result.quarantine_id, "body is not JSON", 10, None)
    ]
    assert "body" not in listed[0]
    one = await (await client.get(f"/api/quarantine/{result.quarantine_id}", headers=AUTH)).json()
    assert one["body"] == "<not json>"
    missing = await client.get("/api/quarantine/999", headers=AUTH)
    assert (await error_of(missing, 404))["code"] == "unknown_quarantine"
    bad = await client.get("/api/quarantine/abc", headers=AUTH)
    assert (await error_of(bad, 400))["code"] == "invalid_field"


async def test_admin_unknown_route_is_a_json_404(client: Client) -> None:
    response = await client.get("/api/nothing-here", headers=AUTH)
    assert (await error_of(response, 404))["code"] == "unknown_route"
