"""The media worker: brings platform files (photos, documents, voice notes) into the session's
attachment folder after the webhook was acknowledged, never on the webhook path.

The intake records each such file as a ``pending`` attachment in the transaction that records
its message; this worker fetches pending rows (also those a crash left behind) and ends each as
``ready`` or ``failed``. A turn waits for its message's files at most ``download_wait_seconds``;
a download still running then is linked when it ends, and the reply does not wait for it.

Below the free-space floor (``media.min_free_bytes``, room kept for a whole ``max_bytes`` file)
a download is not started: its row stays pending and a later pass, or the next start, fetches
it. Failing it instead would lose the file for good over what is often a passing shortage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from webhook_bot_gateway.agents import ImagePart
from webhook_bot_gateway.channels import ChannelAdapter, ChannelError
from webhook_bot_gateway.store import Attachment, Store, StoreError, make_private_folders

from .._metrics import Metrics
from .._wait import wait_event
from .fetch import FetchPolicy, MediaRefused, fetch_to_file
from .files import PART_GRACE, attachment_path, remove_partial_files
from .space import DiskFloor

log = logging.getLogger("gateway.media")

MEDIA = "gateway_media_downloads_total"
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/webp", "image/gif"})
MAX_IMAGE_BYTES = 5 * 1024 * 1024  # larger photos are described, not sent to the model
MAX_ERROR = 300


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one download ended, as ``finish_attachment`` records it."""

    state: str
    size: int = 0
    content_type: str | None = None
    error: str | None = None


class MediaWorker:
    """Downloads pending platform attachments, a bounded number at a time."""

    def __init__(
        self,
        store: Store,
        adapters: Mapping[str, ChannelAdapter],
        http: aiohttp.ClientSession,
        *,
        root: Path,
        policy: FetchPolicy,
        wait_seconds: float,
        metrics: Metrics,
        min_free_bytes: int = 0,
        max_in_flight: int = 8,
    ) -> None:
        self._store = store
        self._adapters = adapters
        self._http = http
        self._root = root
        self._policy = policy
        self._wait_seconds = wait_seconds
        self._metrics = metrics
        held = "platform downloads are held back (their rows stay pending)"
        self._floor = DiskFloor(root, min_free_bytes, refused=held)
        self._slots = asyncio.Semaphore(max_in_flight)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._done: dict[str, asyncio.Event] = {}  # attachment id -> set when it ends
        self.wake = asyncio.Event()
        self._stopping = False
        self._next_sweep = 0.0  # monotonic: when partial files are looked for again

    async def sweep(self) -> None:
        """Delete the partial files a stop or a crash left behind (those idle for PART_GRACE:
        younger ones may be another process's); at start, then every PART_GRACE."""
        self._next_sweep = time.monotonic() + PART_GRACE
        try:
            removed = await asyncio.to_thread(remove_partial_files, self._root)
        except OSError as exc:
            log.warning("partial files not looked for: %s", exc.strerror or type(exc).__name__)
            return
        if removed:
            log.info("removed %d partial file(s) a stop or a crash left in the media root", removed)

    async def run(self, poll_seconds: float = 5.0) -> None:
        """Start a download for every pending row; look again on a wake-up or a poll."""
        while not self._stopping:
            self.wake.clear()
            if time.monotonic() >= self._next_sweep:
                await self.sweep()
            try:
                for attachment in await self._store.pending_attachments():
                    if attachment.id not in self._tasks:
                        self._start(attachment)
            except StoreError as exc:
                log.warning("media pass failed: %s", exc)
            await wait_event(self.wake, poll_seconds)

    async def stop(self) -> None:
        """Cut the downloads under way: their rows stay pending and are fetched after a start."""
        self._stopping = True
        self.wake.set()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def settle(self, message_keys: Sequence[str]) -> list[Attachment]:
        """The messages' attachments; pending ones get up to ``wait_seconds`` to finish."""
        files = await self._store.message_attachments(message_keys)
        pending = [a.id for a in files if a.state == "pending"]
        if not pending or self._wait_seconds <= 0:
            return files
        events = [self._done.setdefault(aid, asyncio.Event()) for aid in pending]
        files = await self._store.message_attachments(message_keys)  # may have ended meanwhile
        waiting = [e for e, a in zip(events, pending, strict=True) if _still_pending(files, a)]
        if waiting:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._wait_seconds):
                    await asyncio.gather(*(event.wait() for event in waiting))
            files = await self._store.message_attachments(message_keys)
        return files

    async def images(self, files: Sequence[Attachment]) -> tuple[ImagePart, ...]:
        """The ready images a model may be shown (common formats, at most MAX_IMAGE_BYTES)."""
        parts: list[ImagePart] = []
        for file in files:
            if file.state != "ready" or file.content_type not in IMAGE_TYPES:
                continue
            if file.size > MAX_IMAGE_BYTES:
                continue
            path = attachment_path(self._root, file.session_id, file.id)
            try:
                data = await asyncio.to_thread(path.read_bytes)
            except OSError as exc:  # deleted with its session meanwhile: the text still says
                log.info("image %s not readable: %s", file.id, type(exc).__name__)
                continue
            parts.append(ImagePart(file.content_type, data))
        return tuple(parts)

    def _start(self, attachment: Attachment) -> None:
        task = asyncio.create_task(self._fetch(attachment), name=f"media {attachment.id}")
        self._tasks[attachment.id] = task
        task.add_done_callback(lambda _: self._tasks.pop(attachment.id, None))

    async def _fetch(self, attachment: Attachment) -> None:
        async with self._slots:
            if not self._floor.has_room(self._policy.max_bytes):
                self._release(attachment.id)  # a turn waiting for it goes on without it
                return
            outcome = await self._download(attachment)
        try:
            await self._store.finish_attachment(
                attachment.id,
                state=outcome.state,
                size=outcome.size,
                content_type=outcome.content_type,
                error=outcome.error,
            )
        except StoreError as exc:  # e.g. the session was deleted meanwhile: so is the file
            log.info("attachment %s not recorded: %s", attachment.id, type(exc).__name__)
            attachment_path(self._root, attachment.session_id, attachment.id).unlink(
                missing_ok=True
            )
        finally:
            self._release(attachment.id)
        self._metrics.inc(MEDIA, channel=attachment.source, outcome=outcome.state)

    def _release(self, attachment_id: str) -> None:
        """Wake the turns waiting for this download: it ended, or is held back."""
        done = self._done.pop(attachment_id, None)
        if done is not None:
            done.set()

    async def _download(self, attachment: Attachment) -> Outcome:
        """Fetch the file; the keyword arguments of ``finish_attachment``."""
        ref = attachment.media_ref
        adapter = self._adapters.get(attachment.source)
        dest = attachment_path(self._root, attachment.session_id, attachment.id)
        try:
            if adapter is None:
                raise ChannelError(attachment.source, "the channel is not configured")
            source = await adapter.media_source(str(ref.get("account")), str(ref.get("media_id")))
            make_private_folders(dest.parent)  # owner-only: users' files (docs/security.md)
            result = await fetch_to_file(self._http, source, dest, self._policy)
        except MediaRefused as exc:
            return _failed(attachment, exc.code, str(exc))
        except ChannelError as exc:
            return _failed(attachment, "platform", exc.reason)
        except OSError as exc:  # the media root cannot be written: say so, do not retry forever
            log.error("media root %s not writable: %s", self._root, type(exc).__name__)
            return _failed(attachment, "storage", f"storage: {type(exc).__name__}")
        return Outcome("ready", result.size, result.content_type)


def _still_pending(files: Sequence[Attachment], attachment_id: str) -> bool:
    return any(a.id == attachment_id and a.state == "pending" for a in files)


def _failed(attachment: Attachment, code: str, message: str) -> Outcome:
    log.warning("%s attachment %s not downloaded: %s", attachment.source, attachment.id, code)
    return Outcome("failed", error=message[:MAX_ERROR])
