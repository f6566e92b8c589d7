"""``python -m bench.compare``: run the parts, write docs/benchmarks.md's tables and the PNGs.

``make bench`` runs it with the defaults, sized to finish within 15 minutes on a two-core
machine; ``--full`` uses the issue's sizes throughout (much longer: chatflow-agent's store
claims about 600 keys/s and its webhook answers about 25 messages/s end to end).
``--render`` rewrites the tables and pictures from the saved results without measuring.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from bench.compare import ingest, procs, report, scaling, stores
from bench.e2e import CLIENT_CPU, pin
from bench.store import machine

DOC = procs.ROOT / "docs" / "benchmarks.md"
PICTURES = procs.ROOT / "docs" / "bench"
RESULTS = PICTURES / "results.json"
PARTS = ("ingest", "stores", "scaling")


@dataclasses.dataclass(frozen=True)
class Plans:
    ingest: ingest.IngestPlan
    stores: stores.StorePlan
    scaling: scaling.ScalingPlan


def plans(args: argparse.Namespace) -> Plans:
    """The sizes: ``make bench``'s defaults, the issue's (``--full``) or a smoke run."""
    if args.quick:
        return Plans(
            ingest.IngestPlan(args.repeat, 0.3, 1.0, open_warmup=0.2, open_seconds=1.0),
            stores.StorePlan(100, 50, 2, 500, 2000, race_keys=100),
            scaling.ScalingPlan((5, 20), (2, 1), (10, 100), 2, 50, 1.0, (5,), 20),
        )
    if args.full:
        full = scaling.ScalingPlan(rounds=(10, 3, 1, 1), peer_counts=(10, 100, 1000))
        return Plans(
            ingest.IngestPlan(args.repeat), stores.StorePlan(turns=10, claims=100_000), full
        )
    return Plans(ingest.IngestPlan(args.repeat), stores.StorePlan(), scaling.ScalingPlan())


async def graph(request: web.Request) -> web.Response:
    """The Graph API's answer to a message sent or marked read."""
    if (await request.json()).get("status") == "read":
        return web.json_response({"success": True})
    return web.json_response({"messaging_product": "whatsapp", "messages": [{"id": "wamid.o"}]})


@asynccontextmanager
async def fake_platform_apis() -> AsyncIterator[str]:
    """The tests' fake Bot API (getMe, setWebhook: the Telegram sides start offline; the
    served gateway's sends), and a Graph API answering every send."""
    from tests.channels.telegram_fakes import FakeBotApi

    app = FakeBotApi().app()
    app.router.add_post("/{version}/{number}/messages", graph)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def run_ingest(plan: ingest.IngestPlan, base: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with fake_platform_apis() as fake:
        for platform in ingest.SIDES:
            results[platform] = []
            for index in range(plan.repeat):
                run = await ingest.one_run(platform, plan, index, base, fake)
                results[platform].append(run)
                say(f"ingest {platform} run {index + 1}: " + _rates(run))
    return results


async def run_stores(plan: stores.StorePlan, repeat: int, base: Path) -> list[dict[str, Any]]:
    results = []
    for index in range(repeat):
        run = await stores.one_run(plan, index, base)
        results.append(run)
        say(f"stores run {index + 1}: " + _rates(run, "wide_per_second"))
    return results


async def run_scaling(plan: scaling.ScalingPlan, repeat: int, base: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"sessions": {}, "history": {}, "inflight": {}}
    templates = {}
    for side in scaling.SIDES:
        templates[side] = procs.folder(base / f"history-{side}") / "template.db"
        seconds = await scaling.prepare_history(side, plan, templates[side])
        say(f"history of {side} written in {seconds:.1f} s")
    for index in range(repeat):
        order = scaling.SIDES if index % 2 == 0 else scaling.SIDES[::-1]
        for side in order:
            where = base / f"scaling-{index}-{side}"
            for kind, result in (
                ("sessions", await scaling.sessions(side, plan, where / "sessions")),
                ("history", await scaling.history(side, plan, where / "history", templates[side])),
                ("inflight", await scaling.inflight(side, plan, where / "inflight")),
            ):
                results[kind].setdefault(side, []).append(result)
            say(f"scaling run {index + 1} {side} done")
    return results


def _rates(run: dict[str, dict[str, Any]], key: str = "rate") -> str:
    return ", ".join(f"{side} {figures[key]:,.0f}/s" for side, figures in run.items())


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


async def measure(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    chosen = plans(args)
    results: dict[str, Any] = {
        "machine": machine(),
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "repeat": args.repeat,
        "plans": {name: dataclasses.asdict(plan) for name, plan in vars(chosen).items()},
    }
    started = time.perf_counter()
    if "ingest" in args.parts:
        results["ingest"] = await run_ingest(chosen.ingest, base)
    if "stores" in args.parts:
        results["stores"] = await run_stores(chosen.stores, args.repeat, base)
    if "scaling" in args.parts:
        results["scaling"] = await run_scaling(chosen.scaling, args.repeat, base)
    results["seconds"] = time.perf_counter() - started
    return results


def render(results: dict[str, Any], doc: Path, pictures: Path) -> None:
    from bench.compare import plots

    report.write_section(doc, report.section(results))
    caption = f"bench.compare, {results['when']}; {results['machine'][0]}"
    for path in plots.draw_all(results, pictures, caption):
        say(f"wrote {path}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--repeat", type=int, default=3, help="runs of everything; medians")
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--full", action="store_true", help="the issue's sizes (long)")
    sizes.add_argument("--quick", action="store_true", help="tiny sizes: does it all run?")
    parser.add_argument("--render", action="store_true", help="only re-render saved results")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--pictures", type=Path, default=PICTURES)
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not args.render:
        pin(CLIENT_CPU)  # the load generators and fakes of this process; servers on core 0
        base = Path(tempfile.mkdtemp(prefix="bench-compare-", dir=args.dir))
        results = asyncio.run(measure(args, base))
        shutil.rmtree(base, ignore_errors=True)
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
        say(f"measured in {results['seconds']:.0f} s; results in {args.results}")
    results = json.loads(args.results.read_text(encoding="utf-8"))
    render(results, args.doc, args.pictures)


if __name__ == "__main__":
    main()
