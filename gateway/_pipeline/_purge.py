"""The background purge: expired dedup rows and finished pipeline rows, in small chunks; and,
once a day when ``store.retention_days`` is set, history older than that (retention)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from webhook_bot_gateway.store import HistoryPurged, Store, StoreError

from .._media.files import attachment_path, remove_attachment_files
from .._media.orphans import sweep_orphans
from .._wait import wait_event
from ..config import Settings

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
    """Every ``interval`` seconds: ``store.purge()`` and ``store.purge_finished(keep)``; once a
    day, with a ``retention``, ``store.purge_history`` and a sweep of its media root for files
    no row names; without one, that sweep alone, of ``media_root`` when given."""

    def __init__(
        self,
        store: Store,
        *,
        interval: float,
        keep_seconds: float,
        retention: Retention | None = None,
        media_root: Path | None = None,
    ) -> None:
        self._store = store
        self._interval = interval
        self._keep = keep_seconds  # done inbox and sent outbox rows are kept this long
        self._retention = retention
        self._media_root = retention.media_root if retention is not None else media_root
        self._next_daily = 0.0  # monotonic time: the first pass runs at once
        self._files_left: tuple[tuple[str, str], ...] = ()  # (session, attachment): tried again
        self._orphans_left: tuple[Path, ...] = ()  # files no row names, found by the last sweep
        self._stop = asyncio.Event()

    async def run(self) -> None:
        """Purge at once, then every interval, until ``stop()``."""
        while not self._stop.is_set():
            await self.purge_once()
            if time.monotonic() >= self._next_daily:
                every = self._retention.every if self._retention is not None else DAY
                self._next_daily = time.monotonic() + every
                await self.daily_once()
            await wait_event(self._stop, self._interval)

    async def daily_once(self) -> None:
        """The daily pass: retention (with its sweep) if there is one, else the sweep alone."""
        if self._retention is not None:
            await self.retain_once()
        else:
            await self.sweep_once()

    def stop(self) -> None:
        self._stop.set()

    @property
    def files_left(self) -> tuple[Path, ...]:
        """The files that no row names and that the last retention pass could not remove: those
        of the rows it purged, and older ones its sweep of the media root found (tried again
        at each pass)."""
        return (*self._purged_files_left(), *self._orphans_left)

    def _purged_files_left(self) -> tuple[Path, ...]:
        if self._retention is None:
            return ()
        root = self._retention.media_root
        return tuple(attachment_path(root, sid, aid) for sid, aid in self._files_left)

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
        row ever names a file that is gone), and those an earlier pass could not remove; then
        a sweep of the media root for older files no row names (left by a stop or a crash
        between the rows' commit and the files' removal, here or in an erasure). A file that
        cannot be removed is logged and kept in ``files_left``; the pass goes on. None without
        a retention, or on a store error."""
        if self._retention is None:
            return None
        try:
            purged = await self._store.purge_history(self._retention.keep_seconds, CHUNK)
        except StoreError as exc:
            log.warning("retention failed, will try again tomorrow: %s", exc)
            return None
        root = self._retention.media_root
        files = (*self._files_left, *purged.attachments)
        self._files_left = await asyncio.to_thread(remove_attachment_files, root, files)
        await self.sweep_once(
            tried=frozenset(attachment_path(root, sid, aid) for sid, aid in files)
        )
        if purged.total or self._files_left:
            counts = ", ".join(f"{table} {n}" for table, n in purged.counts.items() if n)
            log.info(
                "retention deleted rows older than the cutoff: %s; files %d, not removed %d",
                counts or "none",
                len(purged.attachments),
                len(self._files_left),
            )
        return purged

    async def sweep_once(self, tried: frozenset[Path] = frozenset()) -> None:
        """Remove the media root's files over an hour old that no row names (a stop or a crash
        between a delete's commit and its files' removal left them); ``tried``: files the
        caller tried just now. Those that will not go are kept in ``files_left``."""
        if self._media_root is None:
            return
        try:
            swept = await sweep_orphans(self._store, self._media_root, tried=tried)
        except StoreError as exc:
            log.warning("the media root's sweep failed, will try again: %s", exc)
        else:
            self._orphans_left = swept.left
