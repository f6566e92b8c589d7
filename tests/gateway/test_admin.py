"""The admin API in-process on a real SQLite file: every route, every error."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.channels import telegram_fakes as tg
from tests.channels import whatsapp_fakes as wa
from webhook_bot_gateway.gateway._keys import SENDER_WAKE, STORE
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.store import InboxIn, OutboxIn, ParsedDelivery, QuarantineIn, Store

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
    ("POST", f"/api/sessions/{SID}/rewind"),
    ("GET", f"/api/sessions/{SID}/events"),
    ("GET", f"/api/sessions/{SID}/export"),
    ("GET", "/api/deadletters"),
    ("GET", "/api/quarantine"),
    ("GET", "/api/quarantine/1"),
    ("DELETE", "/api/quarantine/1"),
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
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="gateway"'  # RFC 6750
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
        (f"offset={2**63}", "offset"),  # more than SQLite's integers hold: not a 500
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
        ("POST", "/api/sessions/telegram-support-404/rewind"),
        ("GET", "/api/sessions/telegram-support-404/events"),
    ],
)
async def test_admin_answers_404_for_an_unknown_session(
    client: Client, method: str, path: str
) -> None:
    body = {"text": "x"} if path.endswith("reply") else {"agent": "human"}
    if path.endswith("rewind"):
        body = {"message_id": 1}
    response = await client.request(method, path, headers=AUTH, json=body)
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
    assert answer["message"]["role"] == "operator"  # stored as assistant, agent operator
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
        (b'{"text": "a\\u0000b"}', "invalid_field", "text"),
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


async def test_admin_body_with_a_number_too_long_to_convert_says_so(client: Client) -> None:
    """Python converts at most 4,300 digits: the body is JSON, but not one the API can read."""
    headers = {**AUTH, "Content-Type": "application/json"}
    body = b'{"message_id": ' + b"9" * 5000 + b"}"
    response = await client.post(f"/api/sessions/{SID}/rewind", headers=headers, data=body)
    error = await error_of(response, 400)
    assert (error["code"], error["message"]) == (
        "invalid_json",
        "a number in the body has 5000 digits; too long",
    )


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
async def test_admin_body_with_a_nan_or_infinity_is_not_json(client: Client, constant: str) -> None:
    """Python's json reads them; JSON has none: invalid_json naming it, not a field's type error."""
    headers = {**AUTH, "Content-Type": "application/json"}
    body = b'{"text": "hi", "operator": ' + constant.encode() + b"}"
    response = await client.post(f"/api/sessions/{SID}/reply", headers=headers, data=body)
    error = await error_of(response, 400)
    assert (error["code"], error["message"]) == (
        "invalid_json",
        f"the body is not JSON: {constant} is not a JSON value",
    )
    assert await store_of(client).list_outbox(SID) == []


async def test_admin_handoff_changes_the_agent_and_records_an_event(client: Client) -> None:
    response = await client.post(
        f"/api/sessions/{SID}/handoff", headers=AUTH, json={"agent": "billing"}
    )
    assert response.status == 200
    assert (await response.json())["active_agent"] == "billing"
    session = await store_of(client).get_session(SID)
    assert session is not None
    assert session.active_agent == "billing"
    [event] = await store_of(client).list_events(SID)
    assert (event.kind, event.detail) == (
        "agent_changed",
        {"from": "triage", "to": "billing", "reason": "operator"},
    )
    assert await store_of(client).list_outbox(SID) == []  # a bot: the user is told nothing


async def test_admin_handoff_to_a_human_agent_tells_the_user_once(client: Client) -> None:
    """As a handoff in a turn does (CONTRACT: "on handoff the user is told that a person will
    answer"): the human agent's handoff_reply, in the history and queued to send."""
    path = f"/api/sessions/{SID}/handoff"
    response = await client.post(path, headers=AUTH, json={"agent": "human"})
    assert (await response.json())["active_agent"] == "human"
    store = store_of(client)
    [row] = await store.list_outbox(SID)
    told = "Thank you. A person from our team will answer you here shortly."  # the example's
    assert (row.chat_id, row.payload["text"]) == ("42", told)
    last = (await store.get_branch(SID))[-1]
    assert (last.role, last.text, last.agent) == ("assistant", told, "human")
    changed = [e.detail for e in await store.list_events(SID) if e.kind == "agent_changed"]
    assert changed == [{"from": "triage", "to": "human", "reason": "operator"}]
    events = await store.list_events(SID)
    again = await client.post(path, headers=AUTH, json={"agent": "human"})  # already there
    assert (again.status, len(await store.list_outbox(SID))) == (200, 1)
    assert await store.list_events(SID) == events  # no turn begun and cancelled for nothing


async def test_admin_handoff_to_a_human_agent_outside_the_window_keeps_the_notice_unsent(
    client: Client,
) -> None:
    sid = "whatsapp-1122334455667-972987654321"  # no message from the user yet: window closed
    response = await client.post(
        f"/api/sessions/{sid}/handoff", headers=AUTH, json={"agent": "human"}
    )
    assert response.status == 200
    assert await store_of(client).list_outbox(sid) == []
    last = (await store_of(client).get_branch(sid))[-1]
    assert last.agent == "human"
    assert "window is closed" in last.data["not_sent"]


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


async def test_admin_delete_quarantine_erases_one_row(client: Client) -> None:
    """A chat with no session: its quarantined body is erased by id (docs/data.md)."""
    kept = [QuarantineIn("whatsapp", None, body, "body is not JSON") for body in (b"<a", b"<b")]
    first, second = [r.quarantine_id for r in await store_of(client).ingest(kept)]
    erased = await client.delete(f"/api/quarantine/{first}", headers=AUTH)
    assert (erased.status, await erased.read()) == (204, b"")
    listed = (await (await client.get("/api/quarantine", headers=AUTH)).json())["quarantine"]
    assert [q["id"] for q in listed] == [second]
    again = await client.delete(f"/api/quarantine/{first}", headers=AUTH)
    assert (await error_of(again, 404))["code"] == "unknown_quarantine"
    bad = await client.delete("/api/quarantine/abc", headers=AUTH)
    assert (await error_of(bad, 400))["code"] == "invalid_field"


async def test_admin_quarantine_pending_lists_only_rows_not_replayed(client: Client) -> None:
    kept = [QuarantineIn("whatsapp", None, body, "body is not JSON") for body in (b"<a", b"<b")]
    first, second = [r.quarantine_id for r in await store_of(client).ingest(kept)]
    assert first is not None
    await store_of(client).mark_replayed(first)

    async def listed(query: str) -> list[int]:
        response = await client.get(f"/api/quarantine{query}", headers=AUTH)
        return [q["id"] for q in (await response.json())["quarantine"]]

    assert await listed("?pending=true") == [second]
    assert await listed("?pending=false") == [second, first]
    assert await listed("") == [second, first]
    for word in ("1", "yes", "True", ""):
        refused = await client.get(f"/api/quarantine?pending={word}", headers=AUTH)
        assert (await error_of(refused, 400))["code"] == "invalid_field", word


@pytest.mark.parametrize(("qid", "status"), [("\u00b2", 400), ("٣", 400), (str(2**64), 404)])
async def test_admin_quarantine_id_outside_what_the_store_holds_is_refused(
    client: Client, qid: str, status: int
) -> None:
    response = await client.get(f"/api/quarantine/{qid}", headers=AUTH)
    assert (await error_of(response, status))["code"] in {"invalid_field", "unknown_quarantine"}


async def test_admin_unknown_route_is_a_json_404(client: Client) -> None:
    response = await client.get("/api/nothing-here", headers=AUTH)
    assert (await error_of(response, 404))["code"] == "unknown_route"


async def test_admin_messages_show_an_operator_reply_with_role_operator(client: Client) -> None:
    await client.post(f"/api/sessions/{SID}/reply", headers=AUTH, json={"text": "A person."})
    messages = (await (await client.get(f"/api/sessions/{SID}/messages", headers=AUTH)).json())[
        "messages"
    ]
    assert [(m["role"], m["agent"]) for m in messages][-1] == ("operator", "operator")
    assert all(m["attachments"] == [] for m in messages)


async def test_admin_reply_to_a_web_session_adds_no_outbox_row(client: Client) -> None:
    web = await store_of(client).create_session("web", "console", "abc", "triage")
    response = await client.post(
        f"/api/sessions/{web.session_id}/reply", headers=AUTH, json={"text": "Hello from a person."}
    )
    assert response.status == 202
    answer = await response.json()
    assert answer["outbox_id"] is None
    assert answer["message"]["text"] == "Hello from a person."
    assert await store_of(client).list_outbox(web.session_id) == []
    assert not client.app[SENDER_WAKE].is_set()
    kinds = [event.kind for event in await store_of(client).list_events(web.session_id)]
    assert "message" in kinds  # the web user reads it from the event log


async def branch_ids(client: Client, sid: str = SID) -> list[int]:
    answer = await (await client.get(f"/api/sessions/{sid}/messages", headers=AUTH)).json()
    return [m["id"] for m in answer["messages"]]


async def rewind(client: Client, body: object, sid: str = SID) -> Any:
    return await client.post(f"/api/sessions/{sid}/rewind", headers=AUTH, json=body)


async def test_admin_rewind_moves_head_and_the_next_message_continues_from_it(
    client: Client, db_path: Path
) -> None:
    first, second = await branch_ids(client)
    response = await rewind(client, {"message_id": first})
    assert response.status == 200
    session = await response.json()
    assert (session["session_id"], session["head_id"]) == (SID, first)
    assert await branch_ids(client) == [first]
    reply = await client.post(f"/api/sessions/{SID}/reply", headers=AUTH, json={"text": "again"})
    new = (await reply.json())["message"]
    assert new["parent_id"] == first
    assert await branch_ids(client) == [first, new["id"]]
    assert rows(db_path, "SELECT id FROM messages WHERE session_id = ? ORDER BY id", SID) == [
        (first,),
        (second,),
        (new["id"],),
    ]  # the old branch is still there
    off = await rewind(client, {"message_id": second})
    error = await error_of(off, 409)
    assert (error["code"], error["field"]) == ("not_on_branch", "message_id")


async def test_admin_rewind_to_the_head_itself_is_a_no_op(client: Client) -> None:
    ids = await branch_ids(client)
    response = await rewind(client, {"message_id": ids[-1]})
    assert (await response.json())["head_id"] == ids[-1]
    assert await branch_ids(client) == ids


async def test_admin_rewind_to_a_message_of_another_session_is_unknown(client: Client) -> None:
    other = await store_of(client).create_session("telegram", "support", "43", "triage")
    theirs = await store_of(client).append_message(other.session_id, "user", "mine")
    before = await branch_ids(client)
    for message_id in (theirs.id, 999_999):
        error = await error_of(await rewind(client, {"message_id": message_id}), 404)
        assert error["code"] == "unknown_message"
    assert await branch_ids(client) == before


@pytest.mark.parametrize(
    "body",
    [{}, {"message_id": 0}, {"message_id": "x"}, {"message_id": 2**63}, {"message_id": 1, "x": 1}],
)
async def test_admin_rewind_names_what_is_wrong_with_the_body(client: Client, body: object) -> None:
    error = await error_of(await rewind(client, body), 400)
    assert error["code"] == "invalid_field"
    assert error["field"] in {"message_id", "x"}


async def test_admin_rewind_while_a_turn_runs_is_refused_with_409(
    client: Client, db_path: Path
) -> None:
    first = (await branch_ids(client))[0]
    async with store_of(client).turn(SID):
        error = await error_of(await rewind(client, {"message_id": first}), 409)
        assert error["code"] == "run_active"
    await mark_running(db_path)
    error = await error_of(await rewind(client, {"message_id": first}), 409)
    assert error["code"] == "run_active"
    session = await store_of(client).get_session(SID)
    assert session is not None
    assert session.head_id != first


async def test_admin_events_page_through_the_log_by_seq(client: Client) -> None:
    for agent in ("billing", "triage", "billing"):
        await client.post(f"/api/sessions/{SID}/handoff", headers=AUTH, json={"agent": agent})
    url = f"/api/sessions/{SID}/events"
    events = (await (await client.get(url, headers=AUTH)).json())["events"]
    assert [(e["seq"], e["kind"], e["detail"]["to"]) for e in events] == [
        (1, "agent_changed", "billing"),
        (2, "agent_changed", "triage"),
        (3, "agent_changed", "billing"),
    ]
    assert set(events[0]) == {"seq", "kind", "detail", "created_at"}
    page = (await (await client.get(f"{url}?after=1&limit=1", headers=AUTH)).json())["events"]
    assert [e["seq"] for e in page] == [2]
    for query, field in [("after=-1", "after"), ("limit=0", "limit"), ("since=1", "since")]:
        error = await error_of(await client.get(f"{url}?{query}", headers=AUTH), 400)
        assert (error["code"], error["field"]) == ("invalid_field", field)


async def test_admin_template_to_a_session_of_another_channel_is_refused_with_422(
    client: Client, db_path: Path
) -> None:
    body = {"name": "follow_up", "language": "en_US", "parameters": ["x"]}
    response = await client.post(f"/api/sessions/{SID}/template", headers=AUTH, json=body)
    assert (await error_of(response, 422))["code"] == "not_whatsapp"
    assert await store_of(client).list_outbox(SID) == []


async def test_admin_reply_window_applies_to_whatsapp_only(client: Client, db_path: Path) -> None:
    """A Telegram session has no window; a WhatsApp one whose user never wrote is closed."""
    response = await client.post(f"/api/sessions/{SID}/reply", headers=AUTH, json={"text": "x"})
    assert response.status == 202
    wa = await store_of(client).create_session("whatsapp", "100", "15550001111", "triage")
    response = await client.post(
        f"/api/sessions/{wa.session_id}/reply", headers=AUTH, json={"text": "x"}
    )
    assert (await error_of(response, 409))["code"] == "window_closed"
    assert await store_of(client).list_outbox(wa.session_id) == []
    assert await store_of(client).get_branch(wa.session_id) == []


async def test_admin_handoff_to_an_agent_the_account_does_not_list_is_refused(
    aiohttp_client: Any, db_path: Path
) -> None:
    bot = {"name": "support", "token": tg.TOKEN, "secret_token": tg.SECRET}
    bots = [{**bot, "agents": ["triage", "billing"]}]
    config = settings(db_path, telegram={"api_base_url": "http://127.0.0.1:9", "bots": bots})
    client: Client = await aiohttp_client(build_app(config, ingest_only=True))
    await client.app[STORE].create_session("telegram", "support", "42", "triage")
    path = f"/api/sessions/{SID}/handoff"
    refused = await client.post(path, headers=AUTH, json={"agent": "human"})
    error = await error_of(refused, 400)
    assert (error["code"], error["field"]) == ("agent_not_allowed", "agent")
    session = await client.app[STORE].get_session(SID)
    assert session is not None
    assert session.active_agent == "triage"
    taken = await client.post(path, headers=AUTH, json={"agent": "billing"})
    assert taken.status == 200


async def snapshot(client: Client, sid: str) -> tuple[list[Any], list[Any], list[Any]]:
    """The session's current branch, outbox rows and event log."""
    store = store_of(client)
    return await store.get_branch(sid), await store.list_outbox(sid), await store.list_events(sid)


BLANKS = ["   ", "\n\t ", "\u3000\u00a0", "\r\n"]


@pytest.mark.parametrize("text", BLANKS)
async def test_admin_reply_of_only_whitespace_is_refused_and_nothing_is_stored(
    client: Client, text: str
) -> None:
    """Stored and queued before, it then failed at the sender: nothing to send."""
    before = await snapshot(client, SID)
    response = await client.post(f"/api/sessions/{SID}/reply", headers=AUTH, json={"text": text})
    error = await error_of(response, 400)
    assert (error["code"], error["field"]) == ("invalid_field", "text")
    assert error["message"] == "text: must not be empty or only whitespace"
    assert await snapshot(client, SID) == before
    assert await store_of(client).list_outbox(SID) == []
    assert not client.app[SENDER_WAKE].is_set()


async def test_admin_reply_of_only_whitespace_to_a_web_session_is_refused(client: Client) -> None:
    web = await store_of(client).create_session("web", "console", "abc", "triage")
    before = await snapshot(client, web.session_id)
    path = f"/api/sessions/{web.session_id}/reply"
    response = await client.post(path, headers=AUTH, json={"text": " \n", "operator": "Ann"})
    assert (await error_of(response, 400))["field"] == "text"
    assert await snapshot(client, web.session_id) == before


async def test_admin_reply_with_a_blank_operator_name_is_refused(client: Client) -> None:
    before = await snapshot(client, SID)
    body = {"text": "A person here.", "operator": "  "}
    response = await client.post(f"/api/sessions/{SID}/reply", headers=AUTH, json=body)
    error = await error_of(response, 400)
    assert (error["code"], error["field"]) == ("invalid_field", "operator")
    assert await snapshot(client, SID) == before
    body = {"text": "  A person here.\n", "operator": " Ann "}  # blanks around words: kept
    response = await client.post(f"/api/sessions/{SID}/reply", headers=AUTH, json=body)
    assert response.status == 202
    [outbox] = await store_of(client).list_outbox(SID)
    assert outbox.payload["text"] == "  A person here.\n"  # the channels strip what they send


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"parameters": ["  "]}, "parameters.0"),
        ({"parameters": ["Ann"], "operator": "\t"}, "operator"),
    ],
)
async def test_admin_template_with_a_blank_text_is_refused_and_nothing_is_queued(
    aiohttp_client: Any, db_path: Path, body: dict[str, Any], field: str
) -> None:
    templates = [{"name": "follow_up", "language": "en_US", "parameters": ["name"]}]
    config = settings(db_path, whatsapp={"templates": templates})
    client: Client = await aiohttp_client(build_app(config, ingest_only=True))
    session = await store_of(client).create_session("whatsapp", wa.NUMBER_A, "15550001111", "human")
    sid = session.session_id
    before = await snapshot(client, sid)
    full = {"name": "follow_up", "language": "en_US", **body}
    response = await client.post(f"/api/sessions/{sid}/template", headers=AUTH, json=full)
    error = await error_of(response, 400)
    assert (error["code"], error["field"]) == ("invalid_field", field)
    assert await snapshot(client, sid) == before
    fine = {**full, "parameters": ["Ann"], "operator": "Ann"}
    assert (
        await client.post(f"/api/sessions/{sid}/template", headers=AUTH, json=fine)
    ).status == 202
