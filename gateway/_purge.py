"""The background purge: expired dedup rows and finished pipeline rows, in small chunks; and,
once a day when ``store.retention_days`` is set, history older than that (retention)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from webhook_bot_gateway.store import HistoryPurged, Store, StoreError

from ._media.files import attachment_path, session_dir
from ._wait import wait_event
from .config import Settings

log = logging.getLogger("gateway.purge")

CHUNK = 1000  # rows per transaction: a purge never holds the write lock long enough to stall
DAY = 86400.0


@dataclass(frozen=True)
class Retention:
    """``store.retention_days`` as the purger uses it: history older than ``keep_seconds``
    goes, at most once every ``every`` seconds; attachment files live under ``media_root``."""

    keep_seconds: float
    media_root: Path
    every: float = DAY


def retention_of(settings: Settings) -> Retention | None:
    """``store.retention_days`` for the purger; None (keep forever) when it is 0."""
    days = settings.store.retention_days
    return Retention(days * DAY, Path(settings.media.root)) if days else None


class Purger:
    """Every ``interval`` seconds: ``store.purge()`` and ``store.purge_finished(keep)``; with a
    ``retention``, ``store.purge_history`` too, once a day."""

    def __init__(
        self,
        store: Store,
        *,
        interval: float,
        keep_seconds: float,
        retention: Retention | None = None,
    ) -> None:
        self._store = store
        self._interval = interval
        self._keep = keep_seconds  # done inbox and sent outbox rows are kept this long
        self._retention = retention
        self._next_retention = 0.0  # monotonic time: the first pass runs at once
        self._stop = asyncio.Event()

    async def run(self) -> None:
        """Purge at once, then every interval, until ``stop()``."""
        while not self._stop.is_set():
            await self.purge_once()
            if self._retention is not None and time.monotonic() >= self._next_retention:
                self._next_retention = time.monotonic() + self._retention.every
                await self.retain_once()
            await wait_event(self._stop, self._interval)

    def stop(self) -> None:
        self._stop.set()

    async def purge_once(self) -> tuple[int, int]:
        """One purge; returns (dedup rows, finished rows) deleted. Store errors are logged."""
        try:
            expired = await self._store.purge(CHUNK)
            finished = await self._store.purge_finished(self._keep, CHUNK)
        except StoreError as exc:
            log.warning("purge failed, will try again: %s", exc)
            return 0, 0
        if expired or finished:
            log.info("purged %d expired dedup row(s), %d finished row(s)", expired, finished)
        return expired, finished

    async def retain_once(self) -> HistoryPurged | None:
        """One retention pass: rows first, then the files of the attachment rows that went (no
        row ever names a file that is gone). None without a retention, or on a store error."""
        if self._retention is None:
            return None
        try:
            purged = await self._store.purge_history(self._retention.keep_seconds, CHUNK)
        except StoreError as exc:
            log.warning("retention failed, will try again tomorrow: %s", exc)
            return None
        await asyncio.to_thread(remove_files, self._retention.media_root, purged.attachments)
        if purged.total:
            counts = ", ".join(f"{table} {n}" for table, n in purged.counts.items() if n)
            files = len(purged.attachments)
            log.info("retention deleted rows older than the cutoff: %s; files %d", counts, files)
        return purged


def remove_files(root: Path, attachments: tuple[tuple[str, str], ...]) -> None:
    """Delete these attachments' files, and their sessions' folders once empty."""
    for session_id, attachment_id in attachments:
        attachment_path(root, session_id, attachment_id).unlink(missing_ok=True)
    for session_id in {sid for sid, _ in attachments}:
        try:
            session_dir(root, session_id).rmdir()
        except OSError:  # not empty (newer files), or already gone
            pass
