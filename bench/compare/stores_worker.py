"""One side's store work in its own process: ``python -m bench.compare.stores_worker``.

``work``: a deep session (``--deep`` turns, each timed), wide sessions (``--sessions`` x
``--turns``, turn k of every session, then k + 1), ``--claims`` dedup check-and-claims of the
stream (30% repeats) one key per call, and (the gateway only: chatflow has no batch call)
``--batch-claims`` in batches of ``--batch``. Pinned to core 0 by the caller. ``race``:
``--processes`` processes (forked, unpinned) each check-and-claim the same ``--race-keys``
stream at once. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.compare import stream
from bench.compare.stores_sides import Side, open_side
from bench.e2e import pin

BARRIER_SECONDS = 60


def keys(count: int, seed: int) -> list[str]:
    """The stream as WhatsApp dedup keys (30% of them repeats)."""
    return [f"whatsapp:wamid.bench{n:012d}" for n in stream.originals(count, seed)]


async def deep(side: Side, turns: int) -> list[float]:
    """Seconds of each of ``turns`` turns of one session, in order."""
    session = await side.new_session("deep")
    times = []
    for n in range(turns):
        started = time.perf_counter()
        await side.turn(session, stream.text(n))
        times.append(time.perf_counter() - started)
    return times


async def wide(side: Side, sessions: int, turns: int) -> list[float]:
    """Seconds of each turn of ``sessions`` sessions, round after round."""
    names = [await side.new_session(f"wide{s}") for s in range(sessions)]
    times = []
    for n in range(turns):
        for session in names:
            started = time.perf_counter()
            await side.turn(session, stream.text(n))
            times.append(time.perf_counter() - started)
    return times


async def claims(side: Side, batches: Sequence[Sequence[str]]) -> dict[str, float]:
    """Check-and-claim every batch in turn: seconds, and how many keys were told "new"."""
    started = time.perf_counter()
    new = 0
    for batch in batches:
        new += len(await side.claim(batch))
    return {"seconds": time.perf_counter() - started, "new": new}


def chunks(items: Sequence[str], size: int) -> list[Sequence[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


async def work(args: argparse.Namespace) -> dict[str, Any]:
    side = await open_side(args.side, args.dir / f"{args.side}.db")
    try:
        result: dict[str, Any] = {"deep": await deep(side, args.deep)}
        result["wide"] = await wide(side, args.sessions, args.turns)
        stream_keys = keys(args.claims, args.seed)
        result |= {"claims": len(stream_keys), "unique": len(set(stream_keys))}
        result["single"] = await claims(side, chunks(stream_keys, 1))
        if args.side == "gateway":  # chatflow has no call for several keys
            batch_keys = [k.replace("bench", "batch") for k in keys(args.batch_claims, args.seed)]
            result |= {"batch_claims": len(batch_keys), "batch_unique": len(set(batch_keys))}
            result["batch"] = await claims(side, chunks(batch_keys, args.batch))
        return result
    finally:
        await side.aclose()


async def _prepare(name: str, path: Path) -> None:
    side = await open_side(name, path)  # creates the schema before the racers start
    await side.aclose()


def _racer(name: str, path: Path, race_keys: list[str], barrier: Any, out: Any) -> None:
    async def go() -> list[str]:
        side = await open_side(name, path)
        try:
            barrier.wait(BARRIER_SECONDS)
            return [key for key in race_keys if await side.claim([key])]
        finally:
            await side.aclose()

    out.put(asyncio.run(go()))


def race(args: argparse.Namespace) -> dict[str, Any]:
    """How many of the racing callers each key's check-and-claim told "new"."""
    path = args.dir / f"{args.side}-race.db"
    asyncio.run(_prepare(args.side, path))
    race_keys = keys(args.race_keys, args.seed + 2)
    context = multiprocessing.get_context("fork")
    barrier, out = context.Barrier(args.processes + 1), context.Queue()
    racers = [
        context.Process(target=_racer, args=(args.side, path, race_keys, barrier, out))
        for _ in range(args.processes)
    ]
    for racer in racers:
        racer.start()
    barrier.wait(BARRIER_SECONDS)
    started = time.perf_counter()
    told: Counter[str] = Counter()
    for _ in racers:
        told.update(out.get(timeout=600))
    seconds = time.perf_counter() - started
    for racer in racers:
        racer.join()
    unique = len(set(race_keys))
    return {
        "unique": unique,
        "told_new": sum(told.values()),
        "keys_told_new_twice_or_more": sum(1 for n in told.values() if n > 1),
        "keys_never_new": unique - len(told),
        "calls": len(race_keys) * args.processes,
        "seconds": seconds,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.compare.stores_worker")
    parser.add_argument("task", choices=["work", "race"])
    parser.add_argument("side", choices=["gateway", "chatflow"])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--deep", type=int, default=1000, help="turns of the one deep session")
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=10, help="turns of each wide session")
    parser.add_argument("--claims", type=int, default=100_000)
    parser.add_argument("--batch-claims", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--race-keys", type=int, default=1000)
    parser.add_argument("--cpu", type=int, help="pin to this core")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.cpu is not None:
        pin(args.cpu)
    args.dir.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(work(args)) if args.task == "work" else race(args)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
