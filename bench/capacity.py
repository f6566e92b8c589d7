"""Messages answered per second when every turn waits on a slow model: ``python -m bench.capacity``.

The real ``gateway serve`` (a subprocess pinned to core 0, SQLite on disk, as in bench/e2e.py)
answers with an ``openai`` agent whose model is a fake OpenAI-compatible server in this process
(pinned to core 1, with the fake Telegram and Graph APIs of bench/e2e.py and the load
generator) that answers every completion after ``--delay`` (2 s). ``--sessions`` (2,000)
sessions, half Telegram chats and half WhatsApp users, send one signed webhook each.

- **answered /s**: from the first POST to the last reply at the fake platform APIs. Every
  message must get exactly one reply (checked). That span holds one ``--delay`` of latency
  besides the throughput, so **steady /s** also counts from the first reply to the last.
- **ratio**: answered /s over min(the e2e rate, sessions / delay). The e2e rate is bench/e2e.py's
  burst with the ``rules`` agent, measured in the same run (or given with ``--e2e-rate``):
  what the pipeline answers when turns cost no waiting; sessions / delay is the rate with every
  turn waiting at once.
- **peak in flight**: the most completions the fake model server held at once (its own count).
- **memory**: the gateway's VmRSS (``/proc/<pid>/status``) once ready and at the peak;
  (peak - ready) / peak in flight is the resident memory of one in-flight turn (with its
  share of the backlog: webhooks acknowledged and not answered yet).

``--max-turns`` sets ``dispatcher.max_concurrent_turns`` and ``--max-connections`` the model's
``max_connections`` (default: the gateway's defaults).
Medians over ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from bench.e2e import (
    CLIENT_CPU,
    GATEWAY_CPU,
    Replies,
    _post_all,
    _ready,
    config,
    fake_platforms,
    free_port,
    pin,
    run_e2e,
    workload,
)
from bench.store import machine
from webhook_bot_gateway import gateway
from webhook_bot_gateway.gateway.config import DispatcherConfig

TAG = re.compile(r"s[0-9]+-m[0-9]+")
SAMPLE_SECONDS = 0.02


class SlowModel:
    """A fake ``/v1/chat/completions``: echoes the message's tag after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.in_flight = 0
        self.peak = 0
        self.requests = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        found = TAG.search(json.dumps(body["messages"][-1]))
        text = f"Got {found.group(0) if found else '?'}, thanks."
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return web.json_response({"id": "c", "object": "chat.completion", "choices": [choice]})


def capacity_config(
    port: int, fake_url: str, db: Path, max_turns: int | None, max_connections: int | None = None
) -> str:
    """bench/e2e.py's config with an ``openai`` starting agent; max_concurrent_turns as given."""
    text = config(port, fake_url, db)
    text, count = re.subn(r"(?m)^max_concurrent_turns = .*$\n", "", text)
    head, agents, _ = text.partition("\n[agents]\n")
    if count != 1 or not agents:
        raise RuntimeError("bench/e2e.py's config changed shape; update bench/capacity.py")
    dispatcher = "[dispatcher]\n"
    if max_turns is not None:
        head = head.replace(dispatcher, f"{dispatcher}max_concurrent_turns = {max_turns}\n")
    pool = "" if max_connections is None else f"max_connections = {max_connections}\n"
    return f"""{head}
[agents]
starting_agent = "echo"
[agents.models.slow]
base_url = "{fake_url}/v1"
model = "slow"
max_retries = 0
{pool}[[agents.list]]
name = "echo"
instructions = "Echo the tag."
model = "slow"
"""


@asynccontextmanager
async def serve(workdir: Path, text: str) -> AsyncIterator[tuple[str, int]]:
    """``gateway serve`` with this config, pinned to its core; yields its URL and pid."""
    port = int(re.search(r"(?m)^port = ([0-9]+)$", text).group(1))  # type: ignore[union-attr]
    path = workdir / "gateway.toml"
    path.write_text(text, encoding="utf-8")
    log = (workdir / "gateway.log").open("ab")
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "webhook_bot_gateway", "serve", "--config", str(path)),
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
    )
    pin(GATEWAY_CPU, process.pid)
    url = f"http://127.0.0.1:{port}"
    try:
        await _ready(url, process)
        yield url, process.pid
    finally:
        process.terminate()
        await process.wait()
        log.close()


def status_kib(pid: int, field: str) -> int:
    """``VmRSS`` or ``VmHWM`` of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


@dataclass
class Capacity:
    rate: float
    steady: float  # answered /s from the first reply to the last
    peak: int
    rss_ready: int  # KiB
    rss_at_peak: int
    hwm: int
    duplicates: int
    ack_rate: float

    @property
    def per_turn_kib(self) -> float:
        return (self.rss_at_peak - self.rss_ready) / max(1, self.peak)


async def run_capacity(args: argparse.Namespace, workdir: Path) -> Capacity:
    """Every session's one message; wait for every reply, sampling the gateway's memory."""
    messages = workload(args.sessions, args.sessions, "both")
    replies = Replies(len(messages))
    model = SlowModel(args.delay)
    app = fake_platforms(replies)
    app.router.add_post("/v1/chat/completions", model.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    fake_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    db = workdir / "gateway.db"
    text = capacity_config(free_port(), fake_url, db, args.max_turns, args.max_connections)
    try:
        async with serve(workdir, text) as (url, pid):
            ready = status_kib(pid, "VmRSS")
            at_peak = [0, ready]  # (in flight, VmRSS) of the sample with the most in flight
            sampler = asyncio.create_task(_sample(pid, model, at_peak))
            try:
                _, started, acked = await _post_all(url, messages, args.concurrency, None)
                await asyncio.wait_for(replies.done.wait(), args.timeout)
            finally:
                sampler.cancel()
                with suppress(asyncio.CancelledError):
                    await sampler
            hwm = status_kib(pid, "VmHWM")
    finally:
        await runner.cleanup()
    missing = [m.tag for m in messages if m.tag not in replies.arrived]
    if missing or len(replies.arrived) != len(messages):
        raise RuntimeError(f"{len(missing)} message(s) without a reply, e.g. {missing[:3]}")
    firsts = sorted(times[0] for times in replies.arrived.values())
    last = firsts[-1]
    duplicates = sum(len(t) - 1 for t in replies.arrived.values())
    n = len(messages)
    steady = (n - 1) / max(last - firsts[0], 1e-9)
    return Capacity(
        n / (last - started),
        steady,
        model.peak,
        ready,
        at_peak[1],
        hwm,
        duplicates,
        n / (acked - started),
    )


async def _sample(pid: int, model: SlowModel, at_peak: list[int]) -> None:
    while True:
        in_flight = model.in_flight
        if in_flight > at_peak[0]:
            at_peak[:] = [in_flight, status_kib(pid, "VmRSS")]
        await asyncio.sleep(SAMPLE_SECONDS)


@dataclass(frozen=True)
class Run:
    capacity: Capacity
    e2e_rate: float

    def ratio(self, sessions: int, delay: float) -> float:
        return self.capacity.rate / min(self.e2e_rate, sessions / delay)


async def one_run(args: argparse.Namespace, index: int, base: Path) -> Run:
    directory = base / f"run{index}"
    directory.mkdir()
    e2e_rate = args.e2e_rate
    if e2e_rate is None:
        (directory / "e2e").mkdir()
        e2e_messages = workload(args.e2e_messages, args.e2e_messages // 10, "both")
        e2e = await run_e2e(e2e_messages, args.concurrency, directory / "e2e")
        e2e_rate = len(e2e_messages) / e2e.seconds
    (directory / "capacity").mkdir()
    return Run(await run_capacity(args, directory / "capacity"), e2e_rate)


def report(args: argparse.Namespace, runs: list[Run]) -> list[str]:
    caps = [r.capacity for r in runs]

    def row(name: str, values: list[float], spec: str = ",.0f") -> str:
        listed = ", ".join(format(v, spec) for v in values)
        return f"| {name} | {format(statistics.median(values), spec)} | {listed} |"

    mib = [c.rss_ready / 1024 for c in caps], [c.rss_at_peak / 1024 for c in caps]
    return [
        "| measure | median | runs |",
        "| --- | ---: | --- |",
        row("answered /s", [c.rate for c in caps]),
        row("steady /s (first reply to last)", [c.steady for c in caps]),
        row("e2e rate /s (rules agent)", [r.e2e_rate for r in runs]),
        row(
            f"answered / min(e2e, {args.sessions:,} / {args.delay:g} s)",
            [r.ratio(args.sessions, args.delay) for r in runs],
            ".0%",
        ),
        row("peak model requests in flight", [float(c.peak) for c in caps]),
        row("gateway VmRSS ready (MiB)", mib[0], ".1f"),
        row("gateway VmRSS at the peak (MiB)", mib[1], ".1f"),
        row("gateway VmHWM (MiB)", [c.hwm / 1024 for c in caps], ".1f"),
        row("KiB per in-flight turn", [c.per_turn_kib for c in caps], ".1f"),
        row("webhooks acked /s", [c.ack_rate for c in caps]),
        f"| replies sent twice | {sum(c.duplicates for c in caps)} | all runs |",
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__)
    parser.add_argument("--sessions", type=int, default=2000, help="one message each")
    parser.add_argument("--delay", type=float, default=2.0, help="the model's seconds per answer")
    parser.add_argument("--max-turns", type=int, help="dispatcher.max_concurrent_turns")
    parser.add_argument("--max-connections", type=int, help="the model's max_connections")
    parser.add_argument("--concurrency", type=int, default=64, help="POSTs in flight")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--e2e-rate", type=float, help="skip measuring bench/e2e.py's rate")
    parser.add_argument("--e2e-messages", type=int, default=3000)
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for replies")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the figures."""
    args = parse_args(argv)
    pin(CLIENT_CPU)
    base = Path(tempfile.mkdtemp(prefix="bench-capacity-", dir=args.dir))
    default = DispatcherConfig().max_concurrent_turns  # the code the gateway process runs
    turns = args.max_turns or f"{default} (the default)"
    print(*machine(), f"gateway code: {Path(gateway.__file__).parent}", sep="\n")
    print(
        f"{args.sessions:,} sessions x 1 message (Telegram and WhatsApp), model answers after "
        f"{args.delay:g} s, max_concurrent_turns = {turns}, {args.concurrency} POSTs in flight, "
        f"{args.repeat} runs; gateway on core {GATEWAY_CPU}, model, platforms and load on core "
        f"{CLIENT_CPU}\n"
    )
    started = time.perf_counter()
    try:
        runs = [asyncio.run(one_run(args, i, base)) for i in range(args.repeat)]
    except BaseException:
        print(f"failed; the gateway's config, database and log are kept in {base}")
        raise
    shutil.rmtree(base, ignore_errors=True)
    print(*report(args, runs), sep="\n")
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
