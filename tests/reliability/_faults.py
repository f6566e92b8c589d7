"""Store faults for the reliability tests: a size-limited tmpfs under the database (disk full,
read-only) and another process holding SQLite's write lock.

Every fault here is real: the kernel refuses the gateway's writes with ENOSPC, or SQLite's file
lock makes them wait out the busy timeout. Nothing in the gateway is patched.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

FILL_CHUNKS = (1 << 20, 1 << 16, 1 << 12, 1)  # bytes per write while filling, largest first

# Runs in another process: take the write lock, say so, hold it until stdin closes or says so.
LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
conn.close()
"""


class MountRefused(Exception):
    """``mount`` said no (not root, or no permission in this container)."""


class Tmpfs:
    """A tmpfs of ``size`` bytes mounted at ``path`` for the length of a test."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size
        self.filler = path / "filler"
        self.mounted = False

    def mount(self) -> None:
        """Mount it; MountRefused when this process may not."""
        self.path.mkdir(parents=True, exist_ok=True)
        result = _mount("-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", str(self.path))
        if result.returncode != 0:
            raise MountRefused(result.stderr.strip() or f"mount exited {result.returncode}")
        self.mounted = True

    def unmount(self) -> None:
        """Remove the mount (lazily if a killed process's files are still being closed)."""
        if not self.mounted:
            return
        self.remount("rw")  # in case a test left it read-only; the unmount decides
        result = subprocess.run(["umount", str(self.path)], capture_output=True, text=True)
        if result.returncode != 0:
            subprocess.run(["umount", "-l", str(self.path)], check=True)
        self.mounted = False

    def fill(self) -> int:
        """Take every free byte with a filler file; return how many bytes it took."""
        with self.filler.open("ab") as out:
            for chunk in FILL_CHUNKS:
                _write_until_full(out.fileno(), chunk)
        return self.filler.stat().st_size

    def free(self) -> None:
        """Delete the filler: the disk has room again."""
        self.filler.unlink(missing_ok=True)

    def remount(self, mode: str) -> subprocess.CompletedProcess[str]:
        """``mount -o remount,<mode>``; the caller reads the outcome."""
        return _mount("-o", f"remount,{mode}", str(self.path))


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    except FileNotFoundError as exc:
        raise MountRefused("no mount command") from exc


def _write_until_full(fd: int, chunk: int) -> None:
    block = b"\0" * chunk
    while True:
        try:
            os.write(fd, block)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            return


class WriteLock:
    """Another process that holds ``db``'s write lock (BEGIN IMMEDIATE) from ``take`` until
    ``release``, as the ``gateway sessions`` CLI or a backup tool could."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self._holder: asyncio.subprocess.Process | None = None

    async def take(self) -> None:
        """Return once the other process holds the lock."""
        self._holder = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            LOCK_HOLDER,
            str(self.db),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self._holder.stdout is not None
        line = await asyncio.wait_for(self._holder.stdout.readline(), 30)
        assert line == b"locked\n", f"the lock holder said {line!r}"

    async def release(self) -> None:
        """Let go of the lock (and end the process); nothing happens the second time."""
        holder, self._holder = self._holder, None
        if holder is None:
            return
        assert holder.stdin is not None
        if holder.returncode is None:  # (it may have failed to take the lock)
            holder.stdin.close()  # its readline returns: it rolls back and exits
        if await asyncio.wait_for(holder.wait(), 30) != 0:
            raise AssertionError(f"the lock holder exited with {holder.returncode}")


@asynccontextmanager
async def write_lock(db: Path) -> AsyncIterator[WriteLock]:
    """A held ``WriteLock`` on ``db``, released at the end of the block at the latest."""
    lock = WriteLock(db)
    try:
        await lock.take()
        yield lock
    finally:
        await lock.release()
