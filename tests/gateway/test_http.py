"""aiohttp's own refusals are JSON errors too: the console's static files and the WebSocket
routes answer ``{"error": {"code", "message"}}`` where aiohttp wrote plain text (or nothing),
and the static files are still served exactly as ``add_static`` serves them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient
from yarl import URL

from webhook_bot_gateway.gateway._console import routes
from webhook_bot_gateway.gateway.app import build_app

from .ingest_helpers import settings

Client = TestClient[web.Request, web.Application]
# Paths under /console/static/ that name no file of the folder, sent as written (encoded=True):
# a missing file, the folder itself, and ways out of it, plain and percent-encoded.
NOT_FILES = [
    "/console/static/nothing-here.js",
    "/console/static/",
    "/console/static",
    "/console/static/../../etc/passwd",
    "/console/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/console/static/..%2f..%2f..%2f..%2fetc%2fpasswd",
    "/console/static/%2e%2e%2f%2e%2e%2fapp.py",
    "/console/static/..%5c..%5cetc%5cpasswd",
    "/console/static//etc/passwd",
    "/console/static/%2fetc%2fpasswd",
    "/console/static/app.js%00.css",
    "/console/static/%0a",
]


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path) -> Client:
    client: Client = await aiohttp_client(
        build_app(settings(tmp_path / "gateway.db"), ingest_only=True)
    )
    return client


async def json_error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    error: dict[str, Any] = (await response.json())["error"]
    assert set(error) == {"code", "message"}
    return error


def shown(response: Any) -> dict[str, str]:
    """A response's headers but those that differ from one answer to the next."""
    return {k: v for k, v in response.headers.items() if k not in ("Date", "Server")}


async def test_console_static_is_served_as_add_static_did_and_the_rest_is_a_json_404(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    plain = web.Application()
    plain.router.add_static("/console/static", routes.STATIC, append_version=False)
    reference = await aiohttp_client(plain)
    asked = [("GET", {}), ("HEAD", {}), ("GET", {"Range": "bytes=2-9"})]
    for file in sorted(p.name for p in routes.STATIC.iterdir()):
        for method, headers in asked:
            ours = await client.request(method, f"/console/static/{file}", headers=headers)
            theirs = await reference.request(method, f"/console/static/{file}", headers=headers)
            assert (ours.status, shown(ours)) == (theirs.status, shown(theirs)), file
            assert await ours.read() == await theirs.read()
    for path in NOT_FILES:
        response = await client.get(URL(path, encoded=True))
        error = await json_error_of(response, 404)
        assert error["code"] == "not_found", path


async def test_console_static_never_serves_a_file_outside_its_folder(
    aiohttp_client: AiohttpClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the web")
    folder = tmp_path / "static"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "page.css").write_text("body {}")
    (folder / "out.txt").symlink_to(secret)  # a link that leads out of the folder
    (folder / "sub" / "up").symlink_to(tmp_path)
    (folder / "in.css").symlink_to(folder / "sub" / "page.css")  # one that stays inside
    monkeypatch.setattr(routes, "STATIC", folder)
    client = await aiohttp_client(build_app(settings(tmp_path / "gateway.db"), ingest_only=True))
    assert (await (await client.get("/console/static/sub/page.css")).text()) == "body {}"
    assert (await (await client.get("/console/static/in.css")).text()) == "body {}"
    for path in [
        "/console/static/out.txt",
        "/console/static/sub/up/secret.txt",
        "/console/static/sub/%2e%2e/%2e%2e/secret.txt",
        f"/console/static/{secret}",
        "/console/static/sub",
    ]:
        response = await client.get(URL(path, encoded=True))
        assert (await json_error_of(response, 404))["code"] == "not_found", path


HANDSHAKE = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": "x"}


@pytest.mark.parametrize("path", ["/ws", "/console/live"])
@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({}, "No WebSocket UPGRADE hdr"),
        ({**HANDSHAKE, "Sec-WebSocket-Version": "12"}, "Unsupported version: 12"),
    ],
    ids=["plain", "bad-version"],
)
async def test_websocket_routes_refuse_what_is_no_handshake_in_json(
    client: Client, path: str, headers: dict[str, str], says: str
) -> None:
    error = await json_error_of(await client.get(path, headers=headers), 400)
    assert error["code"] == "bad_request"
    assert error["message"].startswith(says)
    assert "\n" not in error["message"]


async def test_websocket_route_refuses_head_in_json(client: Client) -> None:
    """aiohttp's add_get answers HEAD too: the refusal is JSON, if without a body."""
    response = await client.head("/ws")
    assert response.status == 400
    assert response.content_type == "application/json"
