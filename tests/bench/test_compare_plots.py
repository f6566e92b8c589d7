"""The pictures, from made-up results (needs matplotlib: the bench extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from bench.compare import plots


def ingest_side(rate: float) -> dict[str, Any]:
    return {"rate": rate, "open_target": 100.0, "open_p99_ms": 5.0}


def store_side(batch: bool) -> dict[str, Any]:
    figures = {
        "deep_curve_ms": [1.0, 1.2, 1.1],
        "deep_block": 10,
        "wide_per_second": 800.0,
        "single_per_second": 3000.0,
    }
    return figures | ({"batch_keys_per_second": 90_000.0} if batch else {})


def point(key: str, value: int) -> dict[str, float]:
    return {key: value, "answered_per_second": 300.0, "p99_ms": 40.0, "rss_growth_kib": 900.0}


def test_draw_all_writes_one_png_per_picture(tmp_path: Path) -> None:
    sessions = [[point("sessions", 10), point("sessions", 100)]] * 3
    history = [[point("history", 10), point("history", 1000)]] * 3
    inflight = [{"kib_per_1000_in_flight": 34_000.0}] * 3
    results = {
        "ingest": {"telegram": [{"bare": ingest_side(9000), "gateway": ingest_side(5000)}] * 3},
        "stores": [{"gateway": store_side(True), "chatflow": store_side(False)}] * 3,
        "scaling": {
            "sessions": {"gateway": sessions, "chatflow": sessions},
            "history": {"gateway": history},
            "inflight": {"gateway": inflight, "chatflow": inflight},
        },
    }

    written = plots.draw_all(results, tmp_path / "pictures", "test")

    names = ["ingest", "store", "scaling-sessions", "scaling-history", "memory"]
    assert [path.name for path in written] == [f"{name}.png" for name in names]
    for path in written:
        assert path.read_bytes().startswith(b"\x89PNG")
