"""The tables of a comparison, rendered from its results, and the generated part of
docs/benchmarks.md that holds them (only the text between the markers is ever rewritten)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

BEGIN = "<!-- bench.compare: generated, do not edit by hand -->"
END = "<!-- bench.compare: end of the generated part -->"
SIDE_ORDER = ("bare", "ptb", "chatflow", "gateway", "served")
LABELS = {
    "bare": "bare aiohttp handler (no dedup, nothing stored)",
    "ptb": "python-telegram-bot `run_webhook`, no-op handler (no dedup, nothing stored)",
    "chatflow": "chatflow-agent WhatsApp webhook, scripted engine (dedup and turn in SQLite)",
    "gateway": "this gateway, ack path (dedup + delivery committed, synchronous=FULL)",
    "served": "this gateway as served: the same acks while its demo agents answer",
}
PLATFORMS = {"telegram": "Telegram", "whatsapp": "WhatsApp"}
Run = dict[str, dict[str, Any]]
Points = list[list[dict[str, float]]]


def write_section(doc: Path, lines: Sequence[str]) -> None:
    """Put ``lines`` between the markers in ``doc`` (appended with them if absent)."""
    text = doc.read_text(encoding="utf-8")
    block = "\n".join([BEGIN, *lines, END])
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(text, encoding="utf-8")


def med(values: Iterable[float]) -> float:
    """The median, ignoring NaN (a point with no answer); NaN if nothing is left."""
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else float("nan")


def num(value: float, spec: str = ",.0f") -> str:
    return "–" if math.isnan(value) else format(value, spec)


def listed(values: Iterable[float], spec: str = ",.0f") -> str:
    return ", ".join(num(v, spec) for v in values)


# --- ingest ----------------------------------------------------------------------------------


def ingest_table(platform: str, per_run: Sequence[Run]) -> list[str]:
    """One row per side: closed-loop rate (runs), against bare, latencies, duplicates."""
    sides = sorted(per_run[0], key=SIDE_ORDER.index)
    target = med(run[sides[0]]["open_target"] for run in per_run)
    lines = [
        f"| {platform} | accepted /s (runs) | / bare | p50 / p99 ms, 64 connections "
        f"| p50 / p99 ms at {target:,.0f}/s | duplicates sent → let through to the handler |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for side in sides:
        mine = [run[side] for run in per_run]
        rates = [r["rate"] for r in mine]
        ratio = med(run[side]["rate"] / run["bare"]["rate"] for run in per_run)
        closed = _pair(mine, "closed_p50_ms", "closed_p99_ms")
        opened = _pair(mine, "open_p50_ms", "open_p99_ms")
        lines.append(
            f"| {LABELS[side]} | **{num(med(rates))}** ({listed(rates)}) | {ratio:.0%} "
            f"| {closed} | {opened} | {_duplicates(mine)} |"
        )
    return lines


def _pair(mine: Sequence[dict[str, Any]], first: str, second: str) -> str:
    return f"{num(med(r[first] for r in mine), '.1f')} / {num(med(r[second] for r in mine), '.1f')}"


def _duplicates(mine: Sequence[dict[str, Any]]) -> str:
    sent = sum(r["duplicates_sent"] for r in mine)
    through = [r["duplicates_through"] for r in mine]
    if any(t is None for t in through):
        return f"{sent:,} → all (no handler to count)"
    return f"{sent:,} → **{sum(through):,}**"


# --- stores ----------------------------------------------------------------------------------


def store_table(per_run: Sequence[Run], plan: dict[str, Any]) -> list[str]:
    """The same work on both stores: medians over the runs."""
    rows = [
        ("a deep session: turn 1, ms (median of turns 1–10)", _cell("deep_first_ms", ".2f")),
        (
            f"the same session: turn {plan['deep']:,}, ms (median of the last 10)",
            _cell("deep_last_ms", ".2f"),
        ),
        (f"the same: turn {plan['deep']:,} / turn 1 (runs)", _growth),
        (
            f"{plan['sessions']:,} sessions x {plan['turns']} turns: turns /s",
            _cell("wide_per_second"),
        ),
        ("the same: p99 turn, ms", _cell("wide_p99_ms", ".1f")),
        (
            f"dedup: {plan['claims']:,} check-and-claims (30% repeats), one key a call: /s",
            _cell("single_per_second"),
        ),
        ("the same: told new / distinct keys", _told_single),
        (
            f"dedup: {plan['batch_claims']:,} keys in calls of {plan['batch']}: keys /s",
            _cell("batch_keys_per_second"),
        ),
        (
            f"dedup: {plan['processes']} processes x the same {plan['race_keys']:,} keys at "
            "once: callers told new per distinct key",
            _race_mean,
        ),
        ("the same: keys told new more than once", _race_twice),
        ("the same: check-and-claims /s, all processes together", _race_rate),
    ]
    lines = [
        "| the same work | this gateway's `SQLiteStore` | chatflow `SQLiteSessionStore` |",
        "| --- | ---: | ---: |",
    ]
    for name, render in rows:
        lines.append(f"| {name} | {render(per_run, 'gateway')} | {render(per_run, 'chatflow')} |")
    return lines


Cell = Callable[[Sequence[Run], str], str]


def _cell(key: str, spec: str = ",.0f") -> Cell:
    def render(per_run: Sequence[Run], side: str) -> str:
        values = [run[side][key] for run in per_run if key in run[side]]
        return num(med(values), spec) if values else "no such call"

    return render


def _growth(per_run: Sequence[Run], side: str) -> str:
    ratios = [run[side]["deep_last_ms"] / run[side]["deep_first_ms"] for run in per_run]
    return f"{med(ratios):.2f}x ({listed(ratios, '.2f')})"


def _told_single(per_run: Sequence[Run], side: str) -> str:
    told = [run[side]["single_new"] for run in per_run]
    distinct = per_run[0][side]["unique"]
    same = all(t == distinct for t in told)
    return f"{med(told):,.0f} / {distinct:,}" + ("" if same else f" (runs {listed(told)})")


def _race(per_run: Sequence[Run], side: str, key: str) -> list[float]:
    return [float(run[side]["race"][key]) for run in per_run]


def _race_mean(per_run: Sequence[Run], side: str) -> str:
    means = [run[side]["race"]["told_new"] / run[side]["race"]["unique"] for run in per_run]
    return f"**{med(means):.2f}** ({listed(means, '.2f')})"


def _race_twice(per_run: Sequence[Run], side: str) -> str:
    twice = _race(per_run, side, "keys_told_new_twice_or_more")
    return f"{med(twice):,.0f} of {per_run[0][side]['race']['unique']:,}"


def _race_rate(per_run: Sequence[Run], side: str) -> str:
    calls, seconds = _race(per_run, side, "calls"), _race(per_run, side, "seconds")
    return num(med(c / s for c, s in zip(calls, seconds, strict=True)))


# --- scaling ---------------------------------------------------------------------------------


def points_table(key: str, title: str, sides: dict[str, Points]) -> list[str]:
    """Answered /s and latency per point, the two sides next to each other (medians)."""
    values = sorted({p[key] for runs in sides.values() for run in runs for p in run})
    lines = [
        f"| {title} | gateway answered /s | gateway p50 / p99 ms | chatflow answered /s "
        "| chatflow p50 / p99 ms | replies lost (gateway / chatflow) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for value in values:
        found = {side: _at(sides.get(side, []), key, value) for side in ("gateway", "chatflow")}
        cells = " | ".join(_point(points) for points in found.values())
        lost = " / ".join(_lost(points) for points in found.values())
        lines.append(f"| {value:,} | {cells} | {lost} |")
    return lines


def _at(runs: Points, key: str, value: float) -> list[dict[str, float]]:
    return [p for run in runs for p in run if p[key] == value]


def _point(points: list[dict[str, float]]) -> str:
    if not points:
        return "not run | –"
    rate = med(p["answered_per_second"] for p in points)
    p50, p99 = med(p["p50_ms"] for p in points), med(p["p99_ms"] for p in points)
    return f"{num(rate)} | {num(p50)} / {num(p99)}"


def _lost(points: list[dict[str, float]]) -> str:
    return f"{sum(int(p['lost']) for p in points):,}" if points else "–"


def memory_table(scaling: dict[str, Any]) -> list[str]:
    """Resident memory kept after users were answered, and with turns waiting on a model."""
    lines = ["| resident memory, MiB (medians) | gateway | chatflow |", "| --- | ---: | ---: |"]
    sessions = scaling["sessions"]
    counts = sorted({p["sessions"] for runs in sessions.values() for run in runs for p in run})
    for count in counts:
        cells = [_kept(sessions.get(side, []), count) for side in ("gateway", "chatflow")]
        lines.append(
            f"| kept once {count:,} more users were answered, idle | {' | '.join(cells)} |"
        )
    inflight = [scaling["inflight"].get(side, []) for side in ("gateway", "chatflow")]
    peaks = " / ".join(num(med(r["peak_in_flight"] for r in runs)) for runs in inflight)
    cells = [
        num(med(r["kib_per_1000_in_flight"] / 1024 for r in runs), ",.1f") for runs in inflight
    ]
    lines.append(
        f"| per 1,000 turns waiting on the model (at {peaks} in flight) | {' | '.join(cells)} |"
    )
    return lines


def _kept(runs: Points, count: int) -> str:
    found = _at(runs, "sessions", count)
    return num(med(p["rss_growth_kib"] / 1024 for p in found), ".1f") if found else "not run"


# --- the whole generated part ----------------------------------------------------------------


def section(results: dict[str, Any]) -> list[str]:
    """The generated part of docs/benchmarks.md: when, where, sizes, the tables."""
    lines = [
        f"Run of record: {results['when']}, `make bench` ({results['seconds'] / 60:.1f} min "
        f"of measuring); medians of {results['repeat']} runs (each run's values in brackets "
        "where it helps). Machine:",
        "",
        *(f"- {line}" for line in results["machine"]),
        "",
    ]
    if "ingest" in results:
        for platform, per_run in results["ingest"].items():
            title = PLATFORMS[platform]
            lines += [f"#### Ingest: {title}", "", *ingest_table(title, per_run), ""]
    if "stores" in results:
        plan = results["plans"]["stores"]
        lines += ["#### Session store and dedup", "", *store_table(results["stores"], plan), ""]
    if "scaling" in results:
        scaling = results["scaling"]
        lines += ["#### Users at once", "", *points_table("sessions", "users", scaling["sessions"])]
        lines += ["", "#### History", "", *points_table("history", "turns", scaling["history"])]
        lines += ["", "#### Memory", "", *memory_table(scaling), ""]
    return lines
