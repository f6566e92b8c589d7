"""Per-session attachments in-process: the whole app (pipeline, demo agents) on a real SQLite
file and a real media folder. Web sessions come from ``/ws``; files are read off the disk and
rows with the stdlib sqlite3 module, never through the code under test."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import shutil
import stat
import unicodedata
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.e2e.gateway_proc import eventually
from tests.e2e.ws_client import WebClient, is_turn_end
from webhook_bot_gateway.channels.web import web_dedup_key
from webhook_bot_gateway.gateway._keys import STORE
from webhook_bot_gateway.gateway._web.attachments import UNDER_WAY, UPLOADS
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.gateway.cli import main

from .ingest_helpers import AUTH, rows, settings

Client = TestClient[web.Request, web.Application]
MAX_BYTES = 1000
CRAFTED = 200  # files test_upload_crafted_names_stay_in_the_session_folder uploads to one session
MIB = 1024 * 1024
HEX32 = re.compile(r"[0-9a-f]{32}")
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
BOUNDARY = "gateway-test-boundary-5c1b2e"
MULTIPART = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
SESSION_TABLES = ("sessions", "messages", "session_events", "inbox", "outbox", "attachments")


@dataclass(frozen=True)
class Gateway:
    client: Client
    db: Path
    media: Path
    tmp: Path

    def folder(self, sid: str) -> Path:
        return self.media / sid


@pytest.fixture
async def gw(aiohttp_client: Any, tmp_path: Path) -> Gateway:
    db, media = tmp_path / "gateway.db", tmp_path / "media"
    values = {"root": str(media), "max_bytes": MAX_BYTES, "max_uploads_per_session": CRAFTED}
    client: Client = await aiohttp_client(build_app(settings(db, media=values)))
    return Gateway(client, db, media, tmp_path)


async def gateway_with(aiohttp_client: Any, tmp_path: Path, **media: Any) -> Gateway:
    """A gateway whose ``[media]`` section has ``media`` on top of a root under ``tmp_path``."""
    db, root = tmp_path / "gateway.db", tmp_path / "media"
    app = build_app(settings(db, media={"root": str(root), **media}))
    client: Client = await aiohttp_client(app)
    return Gateway(client, db, root, tmp_path)


@asynccontextmanager
async def web_session(client: Client) -> AsyncIterator[WebClient]:
    """A new web session's socket, its ``connection`` frame read."""
    async with client.ws_connect("/ws") as ws:
        socket = WebClient(ws)
        first = await socket.next()
        assert first["type"] == "connection", first
        yield socket


def url(sid: str) -> str:
    return f"/web/sessions/{sid}/attachments"


def form(data: bytes, name: str = "notes.txt", content_type: str = "text/plain") -> Any:
    body = aiohttp.FormData()
    body.add_field("file", data, filename=name, content_type=content_type)
    return body


async def uploaded(client: Client, sid: str, data: bytes, name: str = "notes.txt") -> str:
    """Upload and return the new attachment's id."""
    response = await client.post(url(sid), data=form(data, name))
    assert response.status == 201, await response.text()
    attachment_id: str = (await response.json())["attachment"]["id"]
    return attachment_id


def multipart(data: bytes, disposition: str, content_type: str = "text/plain") -> bytes:
    """One ``file`` part, its Content-Disposition parameters written as given (UTF-8)."""
    head = (
        f"--{BOUNDARY}\r\n"
        f'Content-Disposition: form-data; name="file"; {disposition}\r\n'
        f"Content-Type: {content_type}\r\n\r\n"
    )
    return head.encode() + data + f"\r\n--{BOUNDARY}--\r\n".encode()


async def error_of(response: aiohttp.ClientResponse, status: int) -> str:
    assert response.status == status, await response.text()
    code: str = (await response.json())["error"]["code"]
    return code


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


def session_counts(db: Path, sid: str) -> dict[str, int]:
    return {
        t: rows(db, f"SELECT count(*) FROM {t} WHERE session_id = ?", sid)[0][0]
        for t in SESSION_TABLES
    }


async def say(
    socket: WebClient, text: str, client_id: str, attachments: list[str]
) -> dict[str, Any]:
    """Send a message frame; its answer (``ack`` or ``error``)."""
    data = {"text": text, "client_id": client_id, "attachments": attachments}
    await socket.send({"type": "message", "data": data})
    answers = await socket.until(
        lambda f: f["type"] in ("ack", "error") and f["data"].get("client_id") == client_id,
        f"answer to {client_id}",
    )
    return answers[-1]


async def converse(socket: WebClient, attachment_id: str, client_id: str = "c1") -> None:
    """A message with one attachment, answered by the demo triage agent: the turn ends."""
    assert (await say(socket, "here is my file", client_id, [attachment_id]))["type"] == "ack"
    await socket.has(is_turn_end, "turn end")


# 1. upload


async def test_upload_stores_the_exact_bytes_under_the_session_and_its_row(gw: Gateway) -> None:
    data = bytes(range(256)) * 3  # every byte value, NUL and CR LF included
    async with web_session(gw.client) as socket:
        sid = socket.session_id
        response = await gw.client.post(url(sid), data=form(data, "notes.txt"))
        assert response.status == 201
        answer = await response.json()
    attachment = answer["attachment"]
    assert set(attachment) == {"id", "name", "content_type", "size"}
    assert HEX32.fullmatch(attachment["id"])
    assert attachment == {
        "id": attachment["id"],
        "name": "notes.txt",
        "content_type": "text/plain",
        "size": len(data),
    }
    assert files_under(gw.media) == [gw.folder(sid) / attachment["id"]]
    assert (gw.folder(sid) / attachment["id"]).read_bytes() == data
    stored = rows(
        gw.db,
        "SELECT session_id, name, content_type, size, state, source FROM attachments WHERE id = ?",
        attachment["id"],
    )
    assert stored == [(sid, "notes.txt", "text/plain", len(data), "ready", "upload")]


async def test_an_upload_makes_owner_only_folders_and_file(gw: Gateway) -> None:
    """Users' files: the media root, the session's folder and the file are the gateway's
    alone (docs/security.md), whatever the umask. Before: 0755 folders and a 0644 file."""
    before = os.umask(0)
    try:
        async with web_session(gw.client) as socket:
            attachment_id = await uploaded(gw.client, socket.session_id, b"private")
    finally:
        os.umask(before)
    folder = gw.folder(socket.session_id)
    modes = [stat.S_IMODE(p.stat().st_mode) for p in (gw.media, folder, folder / attachment_id)]
    assert modes == [0o700, 0o700, 0o600]


# 2. referenced in a message


async def test_message_with_an_attachment_reaches_the_turn_and_its_stored_message(
    gw: Gateway,
) -> None:
    async with web_session(gw.client) as socket:
        sid = socket.session_id
        attachment_id = await uploaded(gw.client, sid, b"hello world", "notes.txt")
        ack = await say(socket, "here is my file", "c1", [attachment_id])
        assert ack["type"] == "ack"
        assert ack["data"] == {"client_id": "c1", "duplicate": False}
        shown = await socket.has(
            lambda f: f["type"] == "message" and f["data"]["role"] == "user", "user message"
        )
        assert shown["data"]["attachments"] == [attachment_id]
        await socket.has(is_turn_end, "turn end")

    async def stored_user_message() -> bool:
        return bool(
            rows(gw.db, "SELECT 1 FROM messages WHERE session_id = ? AND role = 'user'", sid)
        )

    await eventually(stored_user_message, "the turn's user message")
    [(text, data)] = rows(
        gw.db, "SELECT text, data FROM messages WHERE session_id = ? AND role = 'user'", sid
    )
    assert json.loads(data)["attachments"] == [attachment_id]
    assert "here is my file" in text
    assert "[attached text: notes.txt (text/plain, 11 bytes)]" in text


async def test_a_referenced_upload_is_shown_to_the_socket_by_name_before_its_message(
    gw: Gateway,
) -> None:
    """Every socket of the session (and the console, from the same log) learns an upload's
    name and type as it learns a platform file's: from an ``attachment`` event."""
    async with web_session(gw.client) as socket:
        attachment_id = await uploaded(gw.client, socket.session_id, b"hello world", "notes.txt")
        assert (await say(socket, "here is my file", "c1", [attachment_id]))["type"] == "ack"
        await socket.has(
            lambda f: f["type"] == "message" and f["data"]["role"] == "user", "user message"
        )
        [described, message] = socket.logged()[:2]
    assert described["type"] == "attachment"
    assert described["data"] == {
        "id": attachment_id,
        "name": "notes.txt",
        "content_type": "text/plain",
        "size": 11,
        "state": "ready",
        "message_key": web_dedup_key(socket.session_id.removeprefix("web-"), "c1"),
        "at": described["data"]["at"],
    }
    assert (message["type"], message["seq"]) == ("message", described["seq"] + 1)
    assert message["data"]["attachments"] == [attachment_id]


@pytest.mark.parametrize("kind", ["other_session", "made_up", "malformed"])
async def test_message_with_a_foreign_or_unknown_attachment_gets_an_error_and_no_inbox_row(
    gw: Gateway, kind: str
) -> None:
    async with web_session(gw.client) as other, web_session(gw.client) as socket:
        foreign = await uploaded(gw.client, other.session_id, b"not yours")
        attachment_id = {
            "other_session": foreign,
            "made_up": uuid.uuid4().hex,
            "malformed": "../../etc/passwd",
        }[kind]
        error = await say(socket, "look", "bad-1", [attachment_id])
        assert error["type"] == "error"
        assert error["data"]["code"] == "unknown_attachment"
        # the socket stays open and usable
        own = await uploaded(gw.client, socket.session_id, b"mine")
        assert (await say(socket, "look", "good-1", [own]))["type"] == "ack"
    chat_id = socket.session_id.removeprefix("web-")
    bad_key, good_key = web_dedup_key(chat_id, "bad-1"), web_dedup_key(chat_id, "good-1")

    def inbox_keys() -> set[str]:
        return {k for (k,) in rows(gw.db, "SELECT dedup_key FROM inbox")}

    # the ack follows the delivery's commit; the inbox row comes after it, in order
    await eventually(lambda: good_key in inbox_keys(), "the good message's inbox row")
    assert bad_key not in inbox_keys()
    assert rows(gw.db, "SELECT count(*) FROM processed_messages WHERE key LIKE '%bad-1%'") == [(0,)]
    assert session_counts(gw.db, socket.session_id)["inbox"] == 1


# 3. an operator's download


async def test_operator_downloads_the_file_with_safe_headers(gw: Gateway) -> None:
    data = b"\x00\xffna\xefve bytes\r\n"
    async with web_session(gw.client) as socket:
        sid = socket.session_id
        # as a browser sends it: the name in raw UTF-8 (aiohttp's own client would
        # percent-encode it, and aiohttp's server keeps those escapes as they are)
        body = multipart(data, 'filename="résumé final.txt"', "text/plain; charset=utf-8")
        response = await gw.client.post(url(sid), data=body, headers=MULTIPART)
        attachment_id = (await response.json())["attachment"]["id"]
    response = await gw.client.get(f"/api/sessions/{sid}/attachments/{attachment_id}", headers=AUTH)
    assert response.status == 200
    assert await response.read() == data
    assert response.headers["Content-Type"] == "text/plain"
    assert response.headers["Content-Disposition"] == (
        "attachment; filename*=UTF-8''r%C3%A9sum%C3%A9%20final.txt"
    )
    assert response.headers["X-Content-Type-Options"] == "nosniff"


async def test_operator_download_refusals(gw: Gateway) -> None:
    async with web_session(gw.client) as first, web_session(gw.client) as second:
        mine = await uploaded(gw.client, first.session_id, b"first's")
        theirs = await uploaded(gw.client, second.session_id, b"second's")
    path = f"/api/sessions/{first.session_id}/attachments"
    assert await error_of(await gw.client.get(f"{path}/{mine}"), 401) == "unauthorized"
    wrong = {"Authorization": "Bearer wrong"}
    response = await gw.client.get(f"{path}/{mine}", headers=wrong)
    assert await error_of(response, 401) == "unauthorized"
    # another session's id is not found here, though it exists
    assert await error_of(await gw.client.get(f"{path}/{theirs}", headers=AUTH), 404) == (
        "unknown_attachment"
    )
    # a malformed id is a 404 too (the store refuses it, the route says "not here"), not a 400
    for malformed in ("not-an-id", mine.upper(), mine[:31], mine + "0", "..."):
        response = await gw.client.get(f"{path}/{malformed}", headers=AUTH)
        assert await error_of(response, 404) == "unknown_attachment", malformed
    unknown = f"/api/sessions/web-{uuid.uuid4()}/attachments/{mine}"
    assert await error_of(await gw.client.get(unknown, headers=AUTH), 404) == "unknown_session"


# 4. size limit


async def chunked(body: bytes, size: int = 200) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


@pytest.mark.parametrize(
    ("size", "how"),
    [
        (MAX_BYTES + 1, "content_length"),  # read, then refused once past the limit
        (200_000, "content_length"),  # refused on the header, before the body is read
        (MAX_BYTES + 1, "chunked"),
        (20_000, "chunked"),
    ],
)
async def test_upload_over_max_bytes_is_413_and_leaves_nothing(
    gw: Gateway, size: int, how: str
) -> None:
    async with web_session(gw.client) as socket:
        sid = socket.session_id
        body = multipart(b"x" * size, 'filename="big.bin"')
        data: Any = body if how == "content_length" else chunked(body)
        response = await gw.client.post(url(sid), data=data, headers=MULTIPART)
        assert await error_of(response, 413) == "too_large"
        assert files_under(gw.media) == []  # no file, no .part
        assert rows(gw.db, "SELECT count(*) FROM attachments")[0][0] == 0
        # exactly the limit is fine
        exact = multipart(b"y" * MAX_BYTES, 'filename="exact.bin"')
        fits = await gw.client.post(url(sid), data=chunked(exact), headers=MULTIPART)
        assert fits.status == 201
        assert (await fits.json())["attachment"]["size"] == MAX_BYTES


async def stalled_upload(client: Client, sid: str) -> tuple[asyncio.StreamReader, Any]:
    """An upload whose body stops half-way: the connection's reader and writer."""
    body = multipart(b"z" * 600, 'filename="slow.bin"')
    head = (
        f"POST {url(sid)} HTTP/1.1\r\nHost: localhost\r\n"
        f"Content-Type: {MULTIPART['Content-Type']}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    writer.write(head.encode() + body[: len(body) // 2])
    await writer.drain()
    return reader, writer


async def test_a_stalled_upload_holds_one_upload_slot_and_is_dropped_with_408(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """Uploads have slots of their own: past them 503 ``busy``; a body that stops sending for
    server.read_timeout gets 408 on a closed connection and leaves no file and no row."""
    db, media = tmp_path / "gateway.db", tmp_path / "media"
    server = {"read_timeout": 0.5, "max_concurrent_reads": 1}
    app = build_app(settings(db, server=server, media={"root": str(media), "max_bytes": 1000}))
    client: Client = await aiohttp_client(app)
    async with web_session(client) as socket:
        sid = socket.session_id
        reader, writer = await stalled_upload(client, sid)
        await eventually(lambda: app[UPLOADS].in_use == 1, "the stalled upload's slot")
        busy = await client.post(url(sid), data=form(b"hi"))
        assert await error_of(busy, 503) == "busy"
        assert busy.headers.get("Connection", "").lower() == "close"
        answer = await reader.read()  # until the server closes the connection
        writer.close()
        status_line, _, rest = answer.partition(b"\r\n")
        assert status_line == b"HTTP/1.1 408 Request Timeout", answer
        assert b'"request_timeout"' in rest
        assert files_under(media) == []
        assert rows(db, "SELECT count(*) FROM attachments")[0][0] == 0
        assert app[UPLOADS].in_use == 0
        after = await client.post(url(sid), data=form(b"hello"))
        assert after.status == 201, await after.text()


async def test_an_upload_whose_session_is_deleted_meanwhile_is_404_and_leaves_nothing(
    gw: Gateway,
) -> None:
    """The session's folder goes with the session while the file is being written: a JSON 404
    ``unknown_session``, not aiohttp's plain-text 500 and a traceback in the log."""
    async with web_session(gw.client) as socket:
        sid = socket.session_id
        await uploaded(gw.client, sid, b"first")  # stores the session
        reader, writer = await stalled_upload(gw.client, sid)
        parts = lambda: [p for p in gw.media.rglob("*.part")]  # noqa: E731
        await eventually(lambda: parts() != [], "the upload's file being written")
        deleted = await gw.client.delete(f"/api/sessions/{sid}", headers=AUTH)
        assert deleted.status == 204
        body = multipart(b"z" * 600, 'filename="slow.bin"')
        writer.write(body[len(body) // 2 :])
        await writer.drain()
        answer = await reader.read()
        writer.close()
        status_line, _, rest = answer.partition(b"\r\n")
        assert status_line == b"HTTP/1.1 404 Not Found", answer
        assert b'"unknown_session"' in rest
    assert files_under(gw.media) == []
    assert rows(gw.db, "SELECT count(*) FROM attachments")[0][0] == 0


# 5. crafted file names

PATTERNS = [
    "../x.txt",
    "../../etc/passwd",
    "../../../../../../../../etc/hosts",
    "/etc/shadow",
    "/",
    "./../.ssh/authorized_keys",
    "a\x00b.txt",
    "\x00",
    "evil.txt\x00.jpg",
    "x" * 1000,
    "ü" * 1000,
    "C:\\x\\..\\y",
    "..\\..\\boot.ini",
    "\\\\server\\share\\doc",
    "C:",
    "report\u202efdp.exe",
    "\u202e",
    "e\u0301\u0308\u0323.txt",
    "\u0301\u0301\u0301",
    "😀🎉.png",
    "👨‍👩‍👧‍👦" * 40,
    ".",
    "..",
    "...",
    ". ..",
    "",
    " ",
    "line\nbreak.txt",
    "crlf\r\nSet-Cookie: a=b",
    "tab\tbell\x07esc\x1b[2J",
    "del\x7f\x85nel",
    '"quoted".txt',
    "semi;colon.txt",
    "percent%2F..%2Fname",
    "zero\u200bwidth\ufeff",
    "שלום/../עולם.txt",
]


def crafted(index: int) -> str:
    """The index-th crafted name: a pattern, with a prefix or suffix after the first round."""
    pattern = PATTERNS[index % len(PATTERNS)]
    match index // len(PATTERNS):
        case 0:
            return pattern
        case 1:
            return f"{pattern}/"
        case 2:
            return f"..{pattern}"
        case 3:
            return f"{pattern}\x00/../{index}"
        case 4:
            return f"sub/{pattern}"
        case _:
            return f"\\{pattern}\\.."


def disposition(index: int, name: str) -> str:
    """Send every name once percent-encoded (RFC 5987: it arrives exactly as written) and,
    where a multipart header can carry it, as a browser's quoted string."""
    if index % 2 == 0 or CONTROL.search(name) or len(name.encode()) > 4000:
        return f"filename*=UTF-8''{quote(name, safe='')}"
    escaped = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'filename="{escaped}"'


async def test_upload_crafted_names_stay_in_the_session_folder(gw: Gateway) -> None:
    names = list(dict.fromkeys(crafted(i) for i in range(400)))[:200]  # unique, in order
    assert len(names) == CRAFTED
    ids: dict[str, bytes] = {}  # attachment id -> the bytes sent
    async with web_session(gw.client) as socket:
        sid = socket.session_id
        for index, name in enumerate(names):
            body = multipart(f"file {index}".encode(), disposition(index, name))
            response = await gw.client.post(url(sid), data=body, headers=MULTIPART)
            assert response.status == 201, (name, await response.text())
            attachment = (await response.json())["attachment"]
            shown = attachment["name"]
            assert shown, name
            assert not {"/", "\\", "\x00"} & set(shown), (name, shown)
            assert not CONTROL.search(shown), (name, shown)
            # nor any other Unicode "other" character: format (U+202E), surrogate, unassigned
            assert all(unicodedata.category(ch)[0] != "C" for ch in shown), (name, shown)
            assert len(shown) <= 255, name
            assert shown not in (".", ".."), name
            ids[attachment["id"]] = f"file {index}".encode()
    assert len(ids) == CRAFTED
    stored = files_under(gw.media)
    assert {p.name for p in stored} == set(ids)
    for path in stored:
        assert path.parent == gw.folder(sid)
        assert HEX32.fullmatch(path.name)
        assert path.read_bytes() == ids[path.name]
    assert sorted(p.relative_to(gw.tmp) for p in gw.tmp.rglob("*") if p.is_dir()) == [
        Path("media"),
        Path("media") / sid,
    ]
    outside = {p.name for p in files_under(gw.tmp) if gw.media not in p.parents}
    assert outside <= {"gateway.db", "gateway.db-wal", "gateway.db-shm", "gateway.db-journal"}


# 6. refusals


async def test_upload_refusals(gw: Gateway) -> None:
    store = gw.client.app[STORE]
    telegram = await store.create_session("telegram", "support", "1", "triage")
    assert telegram.session_id == "telegram-support-1"
    missing = f"web-{uuid.uuid4()}"
    for sid in (missing, telegram.session_id):
        response = await gw.client.post(url(sid), data=form(b"x"))
        assert await error_of(response, 404) == "unknown_session", sid
    for sid in ("bad%20id!", "a.b", "x" * 129):
        response = await gw.client.post(url(sid), data=form(b"x"))
        assert await error_of(response, 400) == "invalid_session_id", sid
    async with web_session(gw.client) as socket:
        sid = socket.session_id
        response = await gw.client.post(url(sid), json={"file": "x"})
        assert await error_of(response, 400) == "invalid_body"
        response = await gw.client.post(
            url(sid), data=b"file=x", headers={"Content-Type": "text/plain"}
        )
        assert await error_of(response, 400) == "invalid_body"
        # an HTML form without enctype="multipart/form-data" sends only the file's name
        response = await gw.client.post(url(sid), data={"file": "report.pdf"})
        assert response.request_info.headers["Content-Type"].startswith("application/x-www")
        assert response.status == 400
        error = (await response.json())["error"]
        assert error["code"] == "invalid_body"
        assert 'enctype="multipart/form-data"' in error["message"]
        other = aiohttp.FormData()
        other.add_field("document", b"x", filename="a.txt")
        assert await error_of(await gw.client.post(url(sid), data=other), 400) == "missing_file"
        # a plain field named "file" (no filename) is taken as a file named "file"
        plain = aiohttp.FormData({"file": "just a field"}, default_to_multipart=True)
        response = await gw.client.post(url(sid), data=plain)
        assert response.status == 201
        assert (await response.json())["attachment"]["name"] == "file"
    assert not gw.folder(missing).exists()
    assert not gw.folder(telegram.session_id).exists()


async def test_an_upload_with_no_file_chosen_is_missing_file_and_stores_nothing(
    gw: Gateway,
) -> None:
    """A browser's form whose file input has nothing chosen sends the part with filename=""
    and no bytes (HTML's form data set: a File with an empty name): no file, where a
    stored empty file named "file" was taken before."""
    async with web_session(gw.client) as socket:
        sid = socket.session_id
        body = multipart(b"", 'filename=""', "application/octet-stream")
        response = await gw.client.post(url(sid), data=body, headers=MULTIPART)
        assert response.status == 400
        error = (await response.json())["error"]
        assert (error["code"], error["field"]) == ("missing_file", "file")
        assert "none was chosen" in error["message"]
        assert session_counts(gw.db, sid) == dict.fromkeys(SESSION_TABLES, 0)
        assert not gw.folder(sid).exists()
        # Bytes make it a file, whatever its name: without one (RFC 7578 says a filename
        # SHOULD be sent, not MUST), an empty one, or one of slashes only, it is "file"
        for disposition in ('filename=""', "size=3", 'filename="//"'):
            body = multipart(b"abc", disposition)
            response = await gw.client.post(url(sid), data=body, headers=MULTIPART)
            assert response.status == 201, await response.text()
            assert (await response.json())["attachment"]["name"] == "file"
        # and a named empty file is a file
        body = multipart(b"", 'filename="empty.txt"')
        response = await gw.client.post(url(sid), data=body, headers=MULTIPART)
        assert response.status == 201, await response.text()
        assert (await response.json())["attachment"]["size"] == 0
    assert len(files_under(gw.folder(sid))) == 4


@pytest.mark.parametrize(
    "body",
    [
        # the part's bytes, then the stream ends: no closing boundary
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nabc',
        # the part's bytes and half its boundary
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n'
        f"\r\nabc\r\n--{BOUNDARY[:3]}",
    ],
    ids=["no-closing-boundary", "half-a-boundary"],
)
async def test_a_truncated_upload_is_refused_and_leaves_nothing(gw: Gateway, body: str) -> None:
    """Only a complete file gets its row: a multipart body cut short is 400 invalid_body."""
    async with web_session(gw.client) as socket:
        sid = socket.session_id
        response = await gw.client.post(url(sid), data=body.encode(), headers=MULTIPART)
        assert await error_of(response, 400) == "invalid_body"
        assert files_under(gw.media) == []
        assert session_counts(gw.db, sid)["attachments"] == 0


async def test_an_upload_with_a_content_encoding_is_415_and_leaves_nothing(gw: Gateway) -> None:
    """The body is taken as it is sent: a gzip-encoded upload would be stored compressed."""
    async with web_session(gw.client) as socket:
        sid = socket.session_id
        body = multipart(b"abc", 'filename="a.txt"')
        headers = {**MULTIPART, "Content-Encoding": "gzip"}
        response = await gw.client.post(url(sid), data=body, headers=headers)
        assert await error_of(response, 415) == "unsupported_encoding"
        assert files_under(gw.media) == []
        identity = {**MULTIPART, "Content-Encoding": "identity"}
        assert (await gw.client.post(url(sid), data=body, headers=identity)).status == 201


# 7. deleted with the session


async def two_sessions(gw: Gateway) -> tuple[str, str, list[Path]]:
    """Two web sessions with files, a finished turn each; the second's files."""
    async with web_session(gw.client) as doomed, web_session(gw.client) as kept:
        for socket in (doomed, kept):
            first = await uploaded(gw.client, socket.session_id, b"one")
            await uploaded(gw.client, socket.session_id, b"two")
            await converse(socket, first)
    counts = session_counts(gw.db, doomed.session_id)
    assert all(counts[t] > 0 for t in ("messages", "session_events", "inbox", "attachments"))
    return doomed.session_id, kept.session_id, files_under(gw.folder(kept.session_id))


def assert_erased(
    gw: Gateway, sid: str, kept: str, kept_files: list[Path], before: dict[str, int]
) -> None:
    assert not gw.folder(sid).exists()
    assert session_counts(gw.db, sid) == dict.fromkeys(SESSION_TABLES, 0)
    assert rows(gw.db, "SELECT count(*) FROM inbox WHERE dedup_key LIKE ?", f"web:{sid[4:]}:%") == [
        (0,)
    ]
    assert files_under(gw.folder(kept)) == kept_files
    assert sorted(p.read_bytes() for p in kept_files) == [b"one", b"two"]
    assert session_counts(gw.db, kept) == before


async def test_delete_session_through_the_api_removes_its_files_and_rows(gw: Gateway) -> None:
    sid, kept, kept_files = await two_sessions(gw)
    before = session_counts(gw.db, kept)
    assert session_counts(gw.db, sid)["attachments"] == 2
    response = await gw.client.delete(f"/api/sessions/{sid}", headers=AUTH)
    assert response.status == 204
    assert_erased(gw, sid, kept, kept_files, before)
    again = await gw.client.delete(f"/api/sessions/{sid}", headers=AUTH)
    assert await error_of(again, 404) == "unknown_session"


async def test_delete_session_through_the_cli_removes_its_files_and_rows(gw: Gateway) -> None:
    sid, kept, kept_files = await two_sessions(gw)
    before = session_counts(gw.db, kept)
    await gw.client.close()  # the CLI works offline, on a stopped gateway's store
    config = gw.tmp / "config.toml"
    config.write_text(
        f'[store]\nurl = "sqlite:///{gw.db}"\n[media]\nroot = "{gw.media}"\n', encoding="utf-8"
    )
    out = io.StringIO()
    code = await asyncio.to_thread(main, ["--config", str(config), "sessions", "delete", sid], out)
    assert code == 0, out.getvalue()
    assert f"deleted session {sid}" in out.getvalue()
    assert_erased(gw, sid, kept, kept_files, before)


def block_folder(folder: Path) -> None:
    """Leave in the session folder's place what no rmtree removes, for root too: a file."""
    shutil.rmtree(folder)
    folder.write_bytes(b"stuck")


async def test_a_session_folder_left_by_an_api_delete_is_a_warning_naming_the_session(
    gw: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    sid, kept, kept_files = await two_sessions(gw)
    before = session_counts(gw.db, kept)
    block_folder(gw.folder(sid))
    with caplog.at_level(logging.WARNING, logger="gateway.media"):
        response = await gw.client.delete(f"/api/sessions/{sid}", headers=AUTH)
    assert response.status == 204  # the rows are gone: a retry would be 404
    assert session_counts(gw.db, sid) == dict.fromkeys(SESSION_TABLES, 0)
    assert session_counts(gw.db, kept) == before
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"erased session {sid[:12]}" in warning  # shortened: a web id is a credential
    assert sid not in warning
    assert "1 file(s) left" in warning
    assert "notes.txt" not in warning


async def test_a_session_folder_left_by_a_cli_delete_is_named_on_stderr_with_exit_1(
    gw: Gateway, capsys: pytest.CaptureFixture[str]
) -> None:
    sid, _, _ = await two_sessions(gw)
    block_folder(gw.folder(sid))
    await gw.client.close()
    config = gw.tmp / "config.toml"
    config.write_text(
        f'[store]\nurl = "sqlite:///{gw.db}"\n[media]\nroot = "{gw.media}"\n', encoding="utf-8"
    )
    out = io.StringIO()
    code = await asyncio.to_thread(main, ["--config", str(config), "sessions", "delete", sid], out)
    assert code == 1
    assert f"deleted session {sid}" in out.getvalue()
    err = capsys.readouterr().err
    assert f"its folder {gw.folder(sid)} could not be removed wholly" in err
    assert "remove it by hand" in err
    assert session_counts(gw.db, sid) == dict.fromkeys(SESSION_TABLES, 0)


# 8. the disk: a free-space floor and a bound per session


def floor_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "media.min_free_bytes" in r.getMessage()
    ]


async def test_uploads_under_the_free_space_floor_are_507_leave_nothing_and_warn_once(
    aiohttp_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A loop of connects and uploads must not fill the disk the store lives on: with less
    than media.min_free_bytes free, every upload is refused before it is read; one WARNING
    line says so, not one per request."""
    beyond = shutil.disk_usage(tmp_path).free + 1024 * MIB
    gw = await gateway_with(aiohttp_client, tmp_path, min_free_bytes=beyond)
    caplog.set_level(logging.INFO, logger="gateway")
    async with web_session(gw.client) as socket:
        sid = socket.session_id
        body = multipart(b"x" * 100, 'filename="a.txt"')
        for data in (body, chunked(body), body):
            response = await gw.client.post(url(sid), data=data, headers=MULTIPART)
            assert await error_of(response, 507) == "insufficient_storage"
            assert response.headers.get("Connection", "").lower() == "close"
    assert not gw.media.exists()
    assert session_counts(gw.db, sid) == dict.fromkeys(SESSION_TABLES, 0)  # not even stored
    [warning] = floor_warnings(caplog)
    assert "uploads are refused" in warning


async def test_an_upload_announcing_more_than_the_room_above_the_floor_is_507_unread(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """The floor counts the file to come: a Content-Length that would take the disk under it
    is refused before the body is read, while a small file still fits."""
    free = shutil.disk_usage(tmp_path).free
    room = min(1024 * MIB, free // 2)  # what stays writable above the floor
    gw = await gateway_with(
        aiohttp_client, tmp_path, min_free_bytes=free - room, max_bytes=8 * room
    )
    async with web_session(gw.client) as socket:
        sid = socket.session_id
        head = (
            f"POST {url(sid)} HTTP/1.1\r\nHost: localhost\r\n"
            f"Content-Type: {MULTIPART['Content-Type']}\r\nContent-Length: {4 * room}\r\n\r\n"
        )
        server = gw.client.server
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(head.encode() + multipart(b"z" * 1000, 'filename="big.bin"')[:500])
        await writer.drain()
        answer = await reader.read()  # the server answers and closes without the body
        writer.close()
        status_line, _, rest = answer.partition(b"\r\n")
        assert status_line == b"HTTP/1.1 507 Insufficient Storage", answer
        assert b'"insufficient_storage"' in rest
        assert files_under(gw.media) == []
        await uploaded(gw.client, sid, b"a small file fits")


async def test_an_upload_that_reaches_the_floor_while_streaming_is_507_and_leaves_nothing(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """A body without a Content-Length passes the first check; the file is cut when writing
    it would take the disk under the floor (32 MiB above today's free space: the file's own
    bytes get there, other writers on the machine may shift it by less)."""
    room, size = 32 * MIB, 64 * MIB
    free = shutil.disk_usage(tmp_path).free
    gw = await gateway_with(aiohttp_client, tmp_path, min_free_bytes=free - room, max_bytes=size)
    async with web_session(gw.client) as socket:
        sid = socket.session_id
        body = multipart(b"w" * size, 'filename="huge.bin"')
        response = await gw.client.post(url(sid), data=chunked(body, MIB), headers=MULTIPART)
        assert await error_of(response, 507) == "insufficient_storage"
        assert files_under(gw.media) == []  # no file, no .part
        assert session_counts(gw.db, sid)["attachments"] == 0


async def test_a_web_session_holds_at_most_max_uploads_per_session_files(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """One session cannot take the disk either: past media.max_uploads_per_session its
    uploads are 409 ``too_many_uploads``, before the body is read; other sessions go on."""
    gw = await gateway_with(aiohttp_client, tmp_path, max_uploads_per_session=3)
    async with web_session(gw.client) as socket, web_session(gw.client) as other:
        sid = socket.session_id
        kept = [await uploaded(gw.client, sid, f"file {i}".encode()) for i in range(3)]
        more = multipart(b"one more", 'filename="x"')
        for data in (more, chunked(more)):
            response = await gw.client.post(url(sid), data=data, headers=MULTIPART)
            assert await error_of(response, 409) == "too_many_uploads"
            assert response.headers.get("Connection", "").lower() == "close"
        assert {p.name for p in files_under(gw.folder(sid))} == set(kept)
        assert session_counts(gw.db, sid)["attachments"] == 3
        await uploaded(gw.client, other.session_id, b"another session's first file")


async def test_uploads_under_way_together_never_take_a_session_past_its_bound(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """The bound counts the session's uploads still being received here: one whose body is
    still coming holds the last place, so another sent meanwhile is 409 (both once passed the
    count of stored files, and the session ended a file over)."""
    gw = await gateway_with(aiohttp_client, tmp_path, max_uploads_per_session=2)
    app = gw.client.server.app
    async with web_session(gw.client) as socket:
        sid = socket.session_id
        first = await uploaded(gw.client, sid, b"first")
        body = multipart(b"z" * 600, 'filename="slow.bin"')
        reader, writer = await stalled_upload(gw.client, sid)
        await eventually(lambda: app[UNDER_WAY].get(sid) == 1, "the slow upload under way")
        response = await gw.client.post(
            url(sid), data=multipart(b"x", 'filename="x"'), headers=MULTIPART
        )
        assert await error_of(response, 409) == "too_many_uploads"
        writer.write(body[len(body) // 2 :])  # the slow one's rest: it takes the last place
        await writer.drain()
        status_line, _, _ = (await reader.readuntil(b"\r\n\r\n")).partition(b"\r\n")
        writer.close()
        assert status_line == b"HTTP/1.1 201 Created"
        assert session_counts(gw.db, sid)["attachments"] == 2
        assert first in {p.name for p in files_under(gw.folder(sid))}
    assert app[UNDER_WAY] == {}
