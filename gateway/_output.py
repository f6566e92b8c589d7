"""The CLI's output stream, whose write failures are told apart from every other OSError.

A command's stdout may be a pipe closed early (``gateway sessions list | head -1``) or a full
disk (``> /dev/full``). Those failures surface as ``OutputError`` so that ``main`` ends quietly
(a closed pipe) or with one ``error: cannot write the output: ...`` line, while an OSError of
anything else (a file the command works on) keeps its own handling.
"""

from __future__ import annotations

import io
import os
from typing import IO, TextIO, cast

BROKEN_PIPE_STATUS = 141  # 128 + SIGPIPE: what a shell tool killed by a closed pipe exits with


class OutputError(Exception):
    """Writing to ``stream`` failed; ``cause`` is the OSError it raised."""

    def __init__(self, stream: IO[str], cause: OSError) -> None:
        super().__init__(cause.strerror or str(cause))
        self.stream = stream
        self.cause = cause


class _GuardedOutput(io.TextIOBase):
    """Writes to ``target``; an OSError while writing or flushing becomes ``OutputError``."""

    def __init__(self, target: IO[str]) -> None:
        super().__init__()
        self._target = target

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        try:
            return self._target.write(text)
        except OSError as exc:
            raise OutputError(self._target, exc) from exc

    def close(self) -> None:
        """Nothing: the target is the caller's. (IOBase's close, also run when this object is
        collected, would flush it, and a failing flush there is an ``Exception ignored``.)"""

    def flush(self) -> None:
        try:
            self._target.flush()
        except OSError as exc:
            raise OutputError(self._target, exc) from exc


def guarded(target: IO[str]) -> TextIO:
    """``target`` seen through ``_GuardedOutput``."""
    return cast(TextIO, _GuardedOutput(target))


def is_broken_pipe(error: OutputError) -> bool:
    return isinstance(error.cause, BrokenPipeError)


def discard_rest(error: OutputError) -> None:
    """Point the failed stream's file descriptor at /dev/null: what it still buffers is dropped
    there, so the interpreter's own flush at exit cannot fail again (and print a traceback-like
    ``Exception ignored`` message). A stream without a descriptor (a StringIO) is left alone."""
    try:
        descriptor = error.stream.fileno()
    except (OSError, ValueError, AttributeError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, descriptor)
    finally:
        os.close(devnull)
