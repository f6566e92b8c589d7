"""The real ``gateway serve`` as a subprocess: its config, start, readiness, SIGKILL, SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from inspect import isawaitable
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "e2e-admin-token"
BOT = "support"
BOT_TOKEN = "123456789:AAH-e2e_fake_TOKEN-0123456789abcdef"
BOT_SECRET = "e2e-telegram-secret"
APP_SECRET = "e2e-app-secret"
NUMBER = "100000000000001"
START_SECONDS = 30.0  # a start that takes longer than this is a failure, not a slow machine
# Variables a config may read: a developer's shell must not change what the tests run.
CONFIG_PREFIXES = ("GATEWAY_", "TELEGRAM_", "WHATSAPP_", "OPENAI_")


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def demo_agents() -> str:
    """The ``[agents]`` part of config.example.toml, as the README's demo runs it."""
    text = (REPO / "config.example.toml").read_text(encoding="utf-8")
    return text[text.index("\n[agents]") :]


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _table(name: str, values: Mapping[str, Any], *, array: bool = False) -> str:
    head = f"[[{name}]]" if array else f"[{name}]"
    return "\n".join([head, *(f"{key} = {_value(v)}" for key, v in values.items())]) + "\n"


def config_text(
    *,
    port: int,
    db: Path,
    telegram_url: str,
    graph_url: str,
    agents: str,
    sections: Mapping[str, Mapping[str, Any]] | None = None,
    bots: Sequence[Mapping[str, Any]] | None = None,
    numbers: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """A complete config: fakes for both platforms, a SQLite file, and ``sections`` on top;
    ``bots`` and ``numbers`` replace the one default bot and number."""
    base: dict[str, dict[str, Any]] = {
        "server": {"host": "127.0.0.1", "port": port, "shutdown_timeout": 5},
        # A killed process's running turns move on after its lease: short, to keep tests quick.
        "store": {"url": f"sqlite:///{db}", "lease_seconds": 3},
        "admin": {"token": ADMIN_TOKEN},
        "dispatcher": {"double_texting": "enqueue", "typing_after_seconds": 5},
        "sender": {
            "telegram_chat_per_second": 200,
            "telegram_bot_per_second": 1000,
            "whatsapp_chat_per_second": 200,
            "whatsapp_number_per_second": 1000,
            "burst": 20,
            "backoff_base_seconds": 0.2,
            "backoff_max_seconds": 2,
        },
        "telegram": {"api_base_url": telegram_url, "request_timeout": 5},
        "whatsapp": {
            "graph_base_url": graph_url,
            "api_version": "v21.0",
            "app_secret": APP_SECRET,
            "verify_token": "e2e-verify",
            "request_timeout": 5,
        },
    }
    for name, values in (sections or {}).items():
        base[name] = {**base.get(name, {}), **values}
    parts = [_table(name, values) for name, values in base.items()]
    bot = {"name": BOT, "token": BOT_TOKEN, "secret_token": BOT_SECRET}
    for values in bots if bots is not None else [bot]:
        parts.append(_table("telegram.bots", values, array=True))
    number = {"phone_number_id": NUMBER, "access_token": "e2e-access-token"}
    for values in numbers if numbers is not None else [number]:
        parts.append(_table("whatsapp.numbers", values, array=True))
    return "\n".join(parts) + agents


async def eventually(
    check: Callable[[], bool | Awaitable[bool]],
    what: str,
    *,
    seconds: float = 20.0,
    interval: float = 0.02,
) -> None:
    """Poll ``check`` until it is true; fail naming ``what`` after ``seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        result = check()
        if isawaitable(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {seconds:g} s waiting for {what}")
        await asyncio.sleep(interval)


class Gateway:
    """One gateway installation (config + database) that can be started, killed and restarted.

    The process gets this process's environment without the variables a config may read,
    plus ``env``. ``command`` starts the gateway (default: this interpreter's
    ``python -m webhook_bot_gateway``; an installed ``.../bin/gateway`` works the same).
    """

    def __init__(
        self,
        directory: Path,
        config: str,
        port: int,
        db: Path,
        env: Mapping[str, str] | None = None,
        command: Sequence[str] = (sys.executable, "-m", "webhook_bot_gateway"),
    ) -> None:
        self.directory = directory
        self.command = tuple(command)
        self.env = dict(env or {})
        self.port = port
        self.db = db
        self.url = f"http://127.0.0.1:{port}"
        self.config_path = directory / "gateway.toml"
        self.config_path.write_text(config, encoding="utf-8")
        self.log_path = directory / "gateway.log"
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0

    async def start(self) -> None:
        """Start ``gateway serve`` and wait until /readyz answers 200."""
        assert self.process is None or self.process.returncode is not None
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts} ---\n".encode())
            self.process = await asyncio.create_subprocess_exec(
                *self.command,
                "serve",
                "--config",
                str(self.config_path),
                cwd=self.directory,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=self.environment(),
            )
        await eventually(self._ready, "the gateway's /readyz", seconds=START_SECONDS)

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(CONFIG_PREFIXES)}
        return env | self.env | {"PYTHONUNBUFFERED": "1"}

    async def _ready(self) -> bool:
        assert self.process is not None
        if self.process.returncode is not None:
            raise AssertionError(f"gateway exited with {self.process.returncode}:\n{self.log()}")
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"{self.url}/readyz", timeout=aiohttp.ClientTimeout(total=1)) as r,
            ):
                return r.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def kill(self) -> None:
        """SIGKILL: no cleanup of any kind, as a crash or an OOM kill."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        """A graceful stop; returns the exit status."""
        assert self.process is not None
        self.process.send_signal(sig)
        return await asyncio.wait_for(self.process.wait(), 30)

    async def ensure_stopped(self) -> None:
        if self.process is not None and self.process.returncode is None:
            await self.kill()

    def log(self, tail: int = 60) -> str:
        lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(lines[-tail:])

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Read the gateway's database directly (WAL: readers never block it)."""
        conn = sqlite3.connect(self.db, timeout=10)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    async def admin(self, session: aiohttp.ClientSession, path: str) -> Any:
        """GET an admin API path with the bearer token."""
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        async with session.get(f"{self.url}{path}", headers=headers) as response:
            assert response.status == 200, await response.text()
            return await response.json()
