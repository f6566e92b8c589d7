"""A ``/ws`` client for the end-to-end tests: frames read with a deadline, never a sleep."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from aiohttp import web

Frame = dict[str, Any]
FRAME_SECONDS = 20.0  # a frame that takes longer than this is a failure, not a slow machine


class WebClient:
    """One socket: the frames it got, in order."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.frames: list[Frame] = []

    @property
    def session_id(self) -> str:
        sid: str = self.frames[0]["data"]["session_id"]
        return sid

    async def next(self, seconds: float = FRAME_SECONDS) -> Frame:
        message = await asyncio.wait_for(self.ws.receive(), seconds)
        if message.type != aiohttp.WSMsgType.TEXT:
            raise AssertionError(f"expected a text frame, got {message.type!r} {message.data!r}")
        frame: Frame = json.loads(message.data)
        self.frames.append(frame)
        return frame

    async def until(self, done: Callable[[Frame], bool], what: str) -> list[Frame]:
        """Frames up to and including the first that ``done`` accepts."""
        got: list[Frame] = []
        while True:
            try:
                frame = await self.next()
            except TimeoutError:
                raise AssertionError(f"no {what} frame; got {got}") from None
            got.append(frame)
            if done(frame):
                return got

    async def has(self, done: Callable[[Frame], bool], what: str) -> Frame:
        """The first frame ``done`` accepts, among those already read or the next ones."""
        for frame in self.frames:
            if done(frame):
                return frame
        return (await self.until(done, what))[-1]

    async def send(self, frame: Frame | str) -> None:
        if isinstance(frame, str):
            await self.ws.send_str(frame)
        else:
            await self.ws.send_json(frame)

    async def say(self, text: str, client_id: str, attachments: tuple[str, ...] = ()) -> Frame:
        """Send a message; return its ack."""
        data = {"text": text, "client_id": client_id, "attachments": list(attachments)}
        await self.send({"type": "message", "data": data})
        [*_, ack] = await self.until(lambda f: f["type"] in ("ack", "error"), "ack")
        assert ack["type"] == "ack", ack
        assert ack["data"]["client_id"] == client_id
        return ack

    def logged(self) -> list[Frame]:
        """The frames that carry a seq (the session's event log), in arrival order."""
        return [f for f in self.frames if "seq" in f]


@asynccontextmanager
async def connect(
    http: aiohttp.ClientSession, base_url: str, query: str = ""
) -> AsyncIterator[WebClient]:
    """A socket on ``/ws?query``, with its first frame already read."""
    url = base_url + "/ws" + (f"?{query}" if query else "")
    async with http.ws_connect(url) as ws:
        client = WebClient(ws)
        await client.next()
        yield client


def is_turn_end(frame: Frame) -> bool:
    return frame["type"] in ("turn_finished", "turn_cancelled")


def seqs(frames: list[Frame]) -> list[int]:
    return [int(f["seq"]) for f in frames if "seq" in f]


class SlowModel:
    """A fake OpenAI-compatible server whose answers wait until ``release`` is set."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        return app

    async def _complete(self, request: web.Request) -> web.Response:
        await request.read()
        self.calls += 1
        self.started.set()
        await self.release.wait()
        message = {"role": "assistant", "content": "a slow answer"}
        return web.json_response(
            {
                "id": "c1",
                "object": "chat.completion",
                "model": "slow",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
        )


def slow_agents(base_url: str) -> str:
    """An ``[agents]`` part whose one agent asks ``SlowModel`` at ``base_url``."""
    return f"""
[agents]
starting_agent = "slow"
turn_timeout = 60

[agents.models.slow]
base_url = "{base_url}/v1"
model = "slow"
max_retries = 0

[[agents.list]]
name = "slow"
model = "slow"
instructions = "Answer slowly."
"""
