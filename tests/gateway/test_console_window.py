"""The console's window badge (static/window.js), run with node; skipped where node is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from webhook_bot_gateway.gateway import _console

WINDOW_JS = Path(_console.__file__).parent / "static" / "window.js"
NODE = shutil.which("node")
WROTE = 1_800_000_000


def states(*cases: tuple[dict[str, object], float]) -> list[object]:
    if NODE is None:
        pytest.skip("node is not installed: the console's window.js is not run")
    script = (
        f"import {{ windowState }} from {json.dumps(WINDOW_JS.as_uri())};"
        f"const cases = {json.dumps(cases)};"
        "console.log(JSON.stringify(cases.map(([s, now]) => windowState(s, now * 1000))));"
    )
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    result: list[object] = json.loads(done.stdout)
    return result


def test_console_shows_the_window_and_the_time_left_for_whatsapp_sessions_only() -> None:
    whatsapp = {"channel": "whatsapp", "metadata": {"last_user_message_at": WROTE}}
    assert states(
        (whatsapp, WROTE + 3600 + 90),
        (whatsapp, WROTE + 24 * 3600),
        ({"channel": "whatsapp", "metadata": {}}, WROTE),
        ({"channel": "telegram", "metadata": {"last_user_message_at": WROTE}}, WROTE),
    ) == [
        {"open": True, "text": "window open · 22 h 58 min left"},
        {"open": False, "text": "window closed: templates only"},
        {"open": False, "text": "window closed: templates only"},
        None,
    ]
