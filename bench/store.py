"""Store throughput beside raw ``sqlite3`` doing the same statements: ``python -m bench.store``.

Measures, on a ``processed_messages`` table pre-filled with ``--rows`` random keys:
dedup claims of one new key and of 64-key batches, and ``append_message``. Each call is one
``BEGIN IMMEDIATE`` .. ``COMMIT`` on both sides, with the same PRAGMAs (WAL, synchronous=FULL).
Prints medians over ``--repeat`` runs and the store/raw time ratio (1.0 = no overhead),
paired run by run (the two sides of a run alternate which goes first).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiosqlite

from webhook_bot_gateway.store import SQLiteStore
from webhook_bot_gateway.store.sqlite._sql_dedup import claim_sql

SID = "telegram-bench-1"
BATCH = 64
REFERENCE = (
    "reference (quoted by issue 2, not measured here): chatflow-agent 0.3.4's SQLite store did "
    "about 500 dedup check-and-records/s on this machine (a new connection per call), and 8 "
    "threads racing on one id were told 'new' 7.6 times on average"
)


@dataclass(frozen=True)
class Plan:
    singles: int
    batches: int
    appends: int


@dataclass
class Timings:
    single: list[float]
    batch: list[float]
    append: list[float]


def machine() -> list[str]:
    """CPU model, cores, Python, SQLite and aiosqlite versions."""
    model = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return [
        f"cpu: {model}, {os.cpu_count()} cores",
        f"python: {platform.python_version()} ({platform.system()} {platform.release()})",
        f"sqlite: {sqlite3.sqlite_version}, aiosqlite: {aiosqlite.__version__}",
    ]


def make_keys(rng: random.Random, count: int, prefix: str) -> list[str]:
    """Realistic, randomly ordered message ids."""
    return [f"{prefix}:wamid.{rng.getrandbits(96):024x}" for _ in range(count)]


async def _create(path: Path) -> None:
    async with SQLiteStore(path) as store:
        await store.create_session("telegram", "bench", "1", "triage")


def prepare(path: Path, rows: int) -> float:
    """Create the schema and one session through the store, then fill the dedup table."""
    started = time.perf_counter()
    asyncio.run(_create(path))
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")  # setup only; measured runs use FULL
    conn.execute("BEGIN")
    conn.execute(
        "WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
        " INSERT INTO processed_messages (key, seen_at)"
        " SELECT 'pre:wamid.' || lower(hex(randomblob(12))), ? FROM n",
        (rows, time.time()),
    )
    conn.execute("COMMIT")
    conn.close()
    return time.perf_counter() - started


def raw_connect(path: Path) -> sqlite3.Connection:
    """A stdlib connection with the store's PRAGMAs."""
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in ("busy_timeout = 5000", "foreign_keys = ON", "synchronous = FULL"):
        conn.execute(f"PRAGMA {pragma}")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    return conn


def raw_claim(conn: sqlite3.Connection, keys: list[str], ttl: float) -> set[str]:
    """What ``SQLiteStore.claim`` does, minus the async layer."""
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    rows = conn.execute(claim_sql(len(keys)), (now, now - ttl, *keys)).fetchall()
    conn.execute("COMMIT")
    return {row[0] for row in rows}


def raw_append(conn: sqlite3.Connection, text: str) -> int:
    """What ``SQLiteStore.append_message`` does, minus the async layer and the row objects."""
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    head = conn.execute("SELECT head_id FROM sessions WHERE session_id = ?", (SID,)).fetchone()
    message_id: int = conn.execute(
        "INSERT INTO messages (session_id, parent_id, role, text, agent, data, created_at)"
        " VALUES (?, ?, 'user', ?, NULL, '{}', ?) RETURNING id",
        (SID, head[0], text, now),
    ).fetchone()[0]
    conn.execute(
        "UPDATE sessions SET head_id = ?, updated_at = ? WHERE session_id = ?",
        (message_id, now, SID),
    )
    conn.execute("COMMIT")
    return message_id


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def run_raw(path: Path, plan: Plan, keys: list[str], batches: list[list[str]]) -> list[float]:
    """Seconds for the three phases on raw sqlite3."""
    conn = raw_connect(path)
    ttl = 192 * 3600.0
    try:
        return [
            timed(lambda: [raw_claim(conn, [key], ttl) for key in keys]),
            timed(lambda: [raw_claim(conn, batch, ttl) for batch in batches]),
            timed(lambda: [raw_append(conn, f"message {i}") for i in range(plan.appends)]),
        ]
    finally:
        conn.close()


async def run_store(
    path: Path, plan: Plan, keys: list[str], batches: list[list[str]]
) -> list[float]:
    """Seconds for the three phases through SQLiteStore."""
    async with SQLiteStore(path) as store:
        started = time.perf_counter()
        for key in keys:
            await store.claim([key])
        single = time.perf_counter() - started
        started = time.perf_counter()
        for batch in batches:
            await store.claim(batch)
        batch_time = time.perf_counter() - started
        started = time.perf_counter()
        for i in range(plan.appends):
            await store.append_message(SID, "user", f"message {i}")
        return [single, batch_time, time.perf_counter() - started]


async def race(path: Path, racers: int, rounds: int) -> float:
    """Average number of winners when ``racers`` connections claim one new key at once."""
    stores = [await SQLiteStore.open(path) for _ in range(racers)]
    try:
        winners = 0
        for round_ in range(rounds):
            key = f"race:{round_}"
            results = await asyncio.gather(*(store.claim([key]) for store in stores))
            winners += sum(key in result for result in results)
        return winners / rounds
    finally:
        for store in stores:
            await store.aclose()


def one_repeat(
    paths: dict[str, Path], plan: Plan, rng: random.Random, index: int
) -> dict[str, list[float]]:
    """Both sides once, in alternating order, each on its own copy of the database."""
    results: dict[str, list[float]] = {}
    sides = ["store", "raw"] if index % 2 == 0 else ["raw", "store"]
    for side in sides:
        keys = make_keys(rng, plan.singles, f"s{index}{side}")
        flat = make_keys(rng, plan.batches * BATCH, f"b{index}{side}")
        batches = [flat[i : i + BATCH] for i in range(0, len(flat), BATCH)]
        if side == "store":
            results[side] = asyncio.run(run_store(paths[side], plan, keys, batches))
        else:
            results[side] = run_raw(paths[side], plan, keys, batches)
    return results


def report(plan: Plan, store: Timings, raw: Timings) -> list[str]:
    """Median rates, and the store/raw time ratio: median and range over paired runs."""
    lines = [f"{'phase':<24}{'store /s':>10}{'raw /s':>10}{'store/raw':>11}{'range':>14}"]
    phases = [
        ("claim, 1 key", plan.singles, store.single, raw.single),
        (f"claim, {BATCH}-key batch", plan.batches, store.batch, raw.batch),
        ("append_message", plan.appends, store.append, raw.append),
    ]
    for name, count, store_times, raw_times in phases:
        s, r = statistics.median(store_times), statistics.median(raw_times)
        ratios = [a / b for a, b in zip(store_times, raw_times, strict=True)]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        lines.append(
            f"{name:<24}{count / s:>10,.0f}{count / r:>10,.0f}"
            f"{statistics.median(ratios):>10.2f}x{spread:>14}"
        )
    keys = plan.batches * BATCH
    s, r = statistics.median(store.batch), statistics.median(raw.batch)
    lines.append(f"{'  keys/s in batches':<24}{keys / s:>10,.0f}{keys / r:>10,.0f}")
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.store", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="pre-filled dedup rows")
    parser.add_argument("--repeat", type=int, default=5, help="runs per side; medians reported")
    parser.add_argument("--singles", type=int, default=2000, help="1-key claims per run")
    parser.add_argument("--batches", type=int, default=500, help="64-key claims per run")
    parser.add_argument("--appends", type=int, default=2000, help="appends per run")
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (a temp dir)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the figures."""
    args = parse_args(argv)
    plan = Plan(args.singles, args.batches, args.appends)
    workdir = Path(tempfile.mkdtemp(prefix="bench-store-", dir=args.dir))
    try:
        paths = {"store": workdir / "store.db", "raw": workdir / "raw.db"}
        setup = prepare(paths["store"], args.rows)
        shutil.copyfile(paths["store"], paths["raw"])
        print(*machine(), sep="\n")
        print(f"files in {workdir}; {args.rows:,} dedup rows pre-filled in {setup:.1f}s")
        print(f"{args.repeat} runs per side, synchronous=FULL, one transaction per call\n")
        store, raw = Timings([], [], []), Timings([], [], [])
        rng = random.Random(2)
        for index in range(args.repeat):
            results = one_repeat(paths, plan, rng, index)
            for timings, side in ((store, "store"), (raw, "raw")):
                for series, seconds in zip(
                    (timings.single, timings.batch, timings.append), results[side], strict=True
                ):
                    series.append(seconds)
        print(*report(plan, store, raw), sep="\n")
        winners = asyncio.run(race(paths["store"], 8, 50))
        print(
            "\n8 connections racing on one new key, 50 rounds:"
            f" told 'new' {winners:.1f} times on average"
        )
        print(f"\n{REFERENCE}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
