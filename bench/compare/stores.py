"""Part 3: chatflow-agent's ``SQLiteSessionStore`` and the gateway's store on the same work.

Each run starts one worker process per side (``bench.compare.stores_worker work``, pinned to
core 0, a fresh database file), sides alternating which goes first; then the race
(``stores_worker race``: 8 processes, unpinned, one database file per side).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.compare import procs

SIDES = ("gateway", "chatflow")
EDGE = 10  # turns averaged at each end of the deep session
CURVE_POINTS = 20  # the deep session's turn cost, in this many blocks, for the plot


@dataclass(frozen=True)
class StorePlan:
    deep: int = 1000
    sessions: int = 1000
    turns: int = 3
    claims: int = 10_000
    batch_claims: int = 100_000
    batch: int = 64
    processes: int = 8
    race_keys: int = 1000

    def options(self) -> list[str]:
        return [
            f"--deep={self.deep}",
            f"--sessions={self.sessions}",
            f"--turns={self.turns}",
            f"--claims={self.claims}",
            f"--batch-claims={self.batch_claims}",
            f"--batch={self.batch}",
            f"--processes={self.processes}",
            f"--race-keys={self.race_keys}",
        ]


async def worker(task: str, side: str, directory: Path, plan: StorePlan, *extra: str) -> Any:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "bench.compare.stores_worker", task, side),
        *(f"--dir={directory}", *plan.options(), *extra),
        cwd=procs.ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"stores_worker {task} {side} failed ({process.returncode})")
    return json.loads(out.decode().strip().splitlines()[-1])


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """One side's run: per-turn times reduced to the figures and the plot's curve."""
    deep, wide = raw["deep"], raw["wide"]
    block = max(1, len(deep) // CURVE_POINTS)
    curve = [statistics.median(deep[i : i + block]) * 1000 for i in range(0, len(deep), block)]
    figures = {
        "deep_first_ms": statistics.median(deep[:EDGE]) * 1000,
        "deep_last_ms": statistics.median(deep[-EDGE:]) * 1000,
        "deep_per_second": len(deep) / sum(deep),
        "deep_curve_ms": curve,
        "deep_block": block,
        "wide_per_second": len(wide) / sum(wide),
        "wide_p99_ms": sorted(wide)[int(0.99 * (len(wide) - 1))] * 1000,
        "unique": raw["unique"],
        "single_per_second": raw["claims"] / raw["single"]["seconds"],
        "single_new": raw["single"]["new"],
    }
    if "batch" in raw:
        figures["batch_keys_per_second"] = raw["batch_claims"] / raw["batch"]["seconds"]
        figures["batch_new"] = raw["batch"]["new"]
        figures["batch_unique"] = raw["batch_unique"]
    return figures


async def one_run(plan: StorePlan, index: int, base: Path) -> dict[str, dict[str, Any]]:
    """Both sides' work once, then both races."""
    order = SIDES if index % 2 == 0 else SIDES[::-1]
    result: dict[str, dict[str, Any]] = {}
    for side in order:
        directory = procs.folder(base / f"stores-{index}-{side}")
        raw = await worker("work", side, directory, plan, "--cpu=0", f"--seed={index}")
        result[side] = summarize(raw)
    for side in order:
        directory = procs.folder(base / f"race-{index}-{side}")
        result[side]["race"] = await worker("race", side, directory, plan, f"--seed={index}")
    return result
