"""Turn cost against history length: ``python -m bench.history``.

One SQLite file on disk (WAL, synchronous=FULL, as served). Each run makes, for each code path,
a fresh session and one with ``--history`` turns (a user and an assistant message each, written
through the store in one transaction), then times ``--turns`` turns of each through
``Runner.run_turn`` with the offline demo agents of config.example.toml (the rules backend),
alternating between the two sessions turn by turn. The fresh session grows as it is measured.

- before: every turn loads the whole branch (``store.turn(id)``, ``recent_turns=None``: the
  code path of every turn until the runner passed a limit);
- after: the runner's ``store.turn(id, recent_turns=max_turns)``.

Prints the median time per turn of each session and their ratio (1,000-turn / fresh), per run
and the median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from webhook_bot_gateway.agents import AgentsConfig, Runner, UserInput, build_registry
from webhook_bot_gateway.store import NewMessage, SQLiteStore
from webhook_bot_gateway.store.sqlite._turn import TurnScope

from .store import machine

EXAMPLE = Path(__file__).resolve().parents[1] / "config.example.toml"
# What the demo agents are asked, in a loop: triage greets, hands off to billing, which looks
# an invoice up (a tool call), and goes back to triage on "menu".
ASKED = ("hello", "I have a question about my invoice", "what about inv-1002?", "menu")
FILLER = (
    ("hello", "Hello! I can help with bills, invoices, refunds and payments."),
    ("what about inv-1001?", "Invoice INV-1001: 49.00 EUR, paid on 2024-05-02."),
)


class BenchStore(SQLiteStore):
    """The real store; with ``whole_branch`` every turn loads the whole branch (before)."""

    whole_branch = False

    def turn(
        self, session_id: str, *, recent_turns: int | None = None, inbox_ids: Sequence[int] = ()
    ) -> TurnScope:
        limit = None if self.whole_branch else recent_turns
        return super().turn(session_id, recent_turns=limit, inbox_ids=inbox_ids)


@dataclass(frozen=True)
class Medians:
    """One code path's medians in one run, in seconds per turn."""

    fresh: float
    long: float

    @property
    def ratio(self) -> float:
        return self.long / self.fresh


@dataclass(frozen=True)
class Run:
    before: Medians
    after: Medians


def demo_config() -> AgentsConfig:
    raw = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    return AgentsConfig.model_validate(raw["agents"])


async def fill(store: SQLiteStore, session_id: str, turns: int) -> None:
    """``turns`` user + assistant pairs after the head, in one commit."""
    async with store.turn(session_id) as turn:
        for n in range(turns):
            asked, answer = FILLER[n % len(FILLER)]
            turn.append(NewMessage("user", asked))
            data = {"buttons": ["Billing", "Talk to a person"]}
            turn.append(NewMessage("assistant", answer, agent="triage", data=data))


async def timed_turn(runner: Runner, session_id: str, text: str) -> float:
    started = time.perf_counter()
    await runner.run_turn(session_id, UserInput(text))
    return time.perf_counter() - started


async def measure(
    store: BenchStore, runner: Runner, args: argparse.Namespace, name: str, starting: str
) -> Medians:
    """Median seconds per turn of a fresh and a long session, measured turn about."""
    fresh = (await store.create_session("web", "bench", f"{name}-fresh", starting)).session_id
    long = (await store.create_session("web", "bench", f"{name}-long", starting)).session_id
    await fill(store, long, args.history)
    times: dict[str, list[float]] = {fresh: [], long: []}
    for n in range(args.turns):
        text = ASKED[n % len(ASKED)]
        order = (fresh, long) if n % 2 == 0 else (long, fresh)
        for sid in order:
            times[sid].append(await timed_turn(runner, sid, text))
    return Medians(statistics.median(times[fresh]), statistics.median(times[long]))


async def one_run(args: argparse.Namespace, index: int, base: Path) -> Run:
    config = demo_config()
    registry = build_registry(config, environ={})
    try:
        async with BenchStore(base / f"history-{index}.db") as store:
            runner = Runner.from_config(store, registry, config)
            warm = await store.get_or_create_session("web", "bench", "warm", config.starting_agent)
            for text in ASKED * 5:
                await runner.run_turn(warm.session_id, UserInput(text))
            results: dict[str, Medians] = {}
            for name in ("before", "after") if index % 2 == 0 else ("after", "before"):
                store.whole_branch = name == "before"
                results[name] = await measure(store, runner, args, name, config.starting_agent)
            return Run(results["before"], results["after"])
    finally:
        await registry.aclose()


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def report(args: argparse.Namespace, runs: list[Run]) -> list[str]:
    lines = [
        *machine(),
        f"{args.turns} turns per session and path, {args.history}-turn history, max_turns = "
        f"{demo_config().max_turns}, {len(runs)} runs",
        "",
        f"| path | fresh session | {args.history}-turn session | ratio (runs) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name in ("before", "after"):
        paths: list[Medians] = [getattr(run, name) for run in runs]
        fresh = statistics.median(p.fresh for p in paths)
        long = statistics.median(p.long for p in paths)
        ratio = statistics.median(p.ratio for p in paths)
        each = ", ".join(f"{p.ratio:.2f}" for p in paths)
        lines.append(f"| {name} | {_ms(fresh)} | {_ms(long)} | {ratio:.2f}x ({each}) |")
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.history", description=__doc__)
    parser.add_argument("--history", type=int, default=1000, help="turns of the long session")
    parser.add_argument("--turns", type=int, default=200, help="turns timed per session")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        runs = []
        for index in range(args.repeat):
            run = asyncio.run(one_run(args, index, Path(work)))
            print(
                f"run {index + 1}: before {_ms(run.before.fresh)} / {_ms(run.before.long)}"
                f" ({run.before.ratio:.2f}x), after {_ms(run.after.fresh)} /"
                f" {_ms(run.after.long)} ({run.after.ratio:.2f}x)",
                flush=True,
            )
            runs.append(run)
    print("\n".join(report(args, runs)))


if __name__ == "__main__":
    main()
