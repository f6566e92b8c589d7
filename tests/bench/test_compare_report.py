"""The tables and the generated part of docs/benchmarks.md, from made-up results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.compare import report


def test_write_section_appends_its_part_once_then_rewrites_only_that(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nkept before\n", encoding="utf-8")
    report.write_section(doc, ["first figures"])
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n\nkept before\n")
    doc.write_text(text + "\nkept after\n", encoding="utf-8")

    report.write_section(doc, ["second figures", "| a | b |"])
    report.write_section(doc, ["second figures", "| a | b |"])  # idempotent

    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n\nkept before\n")
    assert text.endswith("\nkept after\n")
    assert "first figures" not in text
    assert text.count(report.BEGIN) == text.count(report.END) == 1
    inside = text.split(report.BEGIN)[1].split(report.END)[0]
    assert inside == "\nsecond figures\n| a | b |\n"


def side(rate: float, through: int | None, p99: float = 5.0) -> dict[str, Any]:
    return {
        "rate": rate,
        "closed_p50_ms": 2.0,
        "closed_p99_ms": 9.0,
        "open_target": 500.0,
        "open_rate": 500.0,
        "open_p50_ms": 1.0,
        "open_p99_ms": p99,
        "statuses": [{"200": 10}, {"200": 10}],
        "duplicates_sent": 30,
        "handled": None if through is None else 100,
        "duplicates_through": through,
    }


def test_ingest_table_gives_medians_ratios_to_bare_and_duplicates() -> None:
    runs = [
        {"bare": side(10_000, None), "ptb": side(2_000, 30), "gateway": side(5_000, 0)},
        {"bare": side(12_000, None), "ptb": side(3_000, 30), "gateway": side(6_000, 0)},
        {"bare": side(11_000, None), "ptb": side(2_500, 30), "gateway": side(4_000, 0)},
    ]
    lines = report.ingest_table("telegram", runs)
    assert "at 500/s" in lines[0]
    bare, ptb, gateway = lines[2:]
    assert "**11,000** (10,000, 12,000, 11,000) | 100%" in bare
    assert "90 → all" in bare
    assert "**2,500** (2,000, 3,000, 2,500) | 23%" in ptb
    assert "90 → **90**" in ptb
    assert "**5,000**" in gateway
    assert "| 50% |" in gateway
    assert "90 → **0**" in gateway


def test_points_table_marks_points_a_side_did_not_run() -> None:
    gateway = [
        [
            {
                "sessions": 10,
                "answered_per_second": 300.0,
                "p50_ms": 20.0,
                "p99_ms": 40.0,
                "lost": 0,
            },
            {
                "sessions": 100,
                "answered_per_second": 400.0,
                "p50_ms": 200.0,
                "p99_ms": 300.0,
                "lost": 0,
            },
        ]
    ] * 3
    chatflow = [
        [
            {
                "sessions": 10,
                "answered_per_second": 12.0,
                "p50_ms": 800.0,
                "p99_ms": float("nan"),
                "lost": 2,
            }
        ]
    ] * 3
    lines = report.points_table("sessions", "users", {"gateway": gateway, "chatflow": chatflow})
    assert lines[2] == "| 10 | 300 | 20 / 40 | 12 | 800 / – | 0 / 6 |"
    assert lines[3] == "| 100 | 400 | 200 / 300 | not run | – | 0 / – |"
