"""``gateway serve`` on SIGTERM/SIGINT: running turns finish within server.shutdown_timeout,
the rest roll back, and the process exits 0. A slow tool makes a turn take its time."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import aiohttp
import pytest

from .conftest import MakeGateway, Platforms
from .gateway_proc import BOT, Gateway, eventually
from .webhooks import post, telegram_text

SLOW_TOOLS = '''
import asyncio

from webhook_bot_gateway.agents import tool


@tool
async def wait_a_bit(seconds: str) -> str:
    """Wait, then say so."""
    await asyncio.sleep(float(seconds))
    return f"waited {seconds}"
'''

SLOW_AGENTS = """
[agents]
starting_agent = "slow"

[[agents.list]]
name = "slow"
model = "rules"
tools = ["slow_tools.wait_a_bit"]

[[agents.list.rules]]
match = 'wait (?P<seconds>[0-9.]+)'
tool = "wait_a_bit"
arguments = { seconds = "{seconds}" }
"""

SESSION = f"telegram-{BOT}-6001"


@pytest.fixture
def slow_tools(tmp_path: Path) -> None:
    """The tool module, next to the config: ``python -m`` puts its directory on sys.path."""
    (tmp_path / "slow_tools.py").write_text(SLOW_TOOLS, encoding="utf-8")


def running(gateway: Gateway) -> bool:
    rows = gateway.query("SELECT status FROM sessions WHERE session_id = ?", SESSION)
    return rows == [("running",)]


def user_messages(gateway: Gateway) -> int:
    rows = gateway.query(
        "SELECT count(*) FROM messages WHERE session_id = ? AND role = 'user'", SESSION
    )
    return int(rows[0][0])


def shutdown_lines(gateway: Gateway) -> list[str]:
    """The messages of the log's lines from the shutdown on, as docs/logging.md lists them."""
    lines = [json.loads(line) for line in gateway.log(tail=400).splitlines() if '"level"' in line]
    messages = [line["message"] for line in lines]
    starts = [i for i, m in enumerate(messages) if m.startswith("shutting down")]
    ends = {"shutting down", "pipeline stopped", "stopped"}
    return [m for m in messages[starts[-1] :] if m.split(":")[0] in ends] if starts else []


@pytest.mark.usefixtures("slow_tools")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_e2e_shutdown_lets_a_running_turn_finish_and_exits_0(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession, sig: int
) -> None:
    gateway = await make_gateway(agents=SLOW_AGENTS, sections={"server": {"shutdown_timeout": 10}})
    assert await post(http, gateway.url, telegram_text(6101, 6001, "wait 1")) == 200
    await eventually(lambda: running(gateway), "the turn to start")
    assert await gateway.stop(sig) == 0
    assert shutdown_lines(gateway) == [
        "shutting down: running turns get 10 s, then roll back",
        "pipeline stopped",
        "stopped",
    ]
    assert user_messages(gateway) == 1  # the turn committed before the process left
    assert gateway.query("SELECT state FROM inbox") == [("done",)]
    assert gateway.query("SELECT status FROM sessions") == [("idle",)]
    await gateway.start()  # its reply, if not sent before the exit, goes now
    sent = [("sent",)]
    await eventually(lambda: gateway.query("SELECT state FROM outbox") == sent, "the reply")
    assert platforms.telegram.texts("6001") == ["waited 1"]  # once: nothing cut off mid-send
    assert await gateway.stop() == 0


@pytest.mark.usefixtures("slow_tools")
async def test_e2e_shutdown_rolls_back_a_turn_longer_than_the_timeout(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway(agents=SLOW_AGENTS, sections={"server": {"shutdown_timeout": 0.5}})
    assert await post(http, gateway.url, telegram_text(6102, 6001, "wait 60")) == 200
    await eventually(lambda: running(gateway), "the turn to start")
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await gateway.stop(signal.SIGTERM) == 0
    assert loop.time() - began < 10  # not the 60 s of the turn
    assert user_messages(gateway) == 0  # rolled back: nothing of the turn was written
    assert gateway.query("SELECT state, attempts FROM inbox") == [("pending", 0)]
    assert gateway.query("SELECT status FROM sessions") == [("idle",)]
    assert platforms.telegram.texts("6001") == []
