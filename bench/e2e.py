"""Messages answered end to end per second: ``python -m bench.e2e``.

The real ``gateway serve`` (a subprocess pinned to core 0, SQLite on disk, synchronous=FULL)
answers text messages with a ``rules`` agent; fake Telegram and Graph APIs in this process
(pinned to core 1, with the load generator) record when each reply arrives. Half the
sessions are Telegram chats, half WhatsApp users; every message is a signed webhook.

- **e2e**: from the first POST to the last reply at the fake API: webhook -> group commit ->
  intake -> dispatcher lane -> agent turn (one commit) -> outbox -> sender -> platform.
  Also the latency of each message, from its POST to its reply; with every message posted at
  once that is mostly queueing, so a second, open-loop phase posts a third of the messages at
  ``--paced-share`` (half) of the measured rate, or at ``--paced-rate`` messages per second
  (to compare two builds at one rate), and reports that latency, counted from each message's
  scheduled time.
- **turns** (the baseline, same run): the same turns with ``Runner.run_turn`` in-process on a
  fresh SQLite file, same agents, same concurrency bound, no HTTP, no inbox or outbox.

e2e/turns is what the pipeline around the agent costs. Medians over ``--repeat`` runs; the two
sides alternate which goes first. Every run checks that each message got exactly one reply
(and waits ``GRACE`` seconds after the last one for late repeats).

``--store postgresql://...`` puts the gateways and the baseline on PostgreSQL instead, each run
on a fresh ``bench_<random>`` schema (dropped afterwards). ``--processes N`` starts N gateways
with the same config, each on its own port, on one store; ``--spread message`` (default) sends
the messages of a session to the processes in turn (message n of session s to process
(s + n) mod N, as a load balancer without affinity would), ``--spread session`` keeps each
session on one process (pairs of sessions, one Telegram chat and one WhatsApp user, dealt in
turn). Gateway i is pinned to core i mod 2; with one process the load generator and fake APIs
are pinned to core 1 as before, with more they are left unpinned (they share both cores).
PostgreSQL, not started by the bench, is never pinned.

CPU: utime + stime of every gateway process and, on PostgreSQL, of the server's processes that
serve them (``bench/_pg.py``), read just before the first POST and when the last reply arrived,
reported per 1,000 answered messages.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench import _pg
from bench.store import machine
from webhook_bot_gateway.agents import AgentsConfig, Runner, UserInput, build_registry
from webhook_bot_gateway.store import open_store

GATEWAY_CPU, CLIENT_CPU = 0, 1
SECRET = "bench-app-secret"
BOT_SECRET = "bench-telegram-secret"
BOT_TOKEN = "123456:bench-token"
NUMBER = "100000000000001"
MAX_TURNS = 32  # dispatcher.max_concurrent_turns, also the baseline's bound
# the config's one expected warning at start (the default handoff agent is not declared)
STARTUP_NOTE = "dispatcher.dead_letter_handoff"
GRACE = 0.5  # seconds to wait after the last expected reply for any reply sent twice
AGENTS = {
    "starting_agent": "echo",
    "list": [
        {
            "name": "echo",
            "model": "rules",
            "rules": [{"match": "(?P<tag>s[0-9]+-m[0-9]+)", "reply": "Got {tag}, thanks."}],
        }
    ],
}


@dataclass(frozen=True)
class Message:
    session: int
    n: int
    telegram: bool

    @property
    def tag(self) -> str:
        return f"s{self.session}-m{self.n}"


@dataclass
class Replies:
    """What the fake APIs received: arrival time per reply tag."""

    total: int
    arrived: dict[str, list[float]] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, text: str) -> None:
        tag = text.removeprefix("Got ").removesuffix(", thanks.")
        self.arrived.setdefault(tag, []).append(time.perf_counter())
        if len(self.arrived) >= self.total:
            self.done.set()


def fake_platforms(replies: Replies) -> web.Application:
    """Telegram sendMessage and Graph messages, answering at once."""
    ids = iter(range(1, 10**9))

    async def telegram(request: web.Request) -> web.Response:
        fields = await _fields(request)
        if request.match_info["method"] != "sendMessage":
            return web.json_response({"ok": True, "result": True})
        replies.add(str(fields["text"]))
        chat = {"id": int(str(fields["chat_id"])), "type": "private"}
        message = {"message_id": next(ids), "date": 1735689600, "chat": chat}
        return web.json_response({"ok": True, "result": message})

    async def graph(request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("status") == "read":
            return web.json_response({"success": True})
        replies.add(body["text"]["body"])
        return web.json_response({"messages": [{"id": f"wamid.out{next(ids)}"}]})

    app = web.Application()
    app.router.add_post("/bot{token}/{method}", telegram)
    app.router.add_post("/{version}/{number}/messages", graph)
    return app


async def _fields(request: web.Request) -> dict[str, Any]:
    if request.content_type == "application/json":
        data: dict[str, Any] = await request.json()
        return data
    return dict(await request.post())


def webhook(message: Message) -> tuple[str, bytes, dict[str, str]]:
    """Path, body and headers of the webhook carrying ``message``."""
    if message.telegram:
        chat = 500_000 + message.session
        update = {
            "update_id": message.session * 100_000 + message.n,
            "message": {
                "message_id": message.n + 1,
                "date": 1735689600,
                "chat": {"id": chat, "type": "private"},
                "from": {"id": chat, "is_bot": False, "first_name": "B"},
                "text": message.tag,
            },
        }
        headers = {"X-Telegram-Bot-Api-Secret-Token": BOT_SECRET}
        return "/webhooks/telegram/bench", json.dumps(update).encode(), headers
    user = f"1555{message.session:07d}"
    value = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550001111", "phone_number_id": NUMBER},
        "contacts": [{"profile": {"name": "B"}, "wa_id": user}],
        "messages": [
            {
                "from": user,
                "id": f"wamid.{message.tag}",
                "timestamp": str(int(time.time())),  # inside WhatsApp's 24-hour window
                "type": "text",
                "text": {"body": message.tag},
            }
        ],
    }
    change = {"field": "messages", "value": value}
    envelope = {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [change]}]}
    body = json.dumps(envelope).encode()
    signature = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return "/webhooks/whatsapp", body, {"X-Hub-Signature-256": f"sha256={signature}"}


def config(port: int, fake_url: str, db: Path | str, pool_size: int | None = None) -> str:
    """The gateway's config: fakes for both platforms, limits out of the way.

    ``db``: a SQLite file, or a store url (``postgresql://...``).
    """
    agents = json.dumps(AGENTS)
    url = db if isinstance(db, str) else f"sqlite:///{db}"
    pool = "" if pool_size is None else f"pool_size = {pool_size}\n"
    return f"""
[server]
port = {port}
[store]
url = "{url}"
{pool}[dispatcher]
double_texting = "enqueue"
max_concurrent_turns = {MAX_TURNS}
typing_after_seconds = 60
[sender]
telegram_chat_per_second = 10000
telegram_bot_per_second = 100000
whatsapp_chat_per_second = 10000
whatsapp_number_per_second = 100000
burst = 100
[telegram]
api_base_url = "{fake_url}"
[[telegram.bots]]
name = "bench"
token = "{BOT_TOKEN}"
secret_token = "{BOT_SECRET}"
[whatsapp]
graph_base_url = "{fake_url}"
app_secret = "{SECRET}"
verify_token = "bench"
[[whatsapp.numbers]]
phone_number_id = "{NUMBER}"
access_token = "bench-token"
[agents]
starting_agent = "echo"
list = {_toml_inline(json.loads(agents)["list"])}
"""


def _toml_inline(value: Any) -> str:
    """JSON-shaped data as a TOML inline value (keys are plain words)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_inline(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_inline(v) for v in value) + "]"
    return json.dumps(value)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def pin(cpu: int, pid: int = 0) -> None:
    """Run a process (0: this one) on one core when there are two or more (else a no-op)."""
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > cpu:
        os.sched_setaffinity(pid, {cpu})


@dataclass(frozen=True)
class Gateway:
    url: str
    pid: int


@asynccontextmanager
async def gateway(workdir: Path, fake_url: str) -> AsyncIterator[str]:
    """``gateway serve`` on a fresh SQLite file, pinned to core 0; yields its base URL."""
    async with gateway_process(workdir, fake_url) as running:
        yield running.url


@asynccontextmanager
async def gateway_process(
    workdir: Path,
    fake_url: str,
    store: Path | str | None = None,
    index: int = 0,
    pool_size: int | None = None,
) -> AsyncIterator[Gateway]:
    """``gateway serve`` on ``store`` (default: a fresh SQLite file), pinned to core
    ``index`` mod 2; yields its base URL and pid."""
    port = free_port()
    db = workdir / "gateway.db" if store is None else store
    path = workdir / f"gateway{index or ''}.toml"
    path.write_text(config(port, fake_url, db, pool_size), encoding="utf-8")
    log = (workdir / f"gateway{index or ''}.log").open("ab")
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "webhook_bot_gateway", "serve", "--config", str(path)),
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
    )
    pin((GATEWAY_CPU + index) % 2, process.pid)  # while it still imports: before it serves
    url = f"http://127.0.0.1:{port}"
    try:
        await _ready(url, process)
        yield Gateway(url, process.pid)
    finally:
        process.terminate()
        await process.wait()
        log.close()


@asynccontextmanager
async def gateways(
    workdir: Path, fake_url: str, store: Path | str | None, processes: int, pool_size: int | None
) -> AsyncIterator[list[Gateway]]:
    """``processes`` gateways on one store; the first starts (and migrates) alone."""
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(
            gateway_process(workdir, fake_url, store, 0, pool_size)
        )
        others = [
            gateway_process(workdir, fake_url, store, i, pool_size) for i in range(1, processes)
        ]
        rest = await asyncio.gather(*(stack.enter_async_context(g) for g in others))
        yield [first, *rest]


def log_problems(workdir: Path) -> list[str]:
    """Lines of the gateways' logs at WARNING or above, and tracebacks."""
    lines = []
    for log in sorted(workdir.glob("gateway*.log")):
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            if STARTUP_NOTE in line:
                continue
            if any(word in line for word in (" WARNING ", " ERROR ", " CRITICAL ", "Traceback")):
                lines.append(f"{log.name}: {line}")
    return lines


async def _ready(url: str, process: asyncio.subprocess.Process) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(600):
            if process.returncode is not None:
                raise RuntimeError("the gateway exited at start; see its gateway.log")
            try:
                async with http.get(f"{url}/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("the gateway did not become ready")


@dataclass
class E2E:
    seconds: float
    ack_seconds: float
    latencies: list[float]
    duplicates: int
    gateway_cpu: float = 0.0  # CPU seconds of the gateway processes, first POST to last reply
    pg_cpu: float = 0.0  # of PostgreSQL's processes serving them (0 on SQLite)
    foreign_backends: int = 0  # other applications' PostgreSQL backends seen meanwhile
    problems: list[str] = field(default_factory=list)  # warnings and errors in the logs


@dataclass(frozen=True)
class Setup:
    """Where the gateways store, how many there are, how the load is spread."""

    store: str = _pg.SQLITE  # or a postgresql:// server url
    processes: int = 1
    spread: str = "message"
    pool_size: int | None = None


@asynccontextmanager
async def store_url(setup: Setup, workdir: Path, name: str) -> AsyncIterator[Path | str]:
    """A fresh SQLite file in ``workdir``, or a url on a fresh PostgreSQL schema."""
    if setup.store == _pg.SQLITE:
        yield workdir / name
    else:
        async with _pg.fresh_schema(setup.store) as url:
            yield url


async def run_e2e(
    messages: list[Message],
    concurrency: int,
    workdir: Path,
    rate: float | None = None,
    setup: Setup | None = None,
) -> E2E:
    """Post every message (as fast as possible, or ``rate`` a second), wait for every reply."""
    setup = setup or Setup()
    replies = Replies(len(messages))
    runner = web.AppRunner(fake_platforms(replies), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    pg: _pg.PgCpu | None = None
    try:
        async with (
            store_url(setup, workdir, "gateway.db") as store,
            gateways(workdir, fake_url, store, setup.processes, setup.pool_size) as running,
        ):
            if isinstance(store, str):
                pg = await _pg.PgCpu.connect(setup.store, _pg.schema_of(store))
            pids = [g.pid for g in running]
            pg_before = await pg.sample() if pg else None
            cpu_before = _pg.cpu_seconds(pids)
            urls = [g.url for g in running]
            posting = _post_all(urls, messages, concurrency, rate, setup.spread)
            posted, started, acked = await posting
            await asyncio.wait_for(replies.done.wait(), 600)
            gateway_cpu = _pg.cpu_seconds(pids) - cpu_before
            pg_after = await pg.sample() if pg else None
            await asyncio.sleep(GRACE)  # a reply sent twice may come a little later
    finally:
        if pg is not None:
            await pg.close()
        await runner.cleanup()
    last = max(times[0] for times in replies.arrived.values())
    latencies = [replies.arrived[m.tag][0] - posted[m.tag] for m in messages]
    duplicates = sum(len(t) - 1 for t in replies.arrived.values())
    result = E2E(last - started, acked - started, latencies, duplicates, gateway_cpu)
    if pg_before is not None and pg_after is not None:
        result.pg_cpu = _pg.pg_seconds(pg_before, pg_after)
        result.foreign_backends = len(pg_before.foreign | pg_after.foreign)
    result.problems = log_problems(workdir)
    return result


def target(message: Message, processes: int, spread: str) -> int:
    """Which gateway gets ``message``: its session's turn (message) or the session's own."""
    if spread == "session":
        return (message.session // 2) % processes
    return (message.session + message.n) % processes


async def _post_all(
    urls: str | list[str],
    messages: list[Message],
    concurrency: int,
    rate: float | None,
    spread: str = "message",
) -> tuple[dict[str, float], float, float]:
    """Closed loop, or open loop at ``rate`` (latency counted from each message's slot)."""
    urls = [urls] if isinstance(urls, str) else urls
    posted: dict[str, float] = {}
    queue: Iterator[tuple[int, Message]] = enumerate(messages)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def worker() -> None:
            for index, message in queue:
                path, body, headers = webhook(message)
                if rate is not None:
                    slot = started + index / rate
                    await asyncio.sleep(max(0.0, slot - time.perf_counter()))
                posted[message.tag] = slot if rate is not None else time.perf_counter()
                url = urls[target(message, len(urls), spread)]
                async with http.post(url + path, data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{path}: HTTP {response.status}")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return posted, started, time.perf_counter()


async def run_turns(messages: list[Message], workdir: Path, setup: Setup | None = None) -> float:
    """The baseline: the same turns through ``Runner`` alone, on a fresh store of the same
    kind (SQLite file or PostgreSQL schema); seconds for all of them."""
    setup = setup or Setup()
    registry = build_registry(AgentsConfig.model_validate(AGENTS))
    by_session: dict[int, list[Message]] = {}
    for message in messages:
        by_session.setdefault(message.session, []).append(message)
    bound = asyncio.Semaphore(MAX_TURNS)
    async with store_url(setup, workdir, "turns.db") as where:
        url = where if isinstance(where, str) else f"sqlite:///{where}"
        if setup.pool_size is None:
            store = await open_store(url)
        else:
            store = await open_store(url, pool_size=setup.pool_size)
        try:
            runner = Runner(store, registry)

            async def session(number: int, items: list[Message]) -> None:
                channel = "telegram" if number % 2 == 0 else "whatsapp"
                created = await store.create_session(channel, "bench", str(number), "echo")
                for message in items:
                    async with bound:
                        await runner.run_turn(created.session_id, UserInput(message.tag))

            started = time.perf_counter()
            await asyncio.gather(*(session(n, items) for n, items in by_session.items()))
            seconds = time.perf_counter() - started
        finally:
            await store.aclose()
    await registry.aclose()
    return seconds


def workload(count: int, sessions: int, channels: str) -> list[Message]:
    """Round-robin over sessions: each session's messages in order, sessions interleaved."""
    return [
        Message(i % sessions, i // sessions, _on_telegram(i % sessions, channels))
        for i in range(count)
    ]


def _on_telegram(session: int, channels: str) -> bool:
    return channels == "telegram" or (channels == "both" and session % 2 == 0)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@dataclass(frozen=True)
class Run:
    burst: E2E
    turns: float
    paced: E2E
    rate: float


def setup_of(args: argparse.Namespace) -> Setup:
    return Setup(args.store, args.processes, args.spread, args.pool_size)


async def one_run(args: argparse.Namespace, index: int, base: Path) -> Run:
    messages = workload(args.messages, args.sessions, args.channels)
    setup = setup_of(args)
    dirs = [base / f"{name}{index}" for name in ("e2e", "turns", "paced")]
    for directory in dirs:
        directory.mkdir()
    if index % 2:
        turns = await run_turns(messages, dirs[1], setup)
        burst = await run_e2e(messages, args.concurrency, dirs[0], None, setup)
    else:
        burst = await run_e2e(messages, args.concurrency, dirs[0], None, setup)
        turns = await run_turns(messages, dirs[1], setup)
    rate = args.paced_rate or args.paced_share * len(messages) / burst.seconds
    paced_messages = messages[: len(messages) // 3]
    paced = await run_e2e(paced_messages, args.concurrency, dirs[2], rate, setup)
    print(describe(index, args.messages, burst), flush=True)
    return Run(burst, turns, paced, rate)


def describe(index: int, count: int, burst: E2E) -> str:
    """One line per run, as it ends: rate, CPU, repeats and log lines."""
    text = f"run {index + 1}: {count / burst.seconds:,.0f} answered/s, CPU per 1,000: "
    text += f"gateways {burst.gateway_cpu * 1000 / count:.2f} s"
    if burst.pg_cpu:
        text += f" + PostgreSQL {burst.pg_cpu * 1000 / count:.2f} s"
    text += f"; sent twice {burst.duplicates}; log warnings/errors {len(burst.problems)}"
    if burst.foreign_backends:
        text += f"; {burst.foreign_backends} other PostgreSQL clients seen (not counted)"
    return text + "".join(f"\n  {line}" for line in burst.problems[:5])


def report(args: argparse.Namespace, runs: list[Run]) -> list[str]:
    n = args.messages
    e2e_rates = [n / r.burst.seconds for r in runs]
    turn_rates = [n / r.turns for r in runs]
    ratios = [r.turns / r.burst.seconds for r in runs]
    ack_rates = [n / r.burst.ack_seconds for r in runs]
    latencies = [x for r in runs for x in r.burst.latencies]
    paced = [x for r in runs for x in r.paced.latencies]
    rates = [r.rate for r in runs]
    duplicates = sum(r.burst.duplicates + r.paced.duplicates for r in runs)
    paced_at = (
        f"{args.paced_rate:g}/s" if args.paced_rate else f"{args.paced_share:.0%} of the e2e rate"
    )
    gateway_cpu = [r.burst.gateway_cpu * 1000 / n for r in runs]
    pg_cpu = [r.burst.pg_cpu * 1000 / n for r in runs]
    total_cpu = [g + p for g, p in zip(gateway_cpu, pg_cpu, strict=True)]
    problems = sum(len(r.burst.problems) + len(r.paced.problems) for r in runs)
    cpu = [
        f"| CPU s per 1,000 answered: gateways | {statistics.median(gateway_cpu):.2f} | "
        f"{_list(gateway_cpu, '.2f')} |",
    ]
    if args.store != _pg.SQLITE:
        cpu += [
            f"| CPU s per 1,000 answered: PostgreSQL | {statistics.median(pg_cpu):.2f} | "
            f"{_list(pg_cpu, '.2f')} |",
            f"| CPU s per 1,000 answered: together | {statistics.median(total_cpu):.2f} | "
            f"{_list(total_cpu, '.2f')} |",
        ]
    return [
        "| measure | median | runs |",
        "| --- | ---: | --- |",
        f"| e2e messages answered /s | {statistics.median(e2e_rates):,.0f} | {_list(e2e_rates)} |",
        f"| baseline turns /s (Runner alone) | {statistics.median(turn_rates):,.0f} | "
        f"{_list(turn_rates)} |",
        f"| e2e / baseline | {statistics.median(ratios):.2f} | {_list(ratios, '.2f')} |",
        f"| webhooks acked /s (while answering) | {statistics.median(ack_rates):,.0f} | "
        f"{_list(ack_rates)} |",
        f"| burst: latency POST -> reply p50 / p99 (ms) | "
        f"{percentile(latencies, 0.5) * 1000:,.0f} / {percentile(latencies, 0.99) * 1000:,.0f}"
        " | all runs (queueing: posts outrun answers) |",
        f"| paced at {paced_at}: latency p50 / p99 (ms) | "
        f"{percentile(paced, 0.5) * 1000:,.0f} / {percentile(paced, 0.99) * 1000:,.0f} | "
        f"at {_list(rates)} msgs/s |",
        *cpu,
        f"| replies sent twice | {duplicates} | all runs |",
        f"| gateway log lines at WARNING or above | {problems} | all runs |",
    ]


def _list(values: list[float], spec: str = ",.0f") -> str:
    return ", ".join(format(v, spec) for v in values)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=64, help="POSTs in flight")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--channels", choices=["both", "telegram", "whatsapp"], default="both")
    parser.add_argument(
        "--paced-share", type=float, default=0.5, help="open-loop rate, share of the e2e rate"
    )
    parser.add_argument(
        "--paced-rate",
        type=float,
        help="open-loop rate in messages per second instead (to compare builds at one rate)",
    )
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument(
        "--store",
        default=_pg.SQLITE,
        help="'sqlite' (default: a file per run) or a postgresql:// server url (a fresh "
        "bench_<random> schema per run, dropped after)",
    )
    parser.add_argument("--processes", type=int, default=1, help="gateways on the one store")
    parser.add_argument(
        "--spread",
        choices=["message", "session"],
        default="message",
        help="with several processes: a session's messages to each in turn, or each session "
        "to one process",
    )
    parser.add_argument("--pool-size", type=int, help="store.pool_size (default: the gateway's)")
    args = parser.parse_args(argv)
    try:
        _pg.store_kind(args.store)
    except ValueError as exc:
        parser.error(str(exc))
    if args.processes < 1:
        parser.error("--processes must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the figures."""
    args = parse_args(argv)
    if args.processes == 1:
        pin(CLIENT_CPU)
        cores = f"gateway on core {GATEWAY_CPU}, load and fake APIs on core {CLIENT_CPU}"
    else:
        cores = (
            f"gateway i on core i mod 2; load and fake APIs unpinned (sharing the cores); "
            f"messages spread by {args.spread}"
        )
    base = Path(tempfile.mkdtemp(prefix="bench-e2e-", dir=args.dir))
    print(*machine(), sep="\n")
    if args.store == _pg.SQLITE:
        where = "SQLite (a fresh file per run)"
    else:
        version = asyncio.run(_pg.server_version(args.store))
        where = f"PostgreSQL {version} (a fresh schema per run; not pinned)"
    print(f"store: {where}; {args.processes} gateway process(es)")
    print(f"load average at start: {_load()}")
    print(
        f"{args.messages:,} messages over {args.sessions} sessions (channels: "
        f"{args.channels}), {args.concurrency} POSTs in flight, {args.repeat} runs; {cores}\n"
    )
    try:
        runs = [asyncio.run(one_run(args, i, base)) for i in range(args.repeat)]
    except BaseException:
        print(f"failed; the gateway's config, database and log are kept in {base}")
        raise
    shutil.rmtree(base, ignore_errors=True)
    print(f"load average at end: {_load()}\n")
    print(*report(args, runs), sep="\n")


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
