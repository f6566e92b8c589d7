"""`gateway serve` lifts its soft open-files limit, and warns when it cannot hold the model
requests the config allows: each turn on a model holds a socket."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from webhook_bot_gateway.gateway._open_files import too_few_open_files
from webhook_bot_gateway.gateway.config import Settings

PROBE = """
import resource
from webhook_bot_gateway.gateway._open_files import raise_open_files_limit
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


def settings_with(turns: int, **models: int) -> Settings:
    """Settings whose models have these pools (``max_connections``), and ``turns`` turns."""
    return Settings.model_validate(
        {
            "dispatcher": {"max_concurrent_turns": turns},
            "agents": {
                "models": {name: {"model": "m", "max_connections": n} for name, n in models.items()}
            },
        }
    )


@pytest.mark.parametrize(
    ("settings", "limit", "warned"),
    [
        (settings_with(2000, gpt=2000), 1024, True),  # Debian's default hard limit in a shell
        (settings_with(2000, gpt=2000), 2256, False),
        (settings_with(2000, gpt=100, mini=100), 1024, False),  # the pools bound the requests
        (settings_with(5000, gpt=2000, mini=2000), 4255, True),
        (settings_with(2000), 64, False),  # rules agents only: no model sockets
    ],
    ids=["defaults", "enough", "small-pools", "two-models", "no-models"],
)
def test_serve_warns_when_the_limit_cannot_hold_the_model_requests_allowed(
    settings: Settings, limit: int, warned: bool
) -> None:
    warning = too_few_open_files(settings, limit)
    assert (warning is not None) == warned
    if warning is not None:
        assert warning.startswith(f"the open-files limit ({limit}) is below the ")
        assert "dispatcher.max_concurrent_turns" in warning
