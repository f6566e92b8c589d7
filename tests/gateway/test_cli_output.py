"""The command's output cannot be written: a pipe closed early ends quietly with 141, any other
failure (a full disk) is one ``error: cannot write the output: ...`` line and exit 1; never a
traceback, buffered (a pipe's default) or not (PYTHONUNBUFFERED)."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from webhook_bot_gateway.gateway.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config.example.toml"
CHECK = ["check-config", "--config", str(EXAMPLE)]
BUFFERING = pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])


def run_to(stdout: int, args: list[str], unbuffered: bool) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v for k, v in os.environ.items() if k not in ("GATEWAY_CONFIG", "PYTHONUNBUFFERED")
    }
    if unbuffered:
        environ["PYTHONUNBUFFERED"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "webhook_bot_gateway", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


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
