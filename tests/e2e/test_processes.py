"""Several ``gateway serve`` processes on one store (docs/deployment.md).

- Two processes on one PostgreSQL, each message posted to one and its duplicate to the other:
  every message answered once, each session's turns in arrival order, none left ``running``.
- One of two killed with SIGKILL mid-run: the other takes its sessions over once its lease
  ends; nothing lost, nothing run twice, replies repeated only in the crash window (counted).
- A rolling deploy, on SQLite and on PostgreSQL: a second process starts while the first runs a
  slow turn whose tool has a side effect, then the first gets SIGTERM: the tool ran once and
  the turn committed once.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.pg import fresh_schema

from .conftest import Platforms, Query, postgres_query
from .gateway_proc import ADMIN_TOKEN, Gateway, config_text, eventually, free_port
from .test_crash import ECHO_AGENTS, Chat, repeats_outside_the_window, replies
from .webhooks import RETRY_SECONDS, Delivery, post, post_until_ok

LEASE_SECONDS = 3  # short, so a killed process's sessions move over within the test
SLOW_TOOL = '''
import asyncio
import os

from webhook_bot_gateway.agents import tool


@tool
async def slow_side_effect(tag: str) -> str:
    """Write the tag to the side-effect file, then take a while."""
    with open(os.environ["SIDE_EFFECTS"], "a", encoding="utf-8") as out:
        out.write(tag + "\\n")
    seconds = float(os.environ.get("SLOW_SECONDS", "3"))
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        if "HOLD_WHEN_CANCELLED" not in os.environ:
            raise
        await asyncio.sleep(seconds)  # the cancelled turn waits for it: it cannot commit yet
    return "done " + tag
'''
SLOW_AGENTS = """
[agents]
starting_agent = "worker"

[[agents.list]]
name = "worker"
description = "Runs a slow tool with a side effect for every message."
model = "rules"
tools = ["slow_tools.slow_side_effect"]

[[agents.list.rules]]
match = '(?P<tag>c[0-9]+-m[0-9]+)'
tool = "slow_side_effect"
arguments = { tag = "{tag}" }
reply = "{result}"
"""


def make(
    tmp_path: Path, platforms: Platforms, name: str, store_url: str, agents: str, **env: str
) -> Gateway:
    """One process's directory, config and port; all of them share ``store_url``."""
    directory = tmp_path / name
    directory.mkdir()
    (directory / "slow_tools.py").write_text(SLOW_TOOL, encoding="utf-8")
    port = free_port()
    text = config_text(
        port=port,
        db=tmp_path / "unused.db",
        telegram_url=platforms.telegram_url,
        graph_url=platforms.graph_url,
        agents=agents,
        sections={"store": {"url": store_url, "lease_seconds": LEASE_SECONDS}},
    )
    return Gateway(directory, text, port, tmp_path / "gateway.db", env=env)


def slow_tool(tmp_path: Path, seconds: int) -> tuple[Path, dict[str, str]]:
    """The (empty) file the slow tool writes each tag to, and the environment that tells the
    tool of it and of how long it takes."""
    side_effects = tmp_path / "side-effects.txt"
    side_effects.touch()
    return side_effects, {"SIDE_EFFECTS": str(side_effects), "SLOW_SECONDS": str(seconds)}


async def post_to_any(
    http: aiohttp.ClientSession, gateways: tuple[Gateway, ...], delivery: Delivery
) -> None:
    """POST to the first gateway that answers 200, trying each in turn until one does."""
    async with asyncio.timeout(60):
        while True:
            for gateway in gateways:
                try:
                    if await post(http, gateway.url, delivery) == 200:
                        return
                except (aiohttp.ClientError, TimeoutError):
                    pass  # down: the next one
            await asyncio.sleep(RETRY_SECONDS)


async def stop_all(*gateways: Gateway) -> None:
    for gateway in gateways:
        await gateway.ensure_stopped()


def fake_of(platforms: Platforms, chat: Chat) -> Any:
    return platforms.telegram if chat.telegram else platforms.graph


async def check_once_in_order(
    query: Query, platforms: Platforms, chats: list[Chat], per_chat: int
) -> int:
    """Each message: one committed turn, in arrival order, one reply (repeats returned)."""
    repeated = 0
    users = await query(
        "SELECT session_id, text FROM messages WHERE role = 'user' ORDER BY session_id, id"
    )
    by_session: dict[str, list[str]] = {}
    for session_id, text in users:
        by_session.setdefault(session_id, []).append(text)
    for chat in chats:
        expected = [chat.tag(n) for n in range(per_chat)]
        assert by_session.get(chat.session_id) == expected, chat.session_id
        got = replies(fake_of(platforms, chat), chat)
        assert list(dict.fromkeys(got)) == expected, chat.session_id
        repeated += sum(count - 1 for count in Counter(got).values())
    assert await query("SELECT state, count(*) FROM inbox GROUP BY state") == [
        ("done", len(chats) * per_chat)
    ]
    assert await query("SELECT count(*) FROM sessions WHERE status = 'running'") == [(0,)]
    return repeated


async def test_two_processes_on_postgresql_answer_each_message_once_in_order(
    tmp_path: Path,
    platforms: Platforms,
    http: aiohttp.ClientSession,
    postgres: tuple[str, Query],
) -> None:
    url, query = postgres
    first = make(tmp_path, platforms, "a", url, ECHO_AGENTS)
    second = make(tmp_path, platforms, "b", url, ECHO_AGENTS)
    chats, per_chat = [Chat(i) for i in range(12)], 6
    try:
        await first.start()
        await second.start()
        gateways = (first, second)

        async def post_chat(chat: Chat) -> None:
            for n in range(per_chat):
                to, other = gateways[(chat.index + n) % 2], gateways[(chat.index + n + 1) % 2]
                await post_until_ok(http, to.url, chat.delivery(n))
                await post_until_ok(http, other.url, chat.delivery(n))  # the platform's retry

        await asyncio.gather(*(post_chat(chat) for chat in chats))

        def all_replied() -> bool:
            return all(len(set(replies(fake_of(platforms, c), c))) == per_chat for c in chats)

        await eventually(all_replied, "a reply to every message", seconds=60)
        assert await first.stop() == 0
        assert await second.stop() == 0
    finally:
        await stop_all(first, second)
    assert await check_once_in_order(query, platforms, chats, per_chat) == 0
    assert await query("SELECT state, count(*) FROM outbox GROUP BY state") == [
        ("sent", len(chats) * per_chat)
    ]
    assert await query("SELECT count(*) FROM leases") == [(0,)]  # both released theirs


async def test_a_process_killed_mid_run_loses_its_sessions_to_the_other_after_its_lease(
    tmp_path: Path,
    platforms: Platforms,
    http: aiohttp.ClientSession,
    postgres: tuple[str, Query],
) -> None:
    url, query = postgres
    first = make(tmp_path, platforms, "a", url, ECHO_AGENTS)
    second = make(tmp_path, platforms, "b", url, ECHO_AGENTS)
    chats, per_chat = [Chat(i) for i in range(16)], 8
    acked = 0
    half = asyncio.Event()
    kills: list[tuple[float, float]] = []
    try:
        await first.start()
        await second.start()

        async def post_chat(chat: Chat) -> None:
            nonlocal acked
            for n in range(per_chat):
                # As a load balancer would: the chat's usual process, the other if it is down.
                order = (first, second) if chat.index % 2 else (second, first)
                await post_to_any(http, order, chat.delivery(n))
                acked += 1
                if acked >= len(chats) * per_chat // 2:
                    half.set()

        posting = asyncio.gather(*(post_chat(chat) for chat in chats))
        await half.wait()
        killed = time.monotonic()
        await first.kill()
        kills.append((killed, time.monotonic()))
        await posting

        def all_replied() -> bool:
            return all(len(set(replies(fake_of(platforms, c), c))) == per_chat for c in chats)

        await eventually(all_replied, "a reply to every message", seconds=90)
        assert await second.stop() == 0
    finally:
        await stop_all(first, second)
    repeated = await check_once_in_order(query, platforms, chats, per_chat)
    for chat in chats:
        assert repeats_outside_the_window(fake_of(platforms, chat), chat, kills) == []
    print(f"\nkilled one of two processes: replies repeated in the crash window: {repeated}")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_rolling_deploy_runs_a_slow_turn_once(
    backend: str, tmp_path: Path, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    side_effects, env = slow_tool(tmp_path, seconds=3)
    chat = Chat(1)  # a WhatsApp chat
    async with shared_store(backend, tmp_path) as (url, query):
        old = make(tmp_path, platforms, "old", url, SLOW_AGENTS, **env)
        new = make(tmp_path, platforms, "new", url, SLOW_AGENTS, **env)
        try:
            await old.start()
            await post_until_ok(http, old.url, chat.delivery(0))
            await eventually(lambda: side_effects.read_text() != "", "the tool to start")
            await new.start()  # while the old process is inside the slow tool
            assert await old.stop(signal.SIGTERM) == 0  # drains: the turn finishes and commits
            await post_until_ok(http, new.url, chat.delivery(1))
            await eventually(
                lambda: len(set(platforms.graph.texts(chat.chat_id))) == 2,
                "both replies",
                seconds=30,
            )
            assert await new.stop() == 0
        finally:
            await stop_all(old, new)
        assert side_effects.read_text().split() == [chat.tag(0), chat.tag(1)]
        assert platforms.graph.texts(chat.chat_id) == [f"done {chat.tag(0)}", f"done {chat.tag(1)}"]
        rows = await query(
            f"SELECT role, count(*) FROM messages WHERE session_id = '{chat.session_id}'"
            " GROUP BY role ORDER BY role"
        )
        assert rows == [("assistant", 4), ("tool", 2), ("user", 2)]  # call + result + reply each
        turns = await query(
            "SELECT kind, count(*) FROM session_events"
            " WHERE kind IN ('turn_started', 'turn_finished', 'turn_cancelled')"
            " GROUP BY kind ORDER BY kind"
        )
        assert turns == [("turn_finished", 2), ("turn_started", 2)]


CANCELLED = {"cancelled": True}
NO_TURN = "no_turn_running"


async def cancel(http: aiohttp.ClientSession, gateway: Gateway, session_id: str) -> tuple[int, Any]:
    """POST the session's cancel to ``gateway``'s admin API: the status, and the body (the
    error's code for an error)."""
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    url = f"{gateway.url}/api/sessions/{session_id}/cancel"
    async with http.post(url, headers=headers) as response:
        body = await response.json()
        return response.status, body["error"]["code"] if response.status >= 400 else body


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_cancel_sent_to_the_process_not_running_the_turn(
    backend: str, tmp_path: Path, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    """The console behind a balancer reaches either process: on PostgreSQL the one that does
    not run the turn relays the cancel to the one that does; on SQLite (two processes only
    during a rolling deploy) it answers that no turn runs there, and the other takes it."""
    side_effects, env = slow_tool(tmp_path, seconds=120)  # stopped by the cancel
    chat = Chat(1)  # a WhatsApp chat
    async with shared_store(backend, tmp_path) as (url, query):
        running = make(tmp_path, platforms, "running", url, SLOW_AGENTS, **env)
        other = make(tmp_path, platforms, "other", url, SLOW_AGENTS, **env)
        try:
            await running.start()
            await other.start()
            await post_until_ok(http, running.url, chat.delivery(0))
            await eventually(lambda: side_effects.read_text() != "", "the tool to start")
            if backend == "sqlite":
                assert await cancel(http, other, chat.session_id) == (409, NO_TURN)
                assert await cancel(http, running, chat.session_id) == (202, CANCELLED)
            ended = "SELECT count(*) FROM session_events WHERE kind = 'turn_cancelled'"
            relayed = 0
            if backend == "postgresql":
                assert await cancel(http, other, chat.session_id) == (202, CANCELLED)
                again = await cancel(http, other, chat.session_id)
                # 202 again while the cancelled turn has not committed; once it has (it ends
                # at once, and may win the race under load), no turn runs: 409
                if again != (202, CANCELLED):
                    assert again == (409, NO_TURN)
                    assert await _one(query(ended))
                relayed = 2 if again == (202, CANCELLED) else 1
            await eventually(lambda: _one(query(ended)), "the turn to end cancelled", seconds=30)
            assert await cancel(http, other, chat.session_id) == (409, NO_TURN)
            counted = {
                "sqlite": ({"refused": 2}, {"taken": 1}),
                "postgresql": ({"relayed": relayed, "refused": 3 - relayed}, {}),
            }
            assert (await cancels(http, other), await cancels(http, running)) == counted[backend]
            assert await running.stop() == 0
            assert await other.stop() == 0
        finally:
            await stop_all(running, other)
        assert side_effects.read_text().split() == [chat.tag(0)]
        assert platforms.graph.texts(chat.chat_id) == []  # nothing answered
        kinds = await query("SELECT kind FROM session_events WHERE kind LIKE 'turn_%' ORDER BY id")
        assert kinds == [("turn_started",), ("turn_cancelled",)]
        users = await query("SELECT text, data FROM messages WHERE role = 'user'")
        assert [(text, json.loads(data)["cancelled"]) for text, data in users] == [
            (chat.tag(0), True)
        ]
        assert await query("SELECT state FROM inbox") == [("done",)]
        assert await query("SELECT status FROM sessions") == [("idle",)]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_cancel_answered_202_outlives_a_sigkill_of_the_process(
    backend: str, tmp_path: Path, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    """The cancel is kept with the turn's inbox rows before the 202: the process killed before
    the cancelled turn committed, the next one (once the lease ran out) ends that turn
    cancelled instead of running it again: the tool ran once, nothing was answered."""
    side_effects, env = slow_tool(tmp_path, seconds=120)
    env["HOLD_WHEN_CANCELLED"] = "1"  # so the kill surely comes before the cancelled commit
    chat = Chat(1)
    async with shared_store(backend, tmp_path) as (url, query):
        gateway = make(tmp_path, platforms, "gateway", url, SLOW_AGENTS, **env)
        try:
            await gateway.start()
            await post_until_ok(http, gateway.url, chat.delivery(0))
            await eventually(lambda: side_effects.read_text() != "", "the tool to start")
            assert await cancel(http, gateway, chat.session_id) == (202, CANCELLED)
            await gateway.kill()
            await gateway.start()
            done = "SELECT count(*) FROM inbox WHERE state = 'done'"
            await eventually(lambda: _one(query(done)), "the message to be done", seconds=30)
            assert await gateway.stop() == 0
        finally:
            await gateway.ensure_stopped()
        assert side_effects.read_text().split() == [chat.tag(0)]  # not run again
        assert platforms.graph.texts(chat.chat_id) == []
        users = await query("SELECT text, data FROM messages WHERE role = 'user'")
        assert [(text, json.loads(data)["cancelled"]) for text, data in users] == [
            (chat.tag(0), True)
        ]
        assert await query("SELECT status FROM sessions") == [("idle",)]
        kinds = await query("SELECT kind FROM session_events WHERE kind LIKE 'turn_%' ORDER BY id")
        started, cancelled = ("turn_started",), ("turn_cancelled",)
        assert kinds == [started, cancelled, started, cancelled]  # taken over, then cancelled


async def cancels(http: aiohttp.ClientSession, gateway: Gateway) -> dict[str, float]:
    """``gateway_cancels_total`` by outcome, as the process's /metrics says."""
    async with http.get(f"{gateway.url}/metrics") as response:
        text = await response.text()
    found = re.findall(r'^gateway_cancels_total\{outcome="(\w+)"\} (\S+)$', text, re.MULTILINE)
    return {outcome: float(value) for outcome, value in found}


async def _one(rows: Awaitable[list[tuple[Any, ...]]]) -> bool:
    return await rows == [(1,)]


@asynccontextmanager
async def shared_store(backend: str, tmp_path: Path) -> AsyncIterator[tuple[str, Query]]:
    """The url both processes use, and a function reading the store."""
    if backend == "postgresql":
        async with fresh_schema() as url:
            yield url, postgres_query(url)
        return
    path = tmp_path / "shared.db"

    async def query(sql: str) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(path)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    yield f"sqlite:///{path}", query


async def test_a_sqlite_deployment_moved_to_postgresql_carries_on(
    tmp_path: Path,
    platforms: Platforms,
    http: aiohttp.ClientSession,
    postgres: tuple[str, Query],
) -> None:
    """Stop, ``gateway migrate-store``, start on PostgreSQL: same sessions and dedup memory."""
    url, query = postgres
    sqlite_url = f"sqlite:///{tmp_path / 'old.db'}"
    chat = Chat(2)  # a Telegram chat
    old = make(tmp_path, platforms, "old", sqlite_url, ECHO_AGENTS)
    new = make(tmp_path, platforms, "new", url, ECHO_AGENTS)
    try:
        await old.start()
        await post_until_ok(http, old.url, chat.delivery(0))
        await eventually(lambda: replies(platforms.telegram, chat) == [chat.tag(0)], "a reply")
        assert await old.stop() == 0
        migrate = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "webhook_bot_gateway",
            "migrate-store",
            "--from",
            sqlite_url,
            "--to",
            url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await migrate.communicate()
        assert migrate.returncode == 0, output.decode()
        assert b"counts verified" in output
        await new.start()
        await post_until_ok(http, new.url, chat.delivery(0))  # the platform redelivers m0
        await post_until_ok(http, new.url, chat.delivery(1))
        await eventually(
            lambda: replies(platforms.telegram, chat) == [chat.tag(0), chat.tag(1)],
            "the new message's reply",
        )
        assert await new.stop() == 0
    finally:
        await stop_all(old, new)
    # m0 was a duplicate for the new store: one turn each, one reply each.
    assert replies(platforms.telegram, chat) == [chat.tag(0), chat.tag(1)]
    users = await query(
        f"SELECT text FROM messages WHERE session_id = '{chat.session_id}' AND role = 'user'"
        " ORDER BY id"
    )
    assert users == [(chat.tag(0),), (chat.tag(1),)]
