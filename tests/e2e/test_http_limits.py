"""The real ``gateway serve`` under requests from anyone: each gets a JSON answer or a closed
connection, soon, and nothing in the log is a traceback.

What only the real process shows: the options ``serve`` hands aiohttp (no lingering close
after a refusal, the keep-alive deadline that also bounds a request header).
"""

from __future__ import annotations

import asyncio
import gzip
import re
from functools import partial

import aiohttp

from tests.gateway.raw_http import Raw, head

from .conftest import MakeGateway
from .gateway_proc import ADMIN_TOKEN, BOT, BOT_SECRET, eventually
from .webhooks import post, telegram_text
from .ws_client import connect, is_turn_end

TG = f"/webhooks/telegram/{BOT}"
SECRET = {"X-Telegram-Bot-Api-Secret-Token": BOT_SECRET}
MIB = 1024 * 1024


async def test_e2e_refusals_are_json_and_their_connections_close_at_once(
    make_gateway: MakeGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway(sections={"server": {"keepalive_timeout": 1}})
    port = gateway.port
    assert await post(http, gateway.url, telegram_text(1, 4242, "hello")) == 200
    sid = f"telegram-{BOT}-4242"

    async def session_exists() -> bool:
        return bool(gateway.query("SELECT 1 FROM sessions WHERE session_id = ?", sid))

    await eventually(session_exists, "the session of the first message")

    # 413 on the announced length: answered, then closed, not drained for 10 s.
    raw = await Raw.connect(port)
    await raw.send(head("POST", TG, SECRET, length=10 * MIB) + b"x" * 4096)
    answer = await raw.response()
    assert (answer.status, answer.error["code"]) == (413, "body_too_large")
    assert await raw.closed_within(3) < 2
    raw.close()

    # A compressed body: 415 before a byte of it is read (it never comes).
    raw = await Raw.connect(port)
    await raw.send(head("POST", TG, {**SECRET, "Content-Encoding": "gzip"}, length=4096))
    answer = await raw.response(seconds=3)
    assert (answer.status, answer.error["code"]) == (415, "unsupported_encoding")
    assert await raw.closed_within(3) < 2
    raw.close()

    # A request header that trickles in is cut off at server.keepalive_timeout (1 s here).
    raw = await Raw.connect(port)
    await raw.send(f"POST {TG} HTTP/1.1\r\n".encode())

    async def trickle() -> None:
        for n in range(100):
            await raw.send(b"X-Slow-%d: 1\r\n" % n)
            await asyncio.sleep(0.05)

    sender = asyncio.create_task(trickle())
    try:
        assert await raw.closed_within(4) < 3
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        raw.close()

    # The admin API: bytes that are not UTF-8, JSON nested 10,000 deep, a 2 MiB body.
    raw = await Raw.connect(port)
    await raw.send(head("GET", "/api/sessions", {"Authorization": b"Bearer \xff"}))
    answer = await raw.response()
    assert (answer.status, answer.error["code"]) == (401, "unauthorized")
    raw.close()
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    path = f"/api/sessions/{sid}/handoff"
    for body, status, code in [
        (b"[" * 10_000 + b"]" * 10_000, 400, "json_too_deep"),
        (b" " * 2 * MIB, 413, "body_too_large"),
        (gzip.compress(b'{"agent": "human"}'), 415, "unsupported_encoding"),
    ]:
        headers = {**auth, "Content-Encoding": "gzip"} if code == "unsupported_encoding" else auth
        raw = await Raw.connect(port)  # the 2 MiB one: refused on its length, sent in part
        await raw.send(head("POST", path, headers, length=len(body)) + body[:65536])
        answer = await raw.response()
        assert (answer.status, answer.error["code"]) == (status, code)
        raw.close()

    assert "Traceback" not in gateway.log(tail=10_000)


async def _metric(http: aiohttp.ClientSession, url: str, sample: str) -> float:
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    found = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def test_e2e_a_client_gone_mid_body_is_an_info_line_not_a_traceback(
    make_gateway: MakeGateway, http: aiohttp.ClientSession
) -> None:
    """It was aiohttp's ERROR "Error handling request" with a ConnectionResetError traceback,
    one per connection, from anyone who can reach the webhooks."""
    gateway = await make_gateway()
    for channel, path in [("telegram", TG), ("whatsapp", "/webhooks/whatsapp")]:
        received = f'gateway_webhooks_received_total{{channel="{channel}"}}'
        rejected = (
            f'gateway_webhooks_rejected_total{{channel="{channel}",reason="incomplete_body"}}'
        )
        raw = await Raw.connect(gateway.port)
        await raw.send(head("POST", path, SECRET, length=1000) + b"{")

        async def reading(sample: str = received) -> bool:
            return await _metric(http, gateway.url, sample) == 1

        await eventually(reading, f"the {channel} handler waiting for the body")
        raw.close()
        await eventually(partial(reading, rejected), f"the {channel} refusal counted")
    # The admin API: its handler waits for the body once the token is checked. A request
    # sent after it on another connection is handled after it started: its answer says so.
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    async with connect(http, gateway.url) as client:  # a stored session: it said something
        sid = client.session_id
        await client.say("hello", "c1")
        await client.until(is_turn_end, "the turn's end")
    raw = await Raw.connect(gateway.port)
    await raw.send(head("POST", f"/api/sessions/{sid}/reply", auth, length=1000) + b"{")
    async with http.get(f"{gateway.url}/healthz") as later:
        assert later.status == 200
    raw.close()
    await eventually(
        lambda: "the client went away before its body came" in gateway.log(), "the admin line"
    )
    log = gateway.log(tail=10_000)
    assert "Traceback" not in log
    assert "Error handling request" not in log
    assert "webhook refused: 400 incomplete_body" in log
    assert "POST /api/sessions/{id}/reply: the client went away" in log


async def test_e2e_an_upload_cut_off_leaves_no_file_and_no_traceback(
    make_gateway: MakeGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    async with connect(http, gateway.url) as client:
        sid = client.session_id
    folder = gateway.directory / "data" / "media" / sid
    part = (
        b'--XX\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n'
        b"Content-Type: text/plain\r\n\r\n" + b"x" * 70_000
    )
    headers = {"Content-Type": "multipart/form-data; boundary=XX"}
    raw = await Raw.connect(gateway.port)
    await raw.send(head("POST", f"/web/sessions/{sid}/attachments", headers, length=10**6) + part)
    await eventually(lambda: any(folder.glob(".*.part")), "the upload being written")
    raw.close()
    await eventually(lambda: "upload cut off" in gateway.log(), "the cut-off logged")
    # The session was not stored yet: not even its folder stays (it is removed after the log line).
    await eventually(lambda: not folder.exists(), "the new session's folder removed")
    assert gateway.query("SELECT count(*) FROM attachments") == [(0,)]
    assert "Traceback" not in gateway.log(tail=10_000)


async def test_e2e_an_upload_with_no_file_chosen_is_missing_file_and_keeps_nothing(
    make_gateway: MakeGateway, http: aiohttp.ClientSession
) -> None:
    """What a browser's form sends when its file input has nothing chosen."""
    gateway = await make_gateway()
    async with connect(http, gateway.url) as client:
        sid = client.session_id
    body = (
        b'--XX\r\nContent-Disposition: form-data; name="file"; filename=""\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n\r\n--XX--\r\n"
    )
    headers = {"Content-Type": "multipart/form-data; boundary=XX"}
    upload = f"{gateway.url}/web/sessions/{sid}/attachments"
    async with http.post(upload, data=body, headers=headers) as response:
        assert response.status == 400
        assert (await response.json())["error"]["code"] == "missing_file"
    async with http.post(upload, data={"file": "report.pdf"}) as response:  # no enctype
        assert response.status == 400
        assert (await response.json())["error"]["code"] == "invalid_body"
    assert not (gateway.directory / "data" / "media" / sid).exists()
    assert gateway.query("SELECT count(*) FROM sessions WHERE session_id = ?", sid) == [(0,)]
    assert "Traceback" not in gateway.log(tail=10_000)
