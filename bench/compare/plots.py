"""The comparison's pictures (matplotlib, from the ``bench`` extra), as PNGs the README shows."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from bench.compare.report import med

COLORS = {
    "bare": "#9e9e9e",
    "ptb": "#1f77b4",
    "chatflow": "#ff7f0e",
    "gateway": "#2ca02c",
    "served": "#98df8a",
}
NAMES = {
    "bare": "bare aiohttp",
    "ptb": "python-telegram-bot",
    "chatflow": "chatflow-agent",
    "gateway": "this gateway",
    "served": "this gateway as served (answering too)",
}
INGEST_NAMES = {**NAMES, "gateway": "this gateway (ack path)"}
ORDER = ["bare", "ptb", "chatflow", "gateway", "served"]


def _save(figure: Any, path: Path, caption: str) -> None:
    figure.text(0.01, 0.005, caption, fontsize=7, color="#555555")
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _plain(axes: Axes) -> None:
    """Log axes labelled 1, 10, 100, 1,000 rather than powers of ten (y also at 2 and 5)."""
    plain = FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 1 else f"{value:g}")
    for axis, subs in ((axes.yaxis, (1.0, 2.0, 5.0)), (axes.xaxis, (1.0,))):
        if axis.get_scale() == "log":
            axis.set_major_locator(LogLocator(subs=subs))
            axis.set_major_formatter(plain)
            axis.set_minor_formatter(NullFormatter())


def _bars(
    axes: Axes, groups: dict[str, dict[str, float]], unit: str, names: dict[str, str] = NAMES
) -> None:
    """Grouped bars on a log scale: one group per key of ``groups``, one bar per side."""
    width = 0.8 / max(len(sides) for sides in groups.values())
    labelled = set()
    for g, sides in enumerate(groups.values()):
        present = [s for s in ORDER if s in sides]
        for i, side in enumerate(present):
            x = g + (i - (len(present) - 1) / 2) * width
            value = sides[side]
            label = None if side in labelled else names[side]
            labelled.add(side)
            axes.bar(x, value, width * 0.9, color=COLORS[side], label=label)
            axes.annotate(_short(value), (x, value), ha="center", va="bottom", fontsize=7)
    axes.set_xticks(range(len(groups)), list(groups))
    axes.set_ylabel(unit)
    axes.set_yscale("log")
    top = max(v for sides in groups.values() for v in sides.values())
    axes.set_ylim(top=top * 8)  # room for the labels and the legend
    _plain(axes)
    axes.legend(fontsize=7, loc="upper right", ncol=2)


def _short(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def ingest(results: dict[str, Any], path: Path, caption: str) -> None:
    """Accepted per second, and p99 ack latency at one rate for all, per platform."""
    rates: dict[str, dict[str, float]] = {}
    latency: dict[str, dict[str, float]] = {}
    for platform, per_run in results["ingest"].items():
        sides = list(per_run[0])
        rates[platform] = {s: med([run[s]["rate"] for run in per_run]) for s in sides}
        target = med([run[sides[0]]["open_target"] for run in per_run])
        label = f"{platform} at {target:,.0f}/s"
        latency[label] = {s: med([run[s]["open_p99_ms"] for run in per_run]) for s in sides}
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    _bars(left, rates, "accepted updates /s (log)", INGEST_NAMES)
    left.set_title("Ingest: most accepted per second (64 connections)")
    _bars(right, latency, "p99 ack latency, ms (log)", INGEST_NAMES)
    right.set_title("Ack latency p99 at half the slowest side's rate")
    _save(figure, path, caption)


def store(results: dict[str, Any], path: Path, caption: str) -> None:
    """Turn cost along a long session, and the rates of the same store work."""
    per_run = results["stores"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for side in ("gateway", "chatflow"):
        curves = [run[side]["deep_curve_ms"] for run in per_run]
        block = per_run[0][side]["deep_block"]
        points = [med(values) for values in zip(*curves, strict=True)]
        turns = [block * (i + 1) for i in range(len(points))]
        left.plot(turns, points, marker="o", color=COLORS[side], label=NAMES[side])
    left.set_xlabel("turn of one session")
    left.set_ylabel("ms per turn (median of each block)")
    left.set_ylim(bottom=0)
    left.set_title("Turn cost as one session grows", fontsize=10)
    left.annotate(
        "chatflow deletes all but the last 40 turns;\nthe gateway keeps them and loads the last 40",
        (0.02, 0.03),
        xycoords="axes fraction",
        fontsize=7,
    )
    left.legend(fontsize=7)
    groups = {
        "turns /s\n(many sessions)": _sides(per_run, "wide_per_second"),
        "dedup /s\n(1 key per call)": _sides(per_run, "single_per_second"),
        "dedup keys /s\n(64 per call)": _sides(per_run, "batch_keys_per_second"),
    }
    _bars(right, groups, "per second (log)")
    right.set_title("Store work per second")
    _save(figure, path, caption)


def _sides(per_run: Sequence[dict[str, dict[str, Any]]], key: str) -> dict[str, float]:
    return {
        side: med([run[side][key] for run in per_run])
        for side in ("gateway", "chatflow")
        if key in per_run[0][side]
    }


def curves(results: dict[str, Any], key: str, xlabel: str, path: Path, caption: str) -> None:
    """Answered per second and p99 latency against ``key`` (sessions or history)."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for side, per_run in results["scaling"][key].items():
        xs = [p[key] for p in per_run[0]]
        rate = [med([run[i]["answered_per_second"] for run in per_run]) for i in range(len(xs))]
        p99 = [med([run[i]["p99_ms"] for run in per_run]) for i in range(len(xs))]
        left.plot(xs, rate, marker="o", color=COLORS[side], label=NAMES[side])
        right.plot(xs, p99, marker="o", color=COLORS[side], label=NAMES[side])
    for axes, ylabel in ((left, "answered /s"), (right, "p99 post -> reply, ms")):
        axes.set_xscale("log")
        axes.set_yscale("log")
        _plain(axes)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.legend(fontsize=7)
    left.set_title(f"Answered per second against {xlabel}")
    right.set_title(f"p99 latency against {xlabel}")
    _save(figure, path, caption)


def memory(results: dict[str, Any], path: Path, caption: str) -> None:
    """Resident memory kept after users were answered; per 1,000 turns waiting on a model."""
    scaling = results["scaling"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for side, per_run in scaling["sessions"].items():
        xs = [p["sessions"] for p in per_run[0]]
        kept = [med(run[i]["rss_growth_kib"] / 1024 for run in per_run) for i in range(len(xs))]
        left.plot(xs, kept, marker="o", color=COLORS[side], label=NAMES[side])
    left.set_xscale("log")
    left.set_yscale("log")
    _plain(left)
    left.set_xlabel("users answered (then idle)")
    left.set_ylabel("resident memory kept, MiB (log)")
    left.set_title("Memory kept after a burst of users")
    left.legend(fontsize=7)
    per_1000 = {
        side: med(run["kib_per_1000_in_flight"] / 1024 for run in runs)
        for side, runs in scaling["inflight"].items()
    }
    _bars(right, {"per 1,000 turns waiting on a model": per_1000}, "MiB (log)")
    right.set_title("Memory of turns in flight")
    _save(figure, path, caption)


def draw_all(results: dict[str, Any], directory: Path, caption: str) -> list[Path]:
    """Every picture of the results present; the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    if "ingest" in results:
        written.append(directory / "ingest.png")
        ingest(results, written[-1], caption)
    if "stores" in results:
        written.append(directory / "store.png")
        store(results, written[-1], caption)
    if "scaling" in results:
        written.append(directory / "scaling-sessions.png")
        curves(results, "sessions", "users at once", written[-1], caption)
        written.append(directory / "scaling-history.png")
        curves(results, "history", "turns of history", written[-1], caption)
        written.append(directory / "memory.png")
        memory(results, written[-1], caption)
    return written
