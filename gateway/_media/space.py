"""The free-space floor of the media root (``media.min_free_bytes``).

Uploads and platform downloads share the media root's disk with the SQLite store (usually) and
every other session's files: a full disk breaks them all. So a file is refused, or its download
held back, when writing it would leave less than the floor free. A WARNING says so at most once
per ``WARN_EVERY`` seconds, however many requests are refused meanwhile.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("gateway.media")

WARN_EVERY = 300.0  # seconds between two warnings of the same floor


def free_bytes(root: Path) -> int:
    """Bytes free to this process on the disk of ``root`` (or of its nearest existing parent:
    the root is made by the first file)."""
    path = root.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


class DiskFloor:
    """Answers whether ``size`` more bytes fit above the floor; warns, rate-limited, when not."""

    def __init__(
        self,
        root: Path,
        min_free: int,
        *,
        refused: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self.min_free = min_free
        self._refused = refused  # what the warning says is being refused
        self._clock = clock
        self._warned_at: float | None = None
        self._unwarned = 0  # refusals since the last warning

    def has_room(self, size: int) -> bool:
        """True when ``size`` more bytes leave at least ``min_free`` free (always with 0)."""
        if self.min_free == 0:
            return True
        try:
            free = free_bytes(self.root)
        except OSError:  # the check cannot tell: writing the file will report the real error
            return True
        if free - size >= self.min_free:
            return True
        self._note_refusal(free)
        return False

    def _note_refusal(self, free: int) -> None:
        self._unwarned += 1
        now = self._clock()
        if self._warned_at is not None and now - self._warned_at < WARN_EVERY:
            return
        log.warning(
            "media root %s: %d bytes free, under media.min_free_bytes (%d): %s"
            " (%d refused since the previous warning or the start)",
            self.root,
            free,
            self.min_free,
            self._refused,
            self._unwarned,
        )
        self._warned_at, self._unwarned = now, 0
