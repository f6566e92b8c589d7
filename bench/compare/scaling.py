"""Part 4: how the gateway's and chatflow-agent's cost grows with traffic and with history.

Both answer WhatsApp users end to end: a signed webhook in, the reply out to a fake Graph API
(this process, core 1); the server under test on core 0. The gateway is ``gateway serve``
(bench/e2e.py's config: a ``rules`` agent, SQLite, synchronous=FULL); chatflow is its
WhatsApp webhook with the scripted engine, its replies sent by its own code to the fake.

- **sessions**: ``n`` users at once (``bench.compare.users``: each waits for its answer
  before it sends again), for each ``n`` of ``counts`` on one server, fresh users each time:
  answered per second, p50/p99 from post to reply, and the resident memory the server kept
  once they were answered and idle.
- **history**: ``HISTORY_USERS`` users whose sessions hold ``h`` turns already (written before
  the server starts), for each ``h`` of ``depths``: answered per second, p50/p99.
- **in flight**: ``inflight`` users at once against a model that answers after ``delay``
  seconds (``bench.capacity.SlowModel``; chatflow through its ``OpenAIEngine``): resident
  memory at the most turns in flight, against once ready.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import capacity
from bench.compare import procs
from bench.compare.users import Outcome, Waiting, converse, fake_apis
from bench.e2e import NUMBER, free_port, gateway_process
from bench.history import fill
from webhook_bot_gateway.store import SQLiteStore

SIDES = ("gateway", "chatflow")
HISTORY_USERS = 10
SAMPLE_SECONDS = 0.02
WARM_UP = range(9_000_000, 9_000_010)  # users who talk before anything is measured


@dataclass(frozen=True)
class ScalingPlan:
    counts: tuple[int, ...] = (10, 100, 1000, 10000)
    rounds: tuple[int, ...] = (6, 1, 1, 1)  # turns each user of that count talks
    depths: tuple[int, ...] = (10, 100, 1000, 10000)
    history_rounds: int = 10
    inflight: int = 1000
    delay: float = 2.0
    # chatflow answers about 25 messages a second end to end (a new HTTP client, and its TLS
    # context, for every reply): 10,000 users would take it about 7 minutes a run. Its points
    # stop here unless a plan says otherwise.
    peer_counts: tuple[int, ...] = (10, 100)
    peer_inflight: int = 250

    def counts_of(self, side: str) -> list[tuple[int, int]]:
        """(users at once, turns each) of the side's points."""
        counts = self.counts if side == "gateway" else self.peer_counts
        return [(count, self.rounds[self.counts.index(count)]) for count in counts]

    def inflight_of(self, side: str) -> int:
        return self.inflight if side == "gateway" else self.peer_inflight


def user_id(session: int) -> str:
    """The WhatsApp user bench/e2e.py's webhook of ``session`` comes from."""
    return f"1555{session:07d}"


def figures(outcome: Outcome) -> dict[str, float]:
    ordered = sorted(outcome.latencies)

    def at(share: float) -> float:
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000

    return {
        "answered_per_second": outcome.answered_per_second,
        "p50_ms": at(0.50),
        "p99_ms": at(0.99),
        "messages": len(ordered),
        "lost": outcome.lost,
    }


@asynccontextmanager
async def serving(
    side: str, workdir: Path, fake_url: str, db: Path | None = None, model: str = ""
) -> AsyncIterator[tuple[str, int]]:
    """The side's server on core 0: its base URL and pid."""
    if side == "gateway":
        async with gateway_process(workdir, fake_url, store=db) as running:
            yield running.url, running.pid
        return
    options = ["--reply-to", fake_url, *(["--model", model] if model else [])]
    async with procs.server("chatflow", workdir, *options) as server:
        yield f"http://127.0.0.1:{server.port}", server.pid


async def sessions(side: str, plan: ScalingPlan, workdir: Path) -> list[dict[str, float]]:
    """One point per user count; users of each point are new to the server."""
    procs.folder(workdir)
    points = []
    async with fake_apis() as (fake_url, replies), serving(side, workdir, fake_url) as (url, pid):
        await warm_up(url, replies, pid)
        first = 0
        for count, rounds in plan.counts_of(side):
            before = capacity.status_kib(pid, "VmRSS")
            outcome = await converse(url, replies, range(first, first + count), rounds, pid)
            await procs.idle(pid)
            point = figures(outcome)
            point["rss_growth_kib"] = capacity.status_kib(pid, "VmRSS") - before
            points.append({"sessions": count, **point})
            first += count
    return points


async def warm_up(url: str, replies: Waiting, pid: int) -> None:
    """A few turns before anything is measured: connections, caches and the first imports
    of a fresh process are paid for outside the points."""
    await converse(url, replies, WARM_UP, 3, pid)
    await procs.idle(pid)


async def gateway_history(db: Path, depths: tuple[int, ...]) -> None:
    """Sessions of the users ``history`` will send as, each holding its group's turns."""
    async with SQLiteStore(db) as store:
        for group, depth in enumerate(depths):
            for session in history_sessions(group):
                created = await store.create_session("whatsapp", NUMBER, user_id(session), "echo")
                await fill(store, created.session_id, depth)


def chatflow_history(db: Path, depths: tuple[int, ...]) -> None:
    """The same in chatflow's tables (its rows as its own add_message writes them)."""
    from chatflow_agent import Message, Role, SQLiteSessionStore

    SQLiteSessionStore(db)  # its schema
    asked = Message(role=Role.USER, content="what about inv-1001?").model_dump_json()
    answer = Message(role=Role.MODEL, content="Invoice INV-1001: paid.").model_dump_json()
    conn = sqlite3.connect(db)
    with conn:
        for group, depth in enumerate(depths):
            for session in history_sessions(group):
                sid = user_id(session)
                conn.execute(
                    "INSERT INTO chatflow_sessions (session_id, active_agent_name) VALUES (?, ?)",
                    (sid, "echo"),
                )
                rows = [(sid, r, c, j) for _ in range(depth) for r, c, j in _pair(asked, answer)]
                conn.executemany(
                    "INSERT INTO chatflow_messages (session_id, role, content, message_json)"
                    " VALUES (?, ?, ?, ?)",
                    rows,
                )
    conn.close()


def _pair(asked: str, answer: str) -> list[tuple[str, str, str]]:
    return [("user", "what about inv-1001?", asked), ("model", "Invoice INV-1001: paid.", answer)]


def history_sessions(group: int) -> range:
    first = 1_000_000 + group * HISTORY_USERS
    return range(first, first + HISTORY_USERS)


async def prepare_history(side: str, plan: ScalingPlan, template: Path) -> float:
    """Write the side's history database once; seconds it took."""
    started = time.perf_counter()
    if side == "gateway":
        await gateway_history(template, plan.depths)
    else:
        chatflow_history(template, plan.depths)
    return time.perf_counter() - started


async def history(
    side: str, plan: ScalingPlan, workdir: Path, template: Path
) -> list[dict[str, float]]:
    """One point per depth, on a copy of the side's history database."""
    db = procs.folder(workdir) / ("gateway.db" if side == "gateway" else "chatflow.db")
    shutil.copyfile(template, db)
    points = []
    async with (
        fake_apis() as (fake_url, replies),
        serving(side, workdir, fake_url, db=db) as (url, pid),
    ):
        await warm_up(url, replies, pid)
        for group, depth in enumerate(plan.depths):
            users = history_sessions(group)
            outcome = await converse(url, replies, users, plan.history_rounds, pid)
            await procs.idle(pid)
            points.append({"history": depth, **figures(outcome)})
    return points


async def inflight(side: str, plan: ScalingPlan, workdir: Path) -> dict[str, float]:
    """Resident memory with the most turns waiting on a slow model at once."""
    procs.folder(workdir)
    model = capacity.SlowModel(plan.delay)
    async with (
        fake_apis(model.handle) as (fake_url, replies),
        _slow_server(side, workdir, fake_url) as (url, pid),
    ):
        ready = capacity.status_kib(pid, "VmRSS")
        peak = [0, ready]
        sampler = asyncio.create_task(_sample(pid, model, peak))
        try:
            outcome = await converse(url, replies, range(plan.inflight_of(side)), 1, pid)
        finally:
            sampler.cancel()
            with suppress(asyncio.CancelledError):
                await sampler
    in_flight, at_peak = peak
    per_turn = (at_peak - ready) / max(1, in_flight)
    return {
        "ready_kib": ready,
        "peak_kib": at_peak,
        "peak_in_flight": in_flight,
        "kib_per_1000_in_flight": per_turn * 1000,
        "lost": outcome.lost,
    }


@asynccontextmanager
async def _slow_server(side: str, workdir: Path, fake_url: str) -> AsyncIterator[tuple[str, int]]:
    if side == "gateway":
        text = capacity.capacity_config(free_port(), fake_url, workdir / "gateway.db", 1000, 1000)
        async with capacity.serve(workdir, text) as running:
            yield running
        return
    async with serving(side, workdir, fake_url, model=f"{fake_url}/v1") as running:
        yield running


async def _sample(pid: int, model: Any, peak: list[int]) -> None:
    while True:
        if model.in_flight > peak[0]:
            peak[:] = [model.in_flight, capacity.status_kib(pid, "VmRSS")]
        await asyncio.sleep(SAMPLE_SECONDS)
