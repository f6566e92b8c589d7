"""`gateway serve` lifts its soft open-files limit: each turn on a model holds a socket."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = """
import resource
from webhook_bot_gateway.gateway.app import raise_open_files_limit
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
before, after = raise_open_files_limit()
print(before, after, resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard)
"""


def test_serve_lifts_the_soft_open_files_limit_to_the_hard_one() -> None:
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=repo, check=True
    )
    before, after, now, hard = (int(value) for value in result.stdout.split())
    assert before == 256
    assert after == now > 256
    assert now == hard or hard < 0  # RLIM_INFINITY (-1): lifted to a finite 65,536 or more
