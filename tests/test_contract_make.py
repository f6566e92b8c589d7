"""CONTRACT.md: `make test` runs ruff, mypy and pytest; `.ci/run` calls `make test`, the
command the README shows. Read from `make -n` (what make would run), not from the Makefile's
text, so a renamed or dropped step fails here."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def dry_run(target: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(
        ["make", "-n", target], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.splitlines()


def test_make_test_runs_ruff_mypy_and_pytest() -> None:
    commands = dry_run("test")
    for step in (r"/ruff check \.$", r"/ruff format --check \.$", r"/mypy$", r"/pytest\b"):
        assert any(re.search(step, line) for line in commands), (step, commands)


def test_ci_runs_make_test_as_the_readme_shows() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = [line.strip() for line in ci.splitlines() if line.strip()]
    assert commands[-1] == "make test"
    assert "make test" in (ROOT / "README.md").read_text(encoding="utf-8")
