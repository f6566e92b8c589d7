"""Parts 1 and 2: Telegram and WhatsApp ingest beside the bare handler and the peer.

Per run, every side of the platform is started (each its own process on core 0, idle until
its turn), then in turn, sides rotating which goes first:

- **closed loop**: ``connections`` keep-alive connections send the stream back to back for
  ``warmup`` + ``seconds``: accepted updates per second (the most each side takes);
- **open loop**: fresh updates of the same stream at one rate for every side, half the slowest
  side's closed-loop rate of that run, so that every side can carry it: ack latency p50/p99,
  counted from each request's scheduled time.

After each load the bench waits until the side is idle (its handlers done). Then it counts
what reached each side's handler: the peers report every update their handler saw; the
gateway's handler input is its ``deliveries`` table (the intake reads every row once).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.compare import procs, stream

SIDES = {
    "telegram": ("bare", "ptb", "gateway", "served"),
    "whatsapp": ("bare", "chatflow", "gateway", "served"),
}
PHASE_IDS = 10_000_000  # numbers of a run's phases never meet


@dataclass(frozen=True)
class IngestPlan:
    repeat: int = 3
    warmup: float = 1.0
    seconds: float = 3.0
    connections: int = 64
    max_rate: float = 20_000  # requests built for a closed loop, per second of it
    open_share: float = 0.5
    open_warmup: float = 0.5
    open_seconds: float = 2.5


def gateway_handled(directory: Path) -> list[str]:
    """Every dedup key the gateway stored a delivery under: what its intake hands on (keys of
    deliveries not parsed yet, and of inbox rows made from those parsed)."""
    conn = sqlite3.connect(directory / "gateway.db")
    try:
        rows = conn.execute("SELECT keys FROM deliveries ORDER BY id").fetchall()
        inbox = conn.execute("SELECT dedup_key FROM inbox ORDER BY id").fetchall()
    finally:
        conn.close()
    return [key for (keys,) in rows for key in json.loads(keys)] + [key for (key,) in inbox]


def rotated(sides: tuple[str, ...], index: int) -> list[str]:
    shift = index % len(sides)
    return [*sides[shift:], *sides[:shift]]


async def closed(platform: str, plan: IngestPlan, port: int, first: int) -> dict[str, Any]:
    count = int(plan.max_rate * (plan.warmup + plan.seconds)) + 1000
    return await procs.load(
        platform,
        port,
        seed=first,
        first=first,
        count=count,
        connections=plan.connections,
        warmup=plan.warmup,
        seconds=plan.seconds,
    )


async def opened(
    platform: str, plan: IngestPlan, port: int, first: int, rate: float
) -> dict[str, Any]:
    count = int(rate * (plan.open_warmup + plan.open_seconds)) + 10
    return await procs.load(
        platform,
        port,
        seed=first,
        first=first,
        count=count,
        connections=plan.connections,
        rate=rate,
        warmup=plan.open_warmup,
        seconds=plan.open_seconds,
    )


async def one_run(
    platform: str, plan: IngestPlan, index: int, base: Path, fake_api: str
) -> dict[str, dict[str, Any]]:
    """Every side of ``platform`` once: closed loop, open loop, what reached the handler.

    The served gateway keeps answering long after a load (its backlog): it is started afresh
    for each phase, last, and killed right after its load so it never shares the core with
    another side's measurement; its store, on disk, tells what it accepted.
    """
    lasting = rotated(tuple(s for s in SIDES[platform] if s != "served"), index)
    results: dict[str, dict[str, Any]] = {side: {} for side in SIDES[platform]}
    first = index * 2 * PHASE_IDS
    specs = {
        side: (base / f"{platform}-{index}-{side}", ["--fake-api", fake_api]) for side in lasting
    }
    served = [base / f"{platform}-{index}-served-{phase}" for phase in ("closed", "open")]
    async with procs.servers(specs) as running:
        for side in lasting:
            results[side]["closed"] = await closed(platform, plan, running[side].port, first)
            await procs.idle(running[side].pid)
        async with procs.server("served", served[0], "--fake-api", fake_api, kill=True) as one:
            results["served"]["closed"] = await closed(platform, plan, one.port, first)
        rate = plan.open_share * min(r["closed"]["rate"] for r in results.values())
        for side in lasting:
            load = await opened(platform, plan, running[side].port, first + PHASE_IDS, rate)
            results[side]["open"] = {**load, "target": rate}
            await procs.idle(running[side].pid)
        async with procs.server("served", served[1], "--fake-api", fake_api, kill=True) as one:
            load = await opened(platform, plan, one.port, first + PHASE_IDS, rate)
            results["served"]["open"] = {**load, "target": rate}
        for side in lasting:
            if side in ("ptb", "chatflow"):
                results[side]["handled"] = await procs.handled(running[side])
    results["gateway"]["handled"] = gateway_handled(running["gateway"].directory)
    results["served"]["handled"] = [key for d in served for key in gateway_handled(d)]
    return {side: summarize(result) for side, result in results.items()}


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """The figures of one side in one run (the handled list reduced to counts)."""
    keys = result.get("handled")
    sent = result["closed"]["duplicates_sent"] + result["open"]["duplicates_sent"]
    return {
        "rate": result["closed"]["rate"],
        "closed_p50_ms": result["closed"]["p50_ms"],
        "closed_p99_ms": result["closed"]["p99_ms"],
        "open_target": result["open"]["target"],
        "open_rate": result["open"]["rate"],
        "open_p50_ms": result["open"]["p50_ms"],
        "open_p99_ms": result["open"]["p99_ms"],
        "statuses": [result["closed"]["statuses"], result["open"]["statuses"]],
        "duplicates_sent": sent,
        "handled": None if keys is None else len(keys),
        "duplicates_through": None if keys is None else stream.duplicates(keys),
    }
