"""Processes of a comparison: start a server under test, wait until it listens or goes idle,
run the load generator, stop. Servers run on core 0, the load generator on core 1."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from bench.e2e import free_port

ROOT = Path(__file__).resolve().parents[2]
TICK = 0.1
Process = asyncio.subprocess.Process


@dataclass(frozen=True)
class Server:
    side: str
    port: int
    pid: int
    directory: Path

    @property
    def stats(self) -> Path:
        return self.directory / "handled.json"


async def spawn(side: str, directory: Path, *options: str) -> tuple[Server, Process]:
    """Start ``python -m bench.compare.servers side`` (it pins itself to core 0)."""
    port = free_port()
    with _log(directory) as log:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "bench.compare.servers", side, "--port", str(port)),
            *("--dir", str(directory), *options),
            cwd=ROOT,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )
    return Server(side, port, process.pid, directory), process


def folder(path: Path) -> Path:
    """``path``, created if missing."""
    path.mkdir(parents=True, exist_ok=True)
    return path


def _log(directory: Path) -> BinaryIO:
    return (folder(directory) / "server.log").open("ab")


@asynccontextmanager
async def servers(
    specs: dict[str, tuple[Path, list[str]]], kill: bool = False
) -> AsyncIterator[dict[str, Server]]:
    """Every side of ``specs`` (side: directory, options), started at once; yielded when all
    accept connections; stopped after (``kill``: at once, with SIGKILL)."""
    started: dict[str, tuple[Server, Process]] = {}
    try:
        for side, (directory, options) in specs.items():
            started[side] = await spawn(side, directory, *options)
        await asyncio.gather(*(listening(s.port, p, s.side) for s, p in started.values()))
        yield {side: pair[0] for side, pair in started.items()}
    finally:
        await asyncio.gather(*(stop(process, kill) for _, process in started.values()))


@asynccontextmanager
async def server(
    side: str, directory: Path, *options: str, kill: bool = False
) -> AsyncIterator[Server]:
    """One side, as ``servers`` starts them."""
    async with servers({side: (directory, list(options))}, kill) as running:
        yield running[side]


async def listening(port: int, process: Process, side: str) -> None:
    for _ in range(int(60 / TICK)):
        if process.returncode is not None:
            raise RuntimeError(f"the {side} server exited at start; see its server.log")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(TICK)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise RuntimeError(f"the {side} server did not listen within 60 s")


async def stop(process: Process, kill: bool = False) -> None:
    """SIGTERM (a clean shutdown), or SIGKILL with ``kill``; SIGKILL after 20 s regardless."""
    if process.returncode is not None:
        return
    if kill:
        process.kill()
    else:
        process.terminate()
    try:
        await asyncio.wait_for(process.wait(), 20)
    except TimeoutError:
        process.kill()
        await process.wait()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def cpu_share(pid: int, seconds: float) -> float:
    """The share of one core the process used over the next ``seconds``."""
    before = cpu_seconds(pid)
    await asyncio.sleep(seconds)
    return (cpu_seconds(pid) - before) / seconds


async def idle(pid: int, limit: float = 60.0) -> None:
    """Wait until the process has used under 5% of a core for two ticks in a row: the work
    it queued behind its answers (a peer's handlers, turns) is done."""
    quiet, waited, before = 0, 0.0, cpu_seconds(pid)
    while quiet < 2 and waited < limit:
        await asyncio.sleep(TICK)
        waited += TICK
        now = cpu_seconds(pid)
        quiet = quiet + 1 if now - before < 0.05 * TICK else 0
        before = now


async def handled(server: Server) -> list[int]:
    """What reached the peer's handler (SIGUSR1 makes it write the list)."""
    server.stats.unlink(missing_ok=True)
    os.kill(server.pid, signal.SIGUSR1)
    for _ in range(int(20 / TICK)):
        if server.stats.exists():
            numbers: list[int] = json.loads(server.stats.read_text(encoding="utf-8"))
            return numbers
        await asyncio.sleep(TICK)
    raise RuntimeError(f"the {server.side} server wrote no stats")


async def load(platform: str, port: int, **options: Any) -> dict[str, Any]:
    """One run of ``bench.compare.load``; its JSON result."""
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in options.items()]
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "bench.compare.load", platform, f"--port={port}", *flags),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"the load generator failed ({process.returncode})")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result
