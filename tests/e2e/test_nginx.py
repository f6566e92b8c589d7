"""docs/nginx.conf, run as written (ports and paths swapped), in front of two gateway
processes on one PostgreSQL: webhooks through nginx are answered once each, in order, and
keep being answered when one process is killed (nginx moves them to the other)."""

from __future__ import annotations

import asyncio
import shutil
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from .conftest import Platforms, Query
from .gateway_proc import REPO, Gateway, eventually, free_port
from .test_crash import ECHO_AGENTS, Chat, replies
from .test_processes import check_once_in_order, fake_of, make, stop_all
from .webhooks import post_until_ok

# Debian's nginx lives in /usr/sbin, which a plain user's PATH may lack.
NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")


def nginx_config(port: int, upstreams: tuple[int, int]) -> str:
    text = (REPO / "docs" / "nginx.conf").read_text(encoding="utf-8")
    for old, new in (("8080", port), ("8081", upstreams[0]), ("8082", upstreams[1])):
        assert f"127.0.0.1:{old}" in text, old
        text = text.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")
    return text


StartNginx = Callable[[Path], Awaitable[None]]


@pytest.fixture
async def start_nginx() -> AsyncIterator[StartNginx]:
    """Starts nginx in the foreground with ``<prefix>/nginx.conf``; stopped afterwards."""
    if NGINX is None:
        pytest.skip("nginx is not installed (.ci/run installs Debian's nginx)")
    started: list[asyncio.subprocess.Process] = []

    async def start(prefix: Path) -> None:
        config = str(prefix / "nginx.conf")
        started.append(
            await asyncio.create_subprocess_exec(
                NGINX,
                *("-c", config, "-p", str(prefix), "-g", "daemon off;"),
            )
        )

    yield start
    for process in started:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 10)


async def test_nginx_spreads_webhooks_over_two_processes_and_fails_over(
    tmp_path: Path,
    platforms: Platforms,
    http: aiohttp.ClientSession,
    postgres: tuple[str, Query],
    start_nginx: StartNginx,
) -> None:
    url, query = postgres
    first = make(tmp_path, platforms, "a", url, ECHO_AGENTS)
    second = make(tmp_path, platforms, "b", url, ECHO_AGENTS)
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    port = free_port()
    (prefix / "nginx.conf").write_text(nginx_config(port, (first.port, second.port)))
    chats, per_chat = [Chat(i) for i in range(10)], 6
    try:
        await first.start()
        await second.start()
        await start_nginx(prefix)
        front = f"http://127.0.0.1:{port}"
        await eventually(lambda: _answers(front), "nginx", seconds=10)

        async def post_chat(chat: Chat, upto: int, start: int = 0) -> None:
            for n in range(start, upto):
                await post_until_ok(http, front, chat.delivery(n))

        await asyncio.gather(*(post_chat(chat, per_chat // 2) for chat in chats))
        # nginx spread them: both processes acknowledged some.
        assert await _accepted(http, first) > 0
        assert await _accepted(http, second) > 0
        await first.kill()  # nginx sends the rest to the second process
        await asyncio.gather(*(post_chat(chat, per_chat, per_chat // 2) for chat in chats))

        def all_replied() -> bool:
            return all(len(set(replies(fake_of(platforms, c), c))) == per_chat for c in chats)

        await eventually(all_replied, "a reply to every message", seconds=60)
        assert await second.stop() == 0
    finally:
        await stop_all(first, second)
    repeated = await check_once_in_order(query, platforms, chats, per_chat)
    print(f"\nnginx, one of two processes killed: replies repeated in the crash window: {repeated}")


async def _answers(url: str) -> bool:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{url}/healthz", timeout=aiohttp.ClientTimeout(total=1)) as response,
        ):
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def _accepted(http: aiohttp.ClientSession, gateway: Gateway) -> float:
    """The process's count of accepted webhooks, from its /metrics."""
    async with http.get(f"{gateway.url}/metrics") as response:
        text = await response.text()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gateway_webhooks_accepted_total")
    )


class Vanishing:
    """An upstream that reads each request whole, records its path, then closes the connection
    without an answer: a process killed after it committed the request's work."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            length = next(
                (
                    int(v)
                    for k, _, v in (x.partition(":") for x in lines)
                    if k.lower() == "content-length"
                ),
                0,
            )
            await reader.readexactly(length)
            self.paths.append(lines[0].split(" ")[1])
        finally:
            writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.mark.parametrize(
    ("path", "tries"),
    [
        ("/webhooks/telegram/support", 2),  # the dedup guard makes the repeat harmless
        ("/api/sessions/telegram-support-1/reply", 1),  # a repeat would be a second reply
        ("/web/sessions/web-1/attachments", 1),  # ... a second upload
    ],
)
async def test_nginx_passes_only_webhooks_on_after_a_process_vanished_with_the_request(
    tmp_path: Path, start_nginx: StartNginx, path: str, tries: int
) -> None:
    """``non_idempotent`` let nginx send any POST to the other process once the first had
    taken it and died without answering (or took longer than proxy_read_timeout): an
    operator's reply the first process had committed went to the user twice."""
    upstreams = (Vanishing(), Vanishing())
    try:
        ports = (await upstreams[0].start(), await upstreams[1].start())
        prefix = tmp_path / "nginx"
        prefix.mkdir()
        port = free_port()
        (prefix / "nginx.conf").write_text(nginx_config(port, ports))
        await start_nginx(prefix)
        front = f"http://127.0.0.1:{port}"
        await eventually(lambda: _listens(port), "nginx", seconds=10)
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{front}{path}", json={"text": "hello"}) as response,
        ):
            assert response.status == 502
        assert [p for u in upstreams for p in u.paths] == [path] * tries
    finally:
        for upstream in upstreams:
            await upstream.close()


async def _listens(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


async def test_nginx_passes_the_consoles_live_feed_upgrade(
    tmp_path: Path, start_nginx: StartNginx
) -> None:
    """The console's live feed is a WebSocket at /console/live: through location / (which
    sends no Upgrade header) the gateway answered its handshake 400, so behind docs/nginx.conf
    the console never went live."""

    async def live(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"type": "ready"})
        await ws.close()
        return ws

    app = web.Application()
    app.router.add_get("/console/live", live)
    runner = web.AppRunner(app)
    await runner.setup()
    upstream_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", upstream_port).start()
    try:
        prefix = tmp_path / "nginx"
        prefix.mkdir()
        port = free_port()
        (prefix / "nginx.conf").write_text(nginx_config(port, (upstream_port, upstream_port)))
        await start_nginx(prefix)
        await eventually(lambda: _listens(port), "nginx", seconds=10)
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(f"http://127.0.0.1:{port}/console/live") as ws,
        ):
            assert await ws.receive_json(timeout=5) == {"type": "ready"}
    finally:
        await runner.cleanup()
