"""Files in the media root that no attachment row names any more, found and removed.

Rows always go first (retention, erasure), so a stop, a crash or a file system refusal between
a committed delete and the file's removal leaves a file that no row names and nothing else
would ever remove: the users' data outlives the retention it was promised. Each retention pass
looks for such files. A file younger than ``GRACE`` is left alone: an upload writes its file
just before its row, in this process or another one on the same media root.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from webhook_bot_gateway.store import SessionNotFound, Store, validate_session_id

from .files import attachment_path, is_attachment_id, remove_attachment_files

log = logging.getLogger("gateway.media")

GRACE = 3600.0  # seconds: far longer than a file's write and its row's insert take


@dataclass(frozen=True)
class Swept:
    """Files named by no row: how many went, and those the file system would not remove."""

    removed: int
    left: tuple[Path, ...]


async def sweep_orphans(
    store: Store, root: Path, *, grace: float = GRACE, tried: frozenset[Path] = frozenset()
) -> Swept:
    """Remove the files under ``root`` older than ``grace`` that no attachment row names, but
    those in ``tried`` (the caller tried them just now, and said why it could not)."""
    candidates = await asyncio.to_thread(_old_files, root, time.time() - grace)
    removed, left = 0, []
    for session_id, attachment_ids in candidates.items():
        named = await _named(store, session_id)
        orphans = [
            (session_id, aid)
            for aid in attachment_ids
            if aid not in named and attachment_path(root, session_id, aid) not in tried
        ]
        stuck = await asyncio.to_thread(remove_attachment_files, root, orphans)
        removed += len(orphans) - len(stuck)
        left += [attachment_path(root, sid, aid) for sid, aid in stuck]
    if removed or left:
        log.info("media root: removed %d file(s) no row names, %d not", removed, len(left))
    return Swept(removed, tuple(left))


async def _named(store: Store, session_id: str) -> set[str]:
    """The attachment ids the session's rows name; none when the session is gone."""
    try:
        return {attachment.id for attachment in await store.list_attachments(session_id)}
    except SessionNotFound:
        return set()


def _old_files(root: Path, cutoff: float) -> dict[str, list[str]]:
    """Session id -> attachment ids of the files last written before ``cutoff``."""
    found: dict[str, list[str]] = {}
    for session_id, path in _attachment_files(root):
        try:
            if path.stat().st_mtime < cutoff:
                found.setdefault(session_id, []).append(path.name)
        except FileNotFoundError:  # removed meanwhile
            continue
    return found


def _attachment_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(session id, file) for each file named like an attachment id in a folder named like a
    session id; anything else (``.part`` files, names the gateway never makes) is not ours."""
    if not root.is_dir():
        return
    for folder in root.iterdir():
        if not folder.is_dir() or not _is_session_id(folder.name):
            continue
        for path in folder.iterdir():
            if is_attachment_id(path.name):
                yield folder.name, path


def _is_session_id(name: str) -> bool:
    try:
        validate_session_id(name)
    except ValueError:
        return False
    return True
