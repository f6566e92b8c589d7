"""The command's output cannot be written: a pipe closed early ends quietly with 141, any other
failure (a full disk, a stdout closed from the start) is one ``error: cannot write the output:
...`` line and exit 1; never a traceback, buffered (a pipe's default) or not (PYTHONUNBUFFERED)."""

from __future__ import annotations

import asyncio
import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from webhook_bot_gateway.gateway.cli import main
from webhook_bot_gateway.store import SQLiteStore

from .test_cli import config_with_store

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config.example.toml"
CHECK = ["check-config", "--config", str(EXAMPLE)]
BUFFERING = pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])


def environment(unbuffered: bool) -> dict[str, str]:
    environ = {
        k: v for k, v in os.environ.items() if k not in ("GATEWAY_CONFIG", "PYTHONUNBUFFERED")
    }
    if unbuffered:
        environ["PYTHONUNBUFFERED"] = "1"
    return environ


GATEWAY = [sys.executable, "-m", "webhook_bot_gateway"]


def run_command(
    command: list[str], unbuffered: bool, stdout: int | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(unbuffered),
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def run_to(stdout: int, args: list[str], unbuffered: bool) -> subprocess.CompletedProcess[str]:
    return run_command([*GATEWAY, *args], unbuffered, stdout)


def run_into_closed_pipe(args: list[str], unbuffered: bool) -> subprocess.CompletedProcess[str]:
    reader, writer = os.pipe()
    os.close(reader)  # as `| head -1` once it has its line
    try:
        return run_to(writer, args, unbuffered)
    finally:
        os.close(writer)


@BUFFERING
@pytest.mark.parametrize("args", [CHECK, ["--help"], ["sessions", "list", "--help"]])
def test_a_closed_pipe_ends_quietly_with_141(args: list[str], unbuffered: bool) -> None:
    result = run_into_closed_pipe(args, unbuffered)
    assert (result.returncode, result.stderr) == (141, "")


@BUFFERING
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_a_full_disk_is_one_error_line_and_exit_1(unbuffered: bool) -> None:
    with open("/dev/full", "w") as full:
        result = run_to(full.fileno(), CHECK, unbuffered)
    assert result.returncode == 1
    assert result.stderr == "error: cannot write the output: No space left on device\n"


class FailingStream(io.StringIO):
    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error

    def write(self, text: str) -> int:
        raise self.error


def test_a_write_failure_in_process_names_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    out = FailingStream(OSError(errno.EIO, "Input/output error"))
    assert main(CHECK, out=out) == 1
    assert capsys.readouterr().err == "error: cannot write the output: Input/output error\n"


def test_a_broken_pipe_in_process_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(CHECK, out=FailingStream(BrokenPipeError(errno.EPIPE, "Broken pipe"))) == 141
    assert capsys.readouterr().err == ""


def run_with_stdout_closed(
    args: list[str], unbuffered: bool = False
) -> subprocess.CompletedProcess[str]:
    """``gateway ARGS >&-``: Python then starts with ``sys.stdout`` None."""
    return run_command(["sh", "-c", 'exec "$@" >&-', "sh", *GATEWAY, *args], unbuffered)


CLOSED = "error: cannot write the output: Bad file descriptor\n"


@BUFFERING
@pytest.mark.parametrize("args", [CHECK, ["--help"], ["sessions", "list", "--help"]])
def test_a_closed_stdout_is_one_error_line_and_exit_1(args: list[str], unbuffered: bool) -> None:
    result = run_with_stdout_closed(args, unbuffered)
    assert (result.returncode, result.stderr) == (1, CLOSED)


async def seed_session(db: Path) -> str:
    from webhook_bot_gateway.store import open_store

    store = await open_store(f"sqlite:///{db}")
    try:
        session = await store.create_session("telegram", "support", "42", "triage")
    finally:
        await store.aclose()
    return session.session_id


def test_sessions_list_with_stdout_closed_is_one_error_line(tmp_path: Path) -> None:
    config = config_with_store(tmp_path)
    asyncio.run(seed_session(tmp_path / "gw.db"))
    result = run_with_stdout_closed(["sessions", "list", "--config", str(config)])
    assert (result.returncode, result.stderr) == (1, CLOSED)


def test_a_session_deleted_with_stdout_closed_stays_deleted(tmp_path: Path) -> None:
    """The delete is done before its line fails to print: exit 1 says the output was lost."""
    config = config_with_store(tmp_path)
    session_id = asyncio.run(seed_session(tmp_path / "gw.db"))
    result = run_with_stdout_closed(["sessions", "delete", session_id, "--config", str(config)])
    assert (result.returncode, result.stderr) == (1, CLOSED)
    assert main(["sessions", "show", session_id, "--config", str(config)], out=io.StringIO()) == 1


async def seed_large_session(db: Path) -> str:
    """A session whose export is about 1 MB: far more than a pipe holds (64 KiB)."""
    session_id = await seed_session(db)
    async with SQLiteStore(db) as store:
        await store.append_message(session_id, "user", "x" * 1_000_000)
    return session_id


@BUFFERING
def test_a_pipe_closed_in_the_middle_of_a_large_write_ends_with_141(
    tmp_path: Path, unbuffered: bool
) -> None:
    """``gateway sessions export ID | head -c 10``: the reader goes while one write(2) of the
    document is under way, which then returns short, not an error."""
    config = config_with_store(tmp_path)
    session_id = asyncio.run(seed_large_session(tmp_path / "gw.db"))
    command = [*GATEWAY, "sessions", "export", session_id, "--config", str(config)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment(unbuffered),
        cwd=ROOT,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    assert len(process.stdout.read(10)) == 10  # the document's write(2) has begun, and waits
    process.stdout.close()  # as `head -c 10` once it has its bytes
    try:
        assert process.wait(timeout=60) == 141
        assert process.stderr.read() == b""
    finally:
        process.kill()
        process.stderr.close()
