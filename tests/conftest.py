"""Test-wide settings."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests import offline

offline.install()  # CONTRACT.md: tests never reach the internet

# CI (and anyone who sets CI) replays the same examples every run, so a red run is never luck;
# a developer's plain `make test` keeps exploring new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _restore_logger_levels() -> Iterator[None]:
    """The CLI, run in-process by some tests, quiets loggers for the whole process (as a CLI
    should); give every other test the levels it would have had."""
    names = ("httpx", "aiosqlite", "aiohttp.access")
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
