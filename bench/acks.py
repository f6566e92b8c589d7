"""Acks while answering: ``python -m bench.acks``.

The full ``gateway serve`` (pipeline, a ``rules`` agent answering every message, the sender to a
fake Graph API, rate limits out of the way: the config of ``bench/e2e.py``; SQLite on disk,
synchronous=FULL) runs pinned to core 0; the load generator (``bench._loadgen``, raw keep-alive
sockets, in its own process) and the fake Graph API that records every reply (this process) run
on core 1. Every request is a signed WhatsApp delivery with one text message, a unique wamid,
from one of ``--sessions`` users.

- **closed loop**: ``--connections`` connections send back to back for ``--warmup`` +
  ``--seconds``; acks/s of the gateway beside the bare aiohttp handler of ``bench/ingest.py``
  on the same core, same load generator, same run; sides alternate which goes first; medians of
  ``--repeat`` runs. The replies the gateway sent meanwhile are counted too.
- **open loop**: the gateway's e2e capacity is measured first (``bench.e2e.run_e2e``,
  WhatsApp only, all messages posted at once), then a fresh gateway gets deliveries at
  ``--factor`` (2) times that rate for ``--open-seconds`` (10); ack latency is counted from each
  request's scheduled time. Then it waits until every acknowledged message has its reply at the
  fake Graph API and checks each was answered exactly once (none missing, none twice, none
  unknown), and reports how long that drain took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from bench import _loadgen
from bench.e2e import Message, Replies, fake_platforms, free_port, gateway, pin, run_e2e, webhook
from bench.e2e import workload as e2e_workload
from bench.store import machine

ROOT = Path(__file__).resolve().parents[1]
SERVER_CPU, CLIENT_CPU = 0, 1


def raw(message: Message) -> bytes:
    path, body, headers = webhook(message)
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head += f"Content-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def messages(first: int, count: int, sessions: int) -> list[Message]:
    """WhatsApp only; message ``n`` numbers start at ``first`` so runs never repeat a wamid."""
    return [Message(i % sessions, first + i // sessions, False) for i in range(count)]


# --- the load generator's process ----------------------------------------------------------------


def load_main(args: argparse.Namespace) -> None:
    pin(CLIENT_CPU)
    built = [raw(m) for m in messages(args.first, args.count, args.sessions)]
    print("GO", flush=True)
    options = {
        "port": args.port,
        "connections": args.connections,
        "warmup": args.warmup,
        "seconds": args.seconds,
        "rate": args.rate,
    }
    print(json.dumps(asyncio.run(_loadgen.run(options, built))), flush=True)


async def load(
    port: int,
    count: int,
    sessions: int,
    connections: int,
    warmup: float,
    seconds: float,
    rate: float = 0.0,
) -> tuple[dict[str, Any], float]:
    """Run the load generator pinned to core 1; returns its result and when it started."""
    command = [sys.executable, "-m", "bench.acks", "load", "--port", str(port)]
    command += ["--count", str(count), "--sessions", str(sessions), "--first", "0"]
    command += ["--connections", str(connections), "--warmup", str(warmup)]
    command += ["--seconds", str(seconds), "--rate", str(rate)]
    process = await asyncio.create_subprocess_exec(
        *command, cwd=ROOT, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    line = await process.stdout.readline()
    if line.strip() != b"GO":
        raise RuntimeError("the load generator did not start")
    started = time.perf_counter()
    out = await process.stdout.read()
    await process.wait()
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result, started


async def bare_server(workdir: Path) -> tuple[asyncio.subprocess.Process, int]:
    """bench/ingest.py's bare aiohttp handler, pinned to core 0."""
    port = free_port()
    command = [sys.executable, "-m", "bench.ingest", "serve", "bare", "--port", str(port)]
    command += ["--dir", str(workdir), "--cpu", str(SERVER_CPU)]
    process = await asyncio.create_subprocess_exec(
        *command, cwd=ROOT, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    if (await process.stdout.readline()).strip() != b"READY":
        raise RuntimeError("the bare server did not start")
    return process, port


async def fake_api(replies: Replies) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(fake_platforms(replies), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


# --- closed loop ---------------------------------------------------------------------------------


async def closed_side(side: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    count = int(args.max_rate * (args.warmup + args.seconds)) + 1000
    span = (args.connections, args.warmup, args.seconds)
    if side == "bare":
        process, port = await bare_server(workdir)
        try:
            result, _ = await load(port, count, args.sessions, *span)
        finally:
            process.terminate()
            await process.wait()
        return result
    replies = Replies(count)
    runner, fake_url = await fake_api(replies)
    try:
        async with gateway(workdir, fake_url) as url:
            port = int(url.rsplit(":", 1)[1])
            result, started = await load(port, count, args.sessions, *span)
            window = (started + args.warmup, started + args.warmup + args.seconds)
            answered = sum(window[0] <= t[0] < window[1] for t in replies.arrived.values())
            result["answered_rate"] = answered / args.seconds
            result["duplicates"] = sum(len(t) - 1 for t in replies.arrived.values())
    finally:
        await runner.cleanup()
    return result


# --- open loop -----------------------------------------------------------------------------------


async def capacity(args: argparse.Namespace, workdir: Path) -> float:
    batch = e2e_workload(args.capacity_messages, args.sessions, "whatsapp")
    result = await run_e2e(batch, 64, workdir)
    if result.duplicates:
        raise RuntimeError("the capacity run sent a reply twice")
    return len(batch) / result.seconds


async def open_run(args: argparse.Namespace, rate: float, workdir: Path) -> dict[str, Any]:
    total = int(rate * args.open_seconds)
    sent = messages(0, total, args.sessions)
    replies = Replies(total)
    runner, fake_url = await fake_api(replies)
    try:
        async with gateway(workdir, fake_url) as url:
            port = int(url.rsplit(":", 1)[1])
            result, _ = await load(
                port, total, args.sessions, args.open_connections, 0.0, args.open_seconds, rate
            )
            ended = time.perf_counter()
            acked = result["statuses"].get("200", 0)
            expected = {m.tag for m in sent}
            if acked == total:
                await asyncio.wait_for(replies.done.wait(), args.drain_timeout)
            else:  # which ones failed is not known: wait for as many replies as acks
                deadline = ended + args.drain_timeout
                while len(replies.arrived) < acked and time.perf_counter() < deadline:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            drained = time.perf_counter()
            await asyncio.sleep(args.grace)  # a late second reply would show up here
    finally:
        await runner.cleanup()
    arrived = replies.arrived
    result.update(
        rate_asked=rate,
        sent=total,
        acked=acked,
        answered=len(arrived),
        missing=len(expected - arrived.keys()) if acked == total else max(0, acked - len(arrived)),
        unknown=len(arrived.keys() - expected),
        duplicates=sum(len(t) - 1 for t in arrived.values()),
        drain_s=drained - ended,
        last_reply_after_start_s=max((t[0] for t in arrived.values()), default=ended)
        - (ended - args.open_seconds),
    )
    return result


# --- report --------------------------------------------------------------------------------------


def _list(values: list[float], spec: str = ",.0f") -> str:
    return ", ".join(format(v, spec) for v in values)


def _offered(args: argparse.Namespace) -> str:
    return f"{args.open_rate:,.0f}/s" if args.open_rate else f"{args.factor:g}x capacity"


def _closed_lines(closed: dict[str, list[dict[str, Any]]]) -> list[str]:
    bare = [r["rate"] for r in closed["bare"]]
    gw = [r["rate"] for r in closed["gateway"]]
    ratios = [g / b for g, b in zip(gw, bare, strict=True)]
    answered = [r["answered_rate"] for r in closed["gateway"]]
    return [
        f"| closed loop, bare aiohttp handler: acks/s | {statistics.median(bare):,.0f} | "
        f"{_list(bare)} | |",
        f"| closed loop, full `gateway serve`: acks/s | {statistics.median(gw):,.0f} | "
        f"{_list(gw)} | |",
        f"| gateway / bare | **{statistics.median(ratios):.0%}** | "
        f"{_list([r * 100 for r in ratios])} (%) | >= 25% |",
        f"| gateway ack p50 / p99 (ms), closed loop | "
        f"{statistics.median(r['p50_ms'] for r in closed['gateway']):.1f} / "
        f"{statistics.median(r['p99_ms'] for r in closed['gateway']):.1f} | | |",
        f"| replies sent meanwhile /s (closed loop) | {statistics.median(answered):,.0f} | "
        f"{_list(answered)} | |",
    ]


def report(
    args: argparse.Namespace,
    closed: dict[str, list[dict[str, Any]]],
    capacities: list[float],
    opened: list[dict[str, Any]],
) -> list[str]:
    lines = ["| measure | median | runs | target |", "| --- | ---: | --- | --- |"]
    if closed["gateway"]:  # --repeat 0: the open loop only
        lines += _closed_lines(closed)
    if opened:
        p50 = [r["p50_ms"] for r in opened]
        p99 = [r["p99_ms"] for r in opened]
        rates = [r["rate_asked"] for r in opened]
        drains = [r["drain_s"] for r in opened]
        bad = sum(r["missing"] + r["duplicates"] + r["unknown"] for r in opened)
        non200 = sum(r["sent"] - r["acked"] for r in opened)
        lines += [
            f"| e2e capacity, answered/s (WhatsApp, burst) | {statistics.median(capacities):,.0f}"
            f" | {_list(capacities)} | |",
            f"| open loop at {_offered(args)} for {args.open_seconds:g} s: rate/s | "
            f"{statistics.median(rates):,.0f} | {_list(rates)} | |",
            f"| open loop: ack p50 (ms) | {statistics.median(p50):,.1f} | {_list(p50, ',.1f')} | |",
            f"| open loop: ack p99 (ms) | **{statistics.median(p99):,.1f}** | "
            f"{_list(p99, ',.1f')} | < 50 ms |",
            f"| open loop: drain after the last post (s) | {statistics.median(drains):.1f} | "
            f"{_list(drains, '.1f')} | |",
            f"| acked / sent; answered exactly once | "
            f"{sum(r['acked'] for r in opened):,} / {sum(r['sent'] for r in opened):,}; "
            f"{'yes' if bad == 0 else 'NO'} | missing "
            f"{_list([r['missing'] for r in opened], 'd')}, twice "
            f"{_list([r['duplicates'] for r in opened], 'd')}, unknown "
            f"{_list([r['unknown'] for r in opened], 'd')}, non-200 {non200} | all, once |",
        ]
    return lines


async def bench(args: argparse.Namespace, base: Path) -> list[str]:
    closed: dict[str, list[dict[str, Any]]] = {"bare": [], "gateway": []}
    for repeat in range(args.repeat):
        order = ["bare", "gateway"] if repeat % 2 == 0 else ["gateway", "bare"]
        for side in order:
            workdir = base / f"closed-{side}-{repeat}"
            workdir.mkdir()
            result = await closed_side(side, args, workdir)
            closed[side].append(result)
            extra = (
                f"  answered meanwhile {result['answered_rate']:,.0f}/s"
                if side == "gateway"
                else ""
            )
            print(
                f"run {repeat + 1} closed {side:8} {result['rate']:8,.0f} acks/s  p50 "
                f"{result['p50_ms']:.1f} ms  p99 {result['p99_ms']:.1f} ms  "
                f"statuses {result['statuses']}{extra}"
                + ("  (requests exhausted)" if result["exhausted"] else ""),
                flush=True,
            )
    capacities: list[float] = []
    opened: list[dict[str, Any]] = []
    for repeat in range(args.open_repeat):
        workdir = base / f"capacity-{repeat}"
        workdir.mkdir()
        cap = await capacity(args, workdir)
        capacities.append(cap)
        workdir = base / f"open-{repeat}"
        workdir.mkdir()
        rate = args.open_rate or args.factor * cap  # a fixed rate compares two builds fairly
        result = await open_run(args, rate, workdir)
        opened.append(result)
        print(
            f"run {repeat + 1} capacity {cap:,.0f}/s; open loop at {result['rate_asked']:,.0f}/s: "
            f"ack p50 {result['p50_ms']:.1f} ms p99 {result['p99_ms']:.1f} ms, acked "
            f"{result['acked']}/{result['sent']}, answered {result['answered']}, missing "
            f"{result['missing']}, twice {result['duplicates']}, unknown {result['unknown']}, "
            f"drained {result['drain_s']:.1f} s after the last post; ack p99 (ms) second by "
            f"second: {result.get('p99_ms_by_second')}",
            flush=True,
        )
    return report(args, closed, capacities, opened)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.acks", description=__doc__)
    parser.add_argument("role", nargs="?", default="bench", choices=["bench", "load"])
    parser.add_argument("--repeat", type=int, default=3, help="closed-loop runs per side")
    parser.add_argument("--open-repeat", type=int, default=3, help="capacity + open-loop runs")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--sessions", type=int, default=300, help="distinct WhatsApp users")
    parser.add_argument("--max-rate", type=float, default=15_000, help="requests to pre-build")
    parser.add_argument("--capacity-messages", type=int, default=3000)
    parser.add_argument("--factor", type=float, default=2.0, help="open-loop rate / capacity")
    parser.add_argument(
        "--open-rate", type=float, default=0.0, help="open-loop rate /s (default: --factor x)"
    )
    parser.add_argument("--open-seconds", type=float, default=10.0)
    parser.add_argument("--open-connections", type=int, default=256)
    parser.add_argument("--drain-timeout", type=float, default=600.0)
    parser.add_argument("--grace", type=float, default=1.0, help="wait for late duplicates")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    # the load generator's process
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--rate", type=float, default=0.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.role == "load":
        load_main(args)
        return
    pin(CLIENT_CPU)
    base = Path(tempfile.mkdtemp(prefix="bench-acks-", dir=args.dir))
    header = [*machine(), f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}"]
    print(*header, sep="\n")
    print(
        f"gateway / bare server on core {SERVER_CPU}; load generator (bench._loadgen) and fake "
        f"Graph API on core {CLIENT_CPU}; WhatsApp deliveries from {args.sessions} users; closed "
        f"loop {args.connections} connections, {args.warmup:g} s warm-up + {args.seconds:g} s, "
        f"{args.repeat} runs per side; open loop {args.open_connections} connections\n",
        flush=True,
    )
    try:
        lines = asyncio.run(bench(args, base))
    except BaseException:
        print(f"failed; configs, databases and logs are kept in {base}")
        raise
    shutil.rmtree(base, ignore_errors=True)
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")
    print(*lines, sep="\n")


if __name__ == "__main__":
    main()
