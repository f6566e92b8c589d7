"""The CLI's output stream, whose write failures are told apart from every other OSError.

A command's stdout may be a pipe closed early (``gateway sessions list | head -1``) or a full
disk (``> /dev/full``). Those failures surface as ``OutputError`` so that ``main`` ends quietly
(a closed pipe) or with one ``error: cannot write the output: ...`` line, while an OSError of
anything else (a file the command works on) keeps its own handling. A stdout closed before
the start (``gateway sessions list >&-``), which Python gives as ``sys.stdout`` None, fails as
a write on descriptor 1 would: ``Bad file descriptor``.
"""

from __future__ import annotations

import errno
import io
import os
from typing import IO, TextIO, cast

BROKEN_PIPE_STATUS = 141  # 128 + SIGPIPE: what a shell tool killed by a closed pipe exits with


class OutputError(Exception):
    """Writing to ``stream`` (None: a closed stdout) failed; ``cause`` is the OSError."""

    def __init__(self, stream: IO[str] | None, cause: OSError) -> None:
        super().__init__(cause.strerror or str(cause))
        self.stream = stream
        self.cause = cause


def closed_stream_error() -> OSError:
    return OSError(errno.EBADF, os.strerror(errno.EBADF))


class _GuardedOutput(io.TextIOBase):
    """Writes to ``target``; an OSError while writing or flushing becomes ``OutputError``, and
    so does any write to a closed stdout (``target`` None)."""

    def __init__(self, target: IO[str] | None) -> None:
        super().__init__()
        self._target = target

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self._target is None:
            raise OutputError(None, closed_stream_error())
        try:
            target = self._target
            if not (isinstance(target, io.TextIOWrapper) and _is_raw(target)):
                return target.write(text)
            target.flush()
            write_all(target.buffer, text.encode(target.encoding, target.errors or "strict"))
            return len(text)
        except OSError as exc:
            raise OutputError(self._target, exc) from exc

    def close(self) -> None:
        """Nothing: the target is the caller's. (IOBase's close, also run when this object is
        collected, would flush it, and a failing flush there is an ``Exception ignored``.)"""

    def flush(self) -> None:
        if self._target is None:
            return  # every write failed: nothing is held
        try:
            self._target.flush()
        except OSError as exc:
            raise OutputError(self._target, exc) from exc


def _is_raw(target: io.TextIOWrapper) -> bool:
    """A text stream with no buffer under it (``PYTHONUNBUFFERED``, ``python -u``). Its
    ``TextIOWrapper`` makes one write(2) per text and ignores a short count: a pipe closed in
    the middle of a large text makes write(2) return what it wrote so far, the rest is
    dropped, and no error ever comes. Such a stream is written with ``write_all``."""
    return isinstance(target.buffer, io.RawIOBase)


def write_all(raw: IO[bytes], data: bytes) -> None:
    """Write every byte, retrying after a short write (the retry raises what stopped it)."""
    view = memoryview(data)
    while view:
        written = raw.write(view)
        if not written:  # None (would block) or 0: no progress, never loop on it
            raise OSError(errno.EIO, "the output took no bytes")
        view = view[written:]


def guarded(target: IO[str] | None) -> TextIO:
    """``target`` seen through ``_GuardedOutput``."""
    return cast(TextIO, _GuardedOutput(target))


def is_broken_pipe(error: OutputError) -> bool:
    return isinstance(error.cause, BrokenPipeError)


def discard_rest(error: OutputError) -> None:
    """Point the failed stream's file descriptor at /dev/null: what it still buffers is dropped
    there, so the interpreter's own flush at exit cannot fail again (and print a traceback-like
    ``Exception ignored`` message). A stream without a descriptor (a StringIO, a closed stdout)
    is left alone."""
    if error.stream is None:
        return
    try:
        descriptor = error.stream.fileno()
    except (OSError, ValueError, AttributeError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, descriptor)
    finally:
        os.close(devnull)


def reserve_standard_descriptors() -> None:
    """Open /dev/null on each of descriptors 0, 1 and 2 that was closed at the start
    (``gateway serve >&-``); ``sys.stdout`` stays None, so the output still fails as closed.
    Otherwise the next file opened takes the lowest free number, the listening socket or the
    store's database, and whatever writes on descriptor 1 (a tool's subprocess inherits it)
    writes into that file."""
    while True:
        descriptor = os.open(os.devnull, os.O_RDWR)
        if descriptor > 2:
            os.close(descriptor)
            return
