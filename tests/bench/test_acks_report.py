"""bench/acks.py's table, from made-up results: the open loop alone, and a fixed offered rate."""

from __future__ import annotations

from typing import Any

from bench import acks


def opened(p99: float, duplicates: int = 0) -> dict[str, Any]:
    return {
        "p50_ms": p99 / 3,
        "p99_ms": p99,
        "rate_asked": 1100.0,
        "drain_s": 12.0,
        "sent": 11000,
        "acked": 11000,
        "missing": 0,
        "duplicates": duplicates,
        "unknown": 0,
    }


def args(*extra: str) -> Any:
    return acks.parse_args(["--repeat", "0", "--open-repeat", "2", *extra])


def test_the_open_loop_alone_reports_without_closed_loop_rows() -> None:
    """--repeat 0 ran no closed loop: its rows are left out instead of failing on no data."""
    results = [opened(90), opened(70)]
    lines = acks.report(args(), {"bare": [], "gateway": []}, [540.0, 560.0], results)
    text = "\n".join(lines)
    assert "closed loop" not in text
    assert "| open loop: ack p99 (ms) | **80.0** | 90.0, 70.0 | < 50 ms |" in lines
    assert "| open loop at 2x capacity for 10 s: rate/s | 1,100 |" in text
    assert "; yes | missing 0, 0, twice 0, 0" in text


def test_a_fixed_offered_rate_is_named_and_a_second_reply_is_reported() -> None:
    lines = acks.report(
        args("--open-rate", "1100"), {"bare": [], "gateway": []}, [540.0], [opened(90, 1)]
    )
    text = "\n".join(lines)
    assert "| open loop at 1,100/s for 10 s: rate/s |" in text
    assert "; NO |" in text
