"""Test-wide settings."""

from __future__ import annotations

import os

from hypothesis import settings

# CI (and anyone who sets CI) replays the same examples every run, so a red run is never luck;
# a developer's plain `make test` keeps exploring new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
