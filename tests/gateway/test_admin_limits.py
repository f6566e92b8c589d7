"""Malformed requests to the admin API, with and without the token: always a JSON error naming
what was wrong, never a 500 or a plain-text page."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from webhook_bot_gateway.gateway._keys import STORE
from webhook_bot_gateway.gateway.app import build_app

from .ingest_helpers import ADMIN_TOKEN, AUTH, settings
from .raw_http import Raw, head

Client = TestClient[web.Request, web.Application]
SID = "telegram-support-42"
MIB = 1024 * 1024
BIG = 2**63
ROUTES = [
    ("GET", "/api/sessions"),
    ("GET", f"/api/sessions/{SID}"),
    ("POST", f"/api/sessions/{SID}/reply"),
    ("POST", f"/api/sessions/{SID}/handoff"),
    ("GET", "/api/quarantine/1"),
    ("GET", "/api/queue"),  # the console's routes share the check
    ("GET", "/api/nothing-here"),
]
BODY_ROUTES = [f"/api/sessions/{SID}/reply", f"/api/sessions/{SID}/handoff"]
BODY_ROUTES.append(f"/api/sessions/{SID}/rewind")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "gateway.db"


async def make_client(aiohttp_client: Any, db_path: Path, **sections: dict[str, Any]) -> Client:
    app = build_app(settings(db_path, **sections), ingest_only=True)
    client: Client = await aiohttp_client(app)
    await client.app[STORE].create_session("telegram", "support", "42", "triage")
    return client


@pytest.fixture
async def client(aiohttp_client: Any, db_path: Path) -> Client:
    return await make_client(aiohttp_client, db_path)


def port_of(client: Client) -> int:
    port = client.server.port
    assert port is not None
    return port


async def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    error: dict[str, Any] = (await response.json())["error"]
    return error


# The Authorization header's bytes


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize(
    "value",
    [b"Bearer \xff", b"Bearer \xc3", b"\xff\xfe Bearer x", ADMIN_TOKEN.encode() + b"\xff"],
    ids=["ff", "cut-utf8", "scheme", "token-and-ff"],
)
async def test_undecodable_authorization_bytes_get_a_json_401(
    client: Client, method: str, path: str, value: bytes
) -> None:
    raw = await Raw.connect(port_of(client))
    await raw.send(head(method, path, {"Authorization": value, "Connection": "close"}))
    answer = await raw.response()
    raw.close()
    assert answer.status == 401
    assert answer.error["code"] == "unauthorized"


async def test_a_token_with_non_ascii_characters_is_compared_as_utf8_bytes(
    aiohttp_client: Any, db_path: Path
) -> None:
    token = "jeton-é-" + "x" * 20
    client = await make_client(aiohttp_client, db_path, admin={"token": token})
    for value, status in [
        (b"Bearer " + token.encode(), 200),
        (b"Bearer " + token.encode("latin-1"), 401),  # the same characters, other bytes
    ]:
        raw = await Raw.connect(port_of(client))
        await raw.send(head("GET", "/api/sessions", {"Authorization": value}))
        assert (await raw.response()).status == status
        raw.close()


# Bodies: nesting, size, time, encoding


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("path", BODY_ROUTES)
@pytest.mark.parametrize("depth", [33, 2000, 200_000])
async def test_json_nested_deeper_than_the_bound_is_a_400(
    client: Client, path: str, depth: int
) -> None:
    for body in (nested(depth), '{"text": ' + nested(depth) + "}"):
        headers = {**AUTH, "Content-Type": "application/json"}
        error = await error_of(await client.post(path, data=body, headers=headers), 400)
        assert error["code"] == "json_too_deep"
        assert "field" not in error  # the body as a whole, like invalid_json
        assert "32" in error["message"]


async def test_json_nested_within_the_bound_is_validated_as_usual(client: Client) -> None:
    body = '{"text": ' + nested(31) + "}"
    headers = {**AUTH, "Content-Type": "application/json"}
    path = f"/api/sessions/{SID}/reply"
    error = await error_of(await client.post(path, data=body, headers=headers), 400)
    assert (error["code"], error["field"]) == ("invalid_field", "text")


async def chunks(total: int, size: int = 65536) -> Any:
    sent = 0
    while sent < total:
        yield b" " * min(size, total - sent)
        sent += size


@pytest.mark.parametrize("path", BODY_ROUTES)
@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
async def test_an_admin_body_over_1_mib_is_a_json_413(
    client: Client, path: str, chunked: bool
) -> None:
    size = 2 * MIB
    data: Any = chunks(size) if chunked else io.BytesIO(b" " * size)
    response = await client.post(path, data=data, headers=AUTH)
    error = await error_of(response, 413)
    assert error["code"] == "body_too_large"
    assert str(MIB) in error["message"]


async def test_an_admin_body_of_exactly_1_mib_is_read(client: Client) -> None:
    body = b'{"agent": "human"}' + b" " * (MIB - 18)
    assert len(body) == MIB
    path = f"/api/sessions/{SID}/handoff"
    response = await client.post(path, data=io.BytesIO(body), headers=AUTH)
    assert response.status == 200


async def test_an_admin_body_that_stops_arriving_is_a_json_408(
    aiohttp_client: Any, db_path: Path
) -> None:
    client = await make_client(aiohttp_client, db_path, server={"read_timeout": 0.2})
    raw = await Raw.connect(port_of(client))
    await raw.send(head("POST", f"/api/sessions/{SID}/reply", AUTH, length=100) + b'{"te')
    answer = await raw.response(seconds=3)
    assert answer.status == 408
    assert answer.error["code"] == "request_timeout"
    await raw.closed_within(2)
    raw.close()


# Numbers outside what the store holds


LISTINGS = ["/api/sessions", "/api/deadletters", "/api/quarantine"]


@pytest.mark.parametrize("path", LISTINGS)
@pytest.mark.parametrize(
    ("query", "field"),
    [
        (f"offset={BIG}", "offset"),
        (f"offset={10**30}", "offset"),
        ("offset=-1", "offset"),
        (f"limit={BIG}", "limit"),
        ("limit=0", "limit"),
        ("offset=1e3", "offset"),
        ("limit=1_0", "limit"),  # Python's int() reads these; no client means them
        ("limit=%2B5", "limit"),
        ("offset=%205", "offset"),
    ],
)
async def test_listing_numbers_outside_0_to_2_63_are_a_400_naming_the_field(
    client: Client, path: str, query: str, field: str
) -> None:
    error = await error_of(await client.get(f"{path}?{query}", headers=AUTH), 400)
    assert (error["code"], error["field"]) == ("invalid_field", field)


@pytest.mark.parametrize(
    "query", [f"after={BIG}", "after=-1", f"limit={BIG}", "after=1_0", "limit=%2B5"]
)
async def test_event_numbers_outside_the_range_are_a_400(client: Client, query: str) -> None:
    response = await client.get(f"/api/sessions/{SID}/events?{query}", headers=AUTH)
    assert (await error_of(response, 400))["code"] == "invalid_field"


@pytest.mark.parametrize(
    ("qid", "status"),
    [("0", 404), ("00", 404), ("9" * 23, 404), (str(BIG), 404), ("-1", 400), ("1.0", 400)],
)
@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_quarantine_ids_outside_the_store_are_a_json_refusal(
    client: Client, method: str, qid: str, status: int
) -> None:
    response = await client.request(method, f"/api/quarantine/{qid}", headers=AUTH)
    error = await error_of(response, status)
    assert error["code"] == ("unknown_quarantine" if status == 404 else "invalid_field")


@pytest.mark.parametrize("message_id", [0, -1, BIG, 10**30])
async def test_a_rewind_id_outside_the_range_is_a_400(client: Client, message_id: int) -> None:
    path = f"/api/sessions/{SID}/rewind"
    response = await client.post(path, json={"message_id": message_id}, headers=AUTH)
    error = await error_of(response, 400)
    assert (error["code"], error["field"]) == ("invalid_field", "message_id")
