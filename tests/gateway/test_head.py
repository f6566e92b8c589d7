"""HEAD is answered wherever GET is: the GET's status and headers, and no body on the wire. The
WebSocket routes answer a HEAD as a GET that is no handshake: a JSON 400, even when it carries
the handshake's headers (aiohttp would switch protocols for it)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.channels import whatsapp_fakes as wa
from webhook_bot_gateway.gateway._keys import STORE
from webhook_bot_gateway.gateway._media.files import attachment_path
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.store import QuarantineIn

from .ingest_helpers import AUTH, settings
from .raw_http import Answer, Raw, head

Client = TestClient[web.Request, web.Application]
SID = "telegram-support-42"
ATTACHMENT = "0123456789abcdef" * 2
VERIFY = f"hub.mode=subscribe&hub.verify_token={wa.VERIFY_TOKEN}&hub.challenge=1158"
NO_AUTH: dict[str, str] = {}
# (path, headers): every GET route, with what makes it answer (a token, a row, a file).
GETS = [
    ("/", NO_AUTH),
    ("/console", NO_AUTH),
    ("/console/static/app.js", NO_AUTH),
    ("/console/static/nothing-here.js", NO_AUTH),
    ("/healthz", NO_AUTH),
    ("/readyz", NO_AUTH),
    ("/metrics", NO_AUTH),
    (f"/webhooks/whatsapp?{VERIFY}", NO_AUTH),
    ("/webhooks/whatsapp?hub.mode=subscribe", NO_AUTH),
    ("/api/openapi.json", NO_AUTH),
    ("/api/sessions", AUTH),
    ("/api/sessions", NO_AUTH),
    ("/api/sessions?q=42&limit=5", AUTH),
    ("/api/sessions?limit=0", AUTH),
    (f"/api/sessions/{SID}", AUTH),
    ("/api/sessions/telegram-support-404", AUTH),
    (f"/api/sessions/{SID}/messages", AUTH),
    (f"/api/sessions/{SID}/events", AUTH),
    (f"/api/sessions/{SID}/export", AUTH),
    (f"/api/sessions/{SID}/export?files=zip", AUTH),
    (f"/api/sessions/{SID}/attachments/{ATTACHMENT}", AUTH),
    ("/api/deadletters", AUTH),
    ("/api/quarantine", AUTH),
    ("/api/quarantine/1", AUTH),
    ("/api/queue", AUTH),
    ("/api/agents", AUTH),
    ("/api/console/config", AUTH),
    ("/api/console/config", NO_AUTH),
    ("/api/nothing-here", AUTH),
    ("/nothing-here", NO_AUTH),
]
# Headers that may differ between two answers: the clock; the length of a body that counts
# requests, of an export (its exported_at; the zip's compression of it), and of
# unknown_route's message, which names the method.
VARYING = {"date", "server"}
VARYING_LENGTH = {
    "/metrics",
    f"/api/sessions/{SID}/export",
    f"/api/sessions/{SID}/export?files=zip",
    "/api/nothing-here",
}
WEBSOCKETS = ["/ws", "/console/live"]
HANDSHAKE = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": "13",
}


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path) -> Client:
    media = tmp_path / "media"
    app = build_app(settings(tmp_path / "gateway.db", media={"root": str(media)}), ingest_only=True)
    made: Client = await aiohttp_client(app)
    store = made.app[STORE]
    await store.create_session("telegram", "support", "42", "triage")
    await store.append_message(SID, "user", "hello")
    await store.create_attachment(
        SID,
        name="a.pdf",
        content_type="application/pdf",
        source="upload",
        size=4,
        attachment_id=ATTACHMENT,
    )
    path = attachment_path(media, SID, ATTACHMENT)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"%PDF")
    await store.ingest([QuarantineIn("whatsapp", None, b"<not json>", "body is not JSON")])
    return made


async def on_the_wire(client: Client, method: str, path: str, headers: dict[str, str]) -> Answer:
    """The answer as sent, then a GET /healthz on the same connection: its answer must follow
    this one's body (Content-Length's bytes, none after a HEAD's headers) at once."""
    port = client.server.port
    assert port is not None
    raw = await Raw.connect(port)
    try:
        await raw.send(head(method, path, headers))
        await raw.send(head("GET", "/healthz", {"Connection": "close"}))
        async with asyncio.timeout(5):
            sent = await raw.reader.read()  # up to the server's close
    finally:
        raw.close()
    top, _, rest = sent.partition(b"\r\n\r\n")
    status_line, *lines = top.decode("latin-1").split("\r\n")
    fields = (line.partition(":") for line in lines)
    found = {name.strip().lower(): value.strip() for name, _, value in fields}
    size = 0 if method == "HEAD" else int(found["content-length"])
    assert rest[size:].startswith(b"HTTP/1.1 200 OK\r\n"), (path, rest[size:][:100])
    return Answer(int(status_line.split()[1]), found, rest[:size])


def compared(answer: Answer, path: str) -> dict[str, str]:
    drop = VARYING | ({"content-length"} if path in VARYING_LENGTH else set())
    return {name: value for name, value in answer.headers.items() if name not in drop}


@pytest.mark.parametrize(
    ("path", "headers"), GETS, ids=[f"{p}{' token' if h else ''}" for p, h in GETS]
)
async def test_head_gets_the_status_and_headers_of_get_and_no_body(
    client: Client, path: str, headers: dict[str, str]
) -> None:
    got = await on_the_wire(client, "GET", path, headers)
    headed = await on_the_wire(client, "HEAD", path, headers)
    assert headed.status == got.status, path
    assert compared(headed, path) == compared(got, path)
    if got.status < 300:  # the routes answer, not a catch-all's refusal
        assert got.body


def test_every_get_route_has_its_head(tmp_path: Path) -> None:
    """With the sandbox on: its fake platforms' GET routes too."""
    app = build_app(settings(tmp_path / "gateway.db", sandbox={"enabled": True}))
    methods: dict[str, set[str]] = {}
    for route in app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        methods.setdefault(path, set()).add(route.method)
    lacking = [path for path, found in methods.items() if "GET" in found and "HEAD" not in found]
    assert lacking == []


@pytest.mark.parametrize("path", WEBSOCKETS)
@pytest.mark.parametrize("handshake", [False, True], ids=["plain", "handshake-headers"])
async def test_head_on_a_websocket_route_is_the_json_400_of_a_get_that_is_no_handshake(
    client: Client, path: str, handshake: bool
) -> None:
    got = await on_the_wire(client, "GET", path, {})
    assert (got.status, got.error["code"]) == (400, "bad_request")
    headed = await on_the_wire(client, "HEAD", path, HANDSHAKE if handshake else {})
    assert headed.status == 400
    assert headed.headers["content-type"] == got.headers["content-type"]
    assert await client.app[STORE].count_sessions() == 1  # no web session was opened
