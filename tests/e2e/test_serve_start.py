"""How the real ``gateway serve`` starts: on the event loop ``server.event_loop`` names, and not
at all, with one line naming the key, when its port is taken."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from .conftest import MakeGateway, Platforms
from .gateway_proc import config_text, demo_agents, eventually, free_port
from .test_roundtrip import HELP
from .webhooks import post, telegram_text


@pytest.mark.parametrize(("choice", "runs_on"), [("auto", "uvloop"), ("asyncio", "asyncio")])
async def test_serve_answers_on_the_event_loop_server_event_loop_names(
    make_gateway: MakeGateway,
    platforms: Platforms,
    http: aiohttp.ClientSession,
    choice: str,
    runs_on: str,
) -> None:
    gateway = await make_gateway(sections={"server": {"event_loop": choice}})
    assert await post(http, gateway.url, telegram_text(1, 4242, "hello")) == 200
    await eventually(lambda: platforms.telegram.texts("4242") == [HELP], "the reply")
    assert await gateway.stop() == 0
    lines = [json.loads(line) for line in gateway.log(tail=400).splitlines() if '"level"' in line]
    messages = [line["message"] for line in lines]
    assert [m for m in messages if m.startswith("event loop:")] == [f"event loop: {runs_on}"]
    assert [m for m in messages if m.startswith("Running on")] == [f"Running on {gateway.url}"]


async def test_serve_on_a_taken_port_exits_1_naming_server_port_and_touches_nothing(
    tmp_path: Path,
) -> None:
    # What holds the port also plays the Bot API: a getMe at start would reach it.
    calls: list[str] = []

    async def record(request: web.Request) -> web.Response:
        calls.append(request.path)
        return web.json_response({"ok": False}, status=500)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    port = free_port()
    holder = TestServer(app, host="127.0.0.1", port=port)
    await holder.start_server()
    try:
        url = f"http://127.0.0.1:{port}"
        db = tmp_path / "data" / "gateway.db"
        config = tmp_path / "gateway.toml"
        text = config_text(port=port, db=db, telegram_url=url, graph_url=url, agents=demo_agents())
        config.write_text(text, encoding="utf-8")
        command = [sys.executable, "-m", "webhook_bot_gateway", "serve", "--config", str(config)]
        process = await asyncio.create_subprocess_exec(
            *command, cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
    finally:
        await holder.close()
    assert process.returncode == 1
    errors = err.decode().strip().splitlines()
    assert errors == [
        f"error: {config}: server.port: cannot listen on 127.0.0.1:{port}: Address already in use"
    ], err.decode()
    assert "Traceback" not in out.decode() + err.decode()
    assert calls == []  # no getMe, nothing else sent anywhere
    assert not db.parent.exists()  # no folder, no database
