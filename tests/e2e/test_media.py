"""Platform media brought in by the real ``gateway serve``, from the fake Graph and Bot API servers.

The files are served by the fakes (trusted origins: they are the configured API base URLs);
``Sink`` stands for anywhere else a hostile URL or redirect could point, and must hear nothing.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pytest_aiohttp import AiohttpServer

from .conftest import MakeGateway, Platforms
from .fakes import FakeGraph, FakePlatform, Hit, Sink
from .gateway_proc import BOT_TOKEN, Gateway, eventually
from .test_roundtrip import telegram_session as tg_session
from .test_roundtrip import whatsapp_session as wa_session
from .webhooks import (
    post,
    telegram_document,
    telegram_photo,
    whatsapp_document,
    whatsapp_image,
    whatsapp_messages,
)

HELP = "Hello! I can help with bills, invoices, refunds and payments, or pass you to a person."
BEARER = "Bearer e2e-access-token"
JPEG = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 12  # 3,076 bytes: "3 KB"
PDF = b"%PDF-1.7\n" + b"p" * 691  # 700 bytes
FAILED_IMAGE = "[attached image: image, could not be downloaded]"
PENDING_IMAGE = "[attached image: image, still downloading]"


@dataclass(frozen=True)
class Row:
    id: str
    name: str
    content_type: str
    size: int
    state: str
    error: str | None


@dataclass(frozen=True)
class SinkServer:
    sink: Sink
    port: int


@pytest.fixture
async def sink(aiohttp_server: AiohttpServer) -> SinkServer:
    fake = Sink()
    server = await aiohttp_server(fake.app(), host="127.0.0.1")
    return SinkServer(fake, server.port)


def media(tmp_path: Path, **values: Any) -> dict[str, dict[str, Any]]:
    """The ``[media]`` section: files under ``tmp_path``, plus ``values``."""
    return {"media": {"root": str(tmp_path / "media"), **values}}


async def post_images(
    http: aiohttp.ClientSession, gateway: Gateway, users: list[str], prefix: str
) -> None:
    """One WhatsApp image per user; the i-th carries media id ``<prefix>-<i>``."""
    for i, user in enumerate(users):
        delivery = whatsapp_messages(user, whatsapp_image(f"wamid.{prefix}{i}", f"{prefix}-{i}"))
        assert await post(http, gateway.url, delivery) == 200


async def settled_row(gateway: Gateway, graph: FakeGraph, user: str) -> tuple[Row, str]:
    """The user's attachment once its download ended and the reply arrived, and its error code."""
    sid = wa_session(user)
    await eventually(lambda: settled(gateway, sid), f"the download of {sid}")
    [row] = rows(gateway, sid)
    await replied(graph, user)
    return row, (row.error or "").split(":")[0]


def rows(gateway: Gateway, session_id: str) -> list[Row]:
    found = gateway.query(
        "SELECT id, name, content_type, size, state, error FROM attachments"
        " WHERE session_id = ? ORDER BY created_at, id",
        session_id,
    )
    return [Row(*row) for row in found]


def settled(gateway: Gateway, session_id: str, count: int = 1) -> bool:
    found = rows(gateway, session_id)
    return len(found) == count and all(row.state != "pending" for row in found)


def user_texts(gateway: Gateway, session_id: str) -> list[str]:
    found = gateway.query(
        "SELECT text FROM messages WHERE session_id = ? AND role = 'user' ORDER BY id", session_id
    )
    return [row[0] for row in found]


def attachment_events(gateway: Gateway, session_id: str) -> list[dict[str, Any]]:
    found = gateway.query(
        "SELECT detail FROM session_events WHERE session_id = ? AND kind = 'attachment'"
        " ORDER BY id",
        session_id,
    )
    return [json.loads(row[0]) for row in found]


def files_on_disk(tmp_path: Path, session_id: str) -> list[str]:
    """Every name in the session's folder, temporary files included."""
    folder = tmp_path / "media" / session_id
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def downloads(fake: FakePlatform, fragment: str) -> list[Hit]:
    return fake.media_hits(fragment)


async def replied(fake: FakePlatform, chat_id: str, count: int = 1) -> None:
    await eventually(lambda: fake.texts(chat_id) == [HELP] * count, f"the reply to {chat_id}")


async def test_e2e_images_and_documents_are_downloaded_and_linked_to_the_turn(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    graph, telegram = platforms.graph, platforms.telegram
    graph.add_media("wa-img", JPEG, content_type="image/jpeg")
    graph.add_media("wa-doc", PDF, content_type="application/pdf")
    telegram.add_media("tg-large", JPEG, content_type="image/jpeg", file_path="photos/file_1.jpg")
    # Telegram's file server names no type for a document; the message's mime_type must stay.
    telegram.add_media("tg-doc", PDF, file_path="documents/file_2.pdf")
    gateway = await make_gateway(sections=media(tmp_path, download_wait_seconds=5))

    wa = "15550005001"
    image = whatsapp_image("wamid.img1", "wa-img", caption="look at this")
    document = whatsapp_document("wamid.doc1", "wa-doc", "report.pdf", "application/pdf")
    assert await post(http, gateway.url, whatsapp_messages(wa, image, document)) == 200
    sizes = [("tg-small", 90, 67), ("tg-large", 1280, 960), ("tg-mid", 320, 240)]
    photo = telegram_photo(5101, 5002, sizes, caption="look at this")
    pdf = telegram_document(5102, 5002, "tg-doc", "report.pdf", "application/pdf", len(PDF))
    for delivery in (photo, pdf):
        assert await post(http, gateway.url, delivery) == 200

    await replied(graph, wa, 2)
    await replied(telegram, "5002", 2)
    expected_texts = [
        "look at this\n[attached image: image (image/jpeg, 3 KB)]",
        "[document]\n[attached application: report.pdf (application/pdf, 700 bytes)]",
    ]
    for sid in (wa_session(wa), tg_session(5002)):
        await eventually(lambda sid=sid: settled(gateway, sid, 2), f"both files of {sid}")
        found = rows(gateway, sid)
        assert sorted((r.name, r.content_type, r.size, r.state) for r in found) == [
            ("image", "image/jpeg", len(JPEG), "ready"),
            ("report.pdf", "application/pdf", len(PDF), "ready"),
        ]
        by_name = {r.name: r for r in found}
        folder = tmp_path / "media" / sid
        assert (folder / by_name["image"].id).read_bytes() == JPEG
        assert (folder / by_name["report.pdf"].id).read_bytes() == PDF
        assert files_on_disk(tmp_path, sid) == sorted(r.id for r in found)  # no .part left
        events = attachment_events(gateway, sid)
        assert sorted((e["id"], e["state"]) for e in events) == sorted(
            (r.id, "ready") for r in found
        )
        assert user_texts(gateway, sid) == expected_texts

    assert len(downloads(telegram, "/photos/file_1.jpg")) == 1  # the largest size's file
    assert {h.headers.get("Authorization") for h in graph.hits} == {BEARER}


async def test_e2e_a_telegram_document_without_mime_type_is_typed_by_its_name(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """Telegram may leave a document's mime_type out, and its file server names no type."""
    telegram = platforms.telegram
    telegram.add_media("tg-pdf", PDF, file_path="documents/file_3.pdf")
    telegram.add_media("tg-odd", PDF, file_path="documents/file_4")
    gateway = await make_gateway(sections=media(tmp_path, download_wait_seconds=5))

    pdf = telegram_document(5201, 5003, "tg-pdf", "report.pdf", None, len(PDF))
    odd = telegram_document(5202, 5003, "tg-odd", "report", None, len(PDF))
    for delivery in (pdf, odd):
        assert await post(http, gateway.url, delivery) == 200

    await replied(telegram, "5003", 2)
    sid = tg_session(5003)
    await eventually(lambda: settled(gateway, sid, 2), f"both files of {sid}")
    assert sorted((r.name, r.content_type, r.state) for r in rows(gateway, sid)) == [
        ("report", "application/octet-stream", "ready"),
        ("report.pdf", "application/pdf", "ready"),
    ]
    assert user_texts(gateway, sid) == [
        "[document]\n[attached application: report.pdf (application/pdf, 700 bytes)]",
        "[document]\n[attached application: report (application/octet-stream, 700 bytes)]",
    ]


REFUSED_URLS = [
    ("http://127.0.0.1:{sink}/x", "not_https"),
    ("https://127.0.0.1:{sink}/x", "host_not_allowed"),
    ("https://169.254.169.254/latest/meta-data/", "host_not_allowed"),
    ("https://10.1.2.3/x", "host_not_allowed"),
    # Allowlisted host, plain http: refused by the scheme rule, before any DNS lookup (a lookup
    # would need the internet and fail as "network: cannot resolve").
    ("http://lookaside.fbsbx.com/x", "not_https"),
    (None, "not_https"),  # the fake's own media URL, answering 302 to the sink
]


async def test_e2e_whatsapp_media_urls_off_the_platform_are_refused_without_a_request(
    make_gateway: MakeGateway,
    platforms: Platforms,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    sink: SinkServer,
) -> None:
    graph = platforms.graph
    users = [f"1555000600{i}" for i in range(len(REFUSED_URLS))]
    for i, (url, _) in enumerate(REFUSED_URLS):
        if url is None:
            to_sink = f"http://127.0.0.1:{sink.port}/x"
            graph.add_media(f"bad-{i}", JPEG, answer="redirect", location=to_sink)
        else:
            graph.add_media(f"bad-{i}", JPEG, url=url.format(sink=sink.port))
    gateway = await make_gateway(sections=media(tmp_path, download_wait_seconds=5))

    await post_images(http, gateway, users, "bad")
    for (_, code), user in zip(REFUSED_URLS, users, strict=True):
        sid = wa_session(user)
        row, found = await settled_row(gateway, graph, user)
        assert (row.state, found) == ("failed", code), row
        assert files_on_disk(tmp_path, sid) == []
        assert user_texts(gateway, sid) == [f"[image]\n{FAILED_IMAGE}"]
        assert [e["state"] for e in attachment_events(gateway, sid)] == ["failed"]

    assert sink.sink.hits == []  # nothing reached it, so neither did the access token
    [redirected] = downloads(graph, f"/media-bytes/bad-{len(REFUSED_URLS) - 1}")
    assert redirected.headers.get("Authorization") == BEARER  # its own origin only
    assert downloads(graph, "/media-bytes/") == [redirected]


PRIVATE_HOSTS = ["127.0.0.1", "169.254.169.254", "10.1.2.3"]


async def test_e2e_allowlisted_hosts_at_private_addresses_are_refused_without_a_request(
    make_gateway: MakeGateway,
    platforms: Platforms,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    sink: SinkServer,
) -> None:
    # An operator who put these on the allowlist still cannot reach them: the address rule.
    graph = platforms.graph
    users = [f"1555000700{i}" for i in range(len(PRIVATE_HOSTS))]
    for i, host in enumerate(PRIVATE_HOSTS):
        port = f":{sink.port}" if host == "127.0.0.1" else ""
        graph.add_media(f"private-{i}", JPEG, url=f"https://{host}{port}/x")
    sections = media(tmp_path, download_wait_seconds=5, allowed_hosts=PRIVATE_HOSTS)
    gateway = await make_gateway(sections=sections)
    await post_images(http, gateway, users, "private")
    for user in users:
        row, found = await settled_row(gateway, graph, user)
        assert (row.state, found) == ("failed", "private_address"), row
    assert sink.sink.hits == []


async def test_e2e_telegram_file_redirect_is_refused_and_the_token_goes_nowhere(
    make_gateway: MakeGateway,
    platforms: Platforms,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    sink: SinkServer,
) -> None:
    telegram = platforms.telegram
    to_sink = f"http://127.0.0.1:{sink.port}/x"
    telegram.add_media(
        "tg-302", JPEG, file_path="photos/file_9.jpg", answer="redirect", location=to_sink
    )
    gateway = await make_gateway(sections=media(tmp_path, download_wait_seconds=5))

    delivery = telegram_photo(5201, 5003, [("tg-302", 800, 600)])
    assert await post(http, gateway.url, delivery) == 200
    sid = tg_session(5003)
    await eventually(lambda: settled(gateway, sid), "the refused download")
    [row] = rows(gateway, sid)
    assert row.state == "failed"
    assert (row.error or "").startswith("not_https"), row.error
    await replied(telegram, "5003")

    [download] = downloads(telegram, "/photos/file_9.jpg")
    assert BOT_TOKEN in download.path  # Telegram's file URL holds the token...
    assert sink.sink.hits == []  # ...which never went where the redirect pointed
    secret = BOT_TOKEN.split(":", 1)[1]
    assert secret not in (row.error or "")
    assert secret not in gateway.log(tail=100_000)
    assert files_on_disk(tmp_path, sid) == []


async def test_e2e_oversize_media_stops_at_the_limit(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    graph, telegram = platforms.graph, platforms.telegram
    limit = 10_000
    graph.add_media("wa-big", b"x" * (limit + 1), content_type="image/jpeg")  # file_size says so
    telegram.add_media("tg-big", b"x" * (limit + 1), file_path="photos/big.jpg")
    # Content-Length too large, and no body is sent until released: reading it would time out.
    graph.add_media("wa-length", announce_size=False, answer="announce", content_length=limit * 5)
    stream = telegram.add_media(
        "tg-stream",
        announce_size=False,
        file_path="photos/stream.jpg",
        answer="stream",
        stream_bytes=16 * 1024 * 1024,
    )
    settings = media(tmp_path, max_bytes=limit, download_timeout=30, download_wait_seconds=5)
    gateway = await make_gateway(sections=settings)

    for user, media_id in (("15550007001", "wa-big"), ("15550007002", "wa-length")):
        delivery = whatsapp_messages(user, whatsapp_image(f"wamid.{media_id}", media_id))
        assert await post(http, gateway.url, delivery) == 200
    for update_id, (chat, file_id) in enumerate(((7003, "tg-big"), (7004, "tg-stream")), 7000):
        delivery = telegram_photo(update_id, chat, [(file_id, 800, 600)])
        assert await post(http, gateway.url, delivery) == 200

    sessions = [
        wa_session("15550007001"),
        wa_session("15550007002"),
        tg_session(7003),
        tg_session(7004),
    ]
    for sid in sessions:
        await eventually(lambda sid=sid: settled(gateway, sid), f"the download of {sid}")
        [row] = rows(gateway, sid)
        assert (row.state, (row.error or "").split(":")[0]) == ("failed", "too_large"), row
        assert files_on_disk(tmp_path, sid) == []

    # Announced by the API: the file URL was never asked for.
    assert downloads(graph, "/media-bytes/wa-big") == []
    assert downloads(telegram, "/photos/big.jpg") == []
    # Announced by Content-Length: refused with the body still held back (it is sent only
    # after a release, and reading it would have ended in a timeout, not too_large).
    assert len(downloads(graph, "/media-bytes/wa-length")) == 1
    assert not graph.release.is_set()
    # Streamed without a length: the gateway hung up long before the end.
    assert stream.streamed < stream.stream_bytes
    for fake, chat in ((graph, "15550007001"), (graph, "15550007002"), (telegram, "7003")):
        await replied(fake, chat)
    await replied(telegram, "7004")


async def test_e2e_a_hanging_download_does_not_delay_the_reply(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    graph, telegram = platforms.graph, platforms.telegram
    graph.add_media("wa-slow", JPEG, content_type="image/jpeg", answer="hang")
    telegram.add_media("tg-slow", PDF, file_path="documents/slow.pdf", answer="hang")
    settings = media(tmp_path, download_timeout=30, download_wait_seconds=0.5)
    gateway = await make_gateway(sections=settings)

    wa, chat = "15550008001", 8002
    delivery = whatsapp_messages(wa, whatsapp_image("wamid.slow", "wa-slow"))
    assert await post(http, gateway.url, delivery) == 200
    pdf = telegram_document(8101, chat, "tg-slow", "notes.pdf", "application/pdf", len(PDF))
    assert await post(http, gateway.url, pdf) == 200

    for fake, path, to in ((graph, "/media-bytes/wa-slow", wa), (telegram, "/slow.pdf", str(chat))):
        await eventually(lambda fake=fake, path=path: downloads(fake, path), f"{path} asked for")
        await replied(fake, to)
        # The reply went out while the download was still hanging, not after it.
        [hanging] = downloads(fake, path)
        [reply] = [r for r in fake.sent() if r.chat_id == to]
        assert hanging.at < reply.at
        assert hanging.answered is None
        assert not fake.release.is_set()
    for sid in (wa_session(wa), tg_session(chat)):
        assert [r.state for r in rows(gateway, sid)] == ["pending"]
    assert user_texts(gateway, wa_session(wa)) == [f"[image]\n{PENDING_IMAGE}"]

    graph.release.set()
    telegram.release.set()
    for sid, data in ((wa_session(wa), JPEG), (tg_session(chat), PDF)):
        await eventually(lambda sid=sid: settled(gateway, sid), f"the download of {sid}")
        [row] = rows(gateway, sid)
        assert (row.state, row.size) == ("ready", len(data))
        assert (tmp_path / "media" / sid / row.id).read_bytes() == data
        assert [e["state"] for e in attachment_events(gateway, sid)] == ["ready"]


async def test_e2e_a_download_cut_by_sigkill_is_fetched_after_the_restart(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    graph = platforms.graph
    graph.add_media("wa-cut", JPEG, content_type="image/jpeg", answer="hang")
    settings = media(tmp_path, download_timeout=30, download_wait_seconds=0.5)
    gateway = await make_gateway(sections=settings)

    wa = "15550009001"
    delivery = whatsapp_messages(wa, whatsapp_image("wamid.cut", "wa-cut"))
    assert await post(http, gateway.url, delivery) == 200
    await eventually(lambda: downloads(graph, "/media-bytes/wa-cut"), "the download under way")
    await replied(graph, wa)
    sid = wa_session(wa)
    # Killed only once the reply is recorded as sent: a kill between the platform's answer and
    # that record would send it again after the start (the documented at-least-once window).
    await eventually(
        lambda: gateway.query("SELECT state FROM outbox WHERE session_id = ?", sid) == [("sent",)],
        "the reply recorded as sent",
    )
    await gateway.kill()
    assert [r.state for r in rows(gateway, sid)] == ["pending"]

    graph.release.set()
    await gateway.start()
    await eventually(lambda: settled(gateway, sid), "the download after the restart")
    [row] = rows(gateway, sid)
    assert (row.state, row.size, row.content_type) == ("ready", len(JPEG), "image/jpeg")
    assert (tmp_path / "media" / sid / row.id).read_bytes() == JPEG
    assert len(downloads(graph, "/media-bytes/wa-cut")) == 2  # asked again, after the start
    assert graph.texts(wa) == [HELP]  # the turn is not run again


async def test_e2e_below_the_free_space_floor_a_download_stays_pending_and_is_fetched_later(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """A download that would take the disk under media.min_free_bytes is not started, nor
    failed: the row stays pending (it used to fail for good on a full disk) and is fetched once
    there is room, here after a start with the floor off. The reply does not wait for it."""
    graph = platforms.graph
    graph.add_media("wa-floor", JPEG, content_type="image/jpeg")
    beyond = shutil.disk_usage(tmp_path).free + 1024**3
    settings = media(tmp_path, min_free_bytes=beyond, download_wait_seconds=0.5)
    gateway = await make_gateway(sections=settings)

    wa = "15550009101"
    delivery = whatsapp_messages(wa, whatsapp_image("wamid.floor", "wa-floor"))
    assert await post(http, gateway.url, delivery) == 200
    await replied(graph, wa)
    sid = wa_session(wa)
    assert [r.state for r in rows(gateway, sid)] == ["pending"]
    assert user_texts(gateway, sid) == [f"[image]\n{PENDING_IMAGE}"]
    assert downloads(graph, "wa-floor") == []  # neither the media lookup nor the file
    assert files_on_disk(tmp_path, sid) == []
    await gateway.stop()
    held = [line for line in gateway.log(tail=1000).splitlines() if "held back" in line]
    assert len(held) == 1, held  # one WARNING, not one per pass of the worker

    text = gateway.config_path.read_text(encoding="utf-8")
    gateway.config_path.write_text(
        text.replace(f"min_free_bytes = {beyond}", "min_free_bytes = 0"), encoding="utf-8"
    )
    await gateway.start()
    await eventually(lambda: settled(gateway, sid), "the download once there is room")
    [row] = rows(gateway, sid)
    assert (row.state, row.size, row.content_type) == ("ready", len(JPEG), "image/jpeg")
    assert (tmp_path / "media" / sid / row.id).read_bytes() == JPEG
    assert graph.texts(wa) == [HELP]  # the turn is not run again
