"""``gateway serve`` whose stdout cannot be written (closed, or a full disk): its one line there,
the sandbox banner, is lost, and the server says so in one WARNING and serves on. The log is on
stderr; no traceback, no asyncio ERROR, and SIGTERM stops it with 0 (README, Command line)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import aiohttp
import pytest

from .gateway_proc import START_SECONDS, free_port
from .test_first_start import STRONG, demo

PROC_FDS = Path("/proc/self/fd").exists()  # where a process's descriptors can be read (Linux)
UNWRITABLE = [
    pytest.param(">&-", "Bad file descriptor", id="closed"),
    pytest.param(
        ">/dev/full",
        "No space left on device",
        id="full",
        marks=pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full"),
    ),
]


async def stderr_until(process: asyncio.subprocess.Process, text: str) -> str:
    """The process's stderr up to the first line holding ``text`` (an AssertionError if it
    exits first)."""
    assert process.stderr is not None
    seen = ""
    while True:
        line = (await process.stderr.readline()).decode()
        if not line:
            raise AssertionError(f"gateway exited before {text!r}:\n{seen}")
        seen += line
        if text in line:
            return seen


@pytest.mark.parametrize(("redirect", "reason"), UNWRITABLE)
async def test_a_banner_that_cannot_be_written_is_one_warning_and_the_server_serves_on(
    tmp_path: Path, http: aiohttp.ClientSession, redirect: str, reason: str
) -> None:
    gateway = demo(tmp_path, free_port(), GATEWAY_ADMIN_TOKEN=STRONG)
    serve = [*gateway.command, "serve", "--config", str(gateway.config_path)]
    process = await asyncio.create_subprocess_exec(
        *["sh", "-c", f'exec "$@" {redirect}', "sh", *serve],
        cwd=gateway.directory,
        env=gateway.environment(),
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        # The bot's getMe asks the sandbox once the server listens; a stop before its answer
        # would log that it failed.
        answered = "bot support: getMe answered"
        started = await asyncio.wait_for(stderr_until(process, answered), START_SECONDS)
        async with http.get(f"{gateway.url}/healthz") as response:
            assert response.status == 200
        if PROC_FDS:  # no file of the server's took descriptor 1
            assert os.readlink(f"/proc/{process.pid}/fd/1") == os.devnull
        process.send_signal(signal.SIGTERM)
        _, rest = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    err = started + rest.decode()
    assert process.returncode == 0, err
    assert "Traceback" not in err
    records = [json.loads(line) for line in err.splitlines()]
    assert [(r["level"], r["message"]) for r in records if r["level"] != "INFO"] == [
        ("WARNING", f"cannot write the sandbox banner on stdout: {reason}")
    ]
    assert records[-1]["message"] == "stopped"
