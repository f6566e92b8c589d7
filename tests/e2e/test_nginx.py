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
