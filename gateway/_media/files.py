"""Where attachment files live: ``<media root>/<session id>/<attachment id>``, nothing else.

File names on disk are the generated attachment ids (32 hex digits) under a folder named by a
validated session id, so no name a client or a platform sends can reach the file system; the
original name is kept only as cleaned metadata.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from webhook_bot_gateway.store import Store, validate_session_id

log = logging.getLogger("gateway.media")

MAX_NAME = 255
_HEX = frozenset("0123456789abcdef")
_LEADING = re.compile(r"^[\s.]+")  # dots and spaces in front, in any mix


def session_dir(root: Path, session_id: str) -> Path:
    """The folder of one session's files."""
    return root / validate_session_id(session_id)


def is_attachment_id(name: str) -> bool:
    """Whether ``name`` is an id the gateway gives attachments (and their files): 32 hex digits."""
    return len(name) == 32 and set(name) <= _HEX


def attachment_path(root: Path, session_id: str, attachment_id: str) -> Path:
    """The file of one attachment; ValueError for an id that is not 32 hex digits."""
    if not is_attachment_id(attachment_id):
        raise ValueError("attachment id must be 32 lowercase hex digits")
    return session_dir(root, session_id) / attachment_id


def remove_attachment_files(
    root: Path, attachments: Sequence[tuple[str, str]]
) -> tuple[tuple[str, str], ...]:
    """Delete the files of these (session, attachment) pairs, whose rows are gone, and their
    sessions' folders once empty; return the pairs whose file could not be removed, each
    logged."""
    left = tuple(pair for pair in attachments if not _removed(root, *pair))
    for session_id in {sid for sid, _ in attachments}:
        try:
            session_dir(root, session_id).rmdir()
        except OSError:  # not empty (files with rows, or newer ones), or already gone
            pass
    return left


def _removed(root: Path, session_id: str, attachment_id: str) -> bool:
    """Unlink one attachment's file (gone already counts as removed); False, with a WARNING
    naming the attachment (never the user's file name), when the file system refuses."""
    try:
        attachment_path(root, session_id, attachment_id).unlink(missing_ok=True)
    except OSError as exc:
        log.warning(
            "the file of attachment %s (session %s) could not be removed: %s; no row names it"
            " any more, and it stays until a later pass (or an operator) removes it",
            attachment_id,
            session_id,
            exc.strerror or type(exc).__name__,
        )
        return False
    return True


@dataclass(frozen=True)
class FolderLeft:
    """A session's folder that could not be removed wholly: what stays of it, and why."""

    path: Path
    files: int
    reason: str


def remove_session_files(root: Path, session_id: str) -> FolderLeft | None:
    """Delete the session's folder and everything in it (nothing if there is none); when the
    file system refuses part of it, everything else still goes and the rest is returned."""
    folder = session_dir(root, session_id)
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
    else:
        return None
    shutil.rmtree(folder, ignore_errors=True)  # whatever else can go
    if not folder.exists():
        return None  # gone meanwhile, or never there
    return FolderLeft(folder, _files_in(folder), reason)


def _files_in(path: Path) -> int:
    if not path.is_dir():
        return 1
    return sum(1 for found in path.rglob("*") if not found.is_dir())


def require_media_root(root: Path, session_id: str, files: int) -> None:
    """ValueError, before anything is changed, when the session has stored files and the media
    root is no folder here: a relative ``media.root`` is read from the working directory, and
    an offline command run from another one would find none of the files (a delete would erase
    the rows and leave the files, an export would leave them out)."""
    if files and not root.is_dir():
        raise ValueError(
            f"media.root: no folder {root.absolute()} (a relative media.root is read from the"
            f" working directory, here {Path.cwd()}), where session {session_id}'s {files}"
            " stored file(s) should be: run the command in the folder gateway serve runs in,"
            " or give media.root as an absolute path"
        )


PART_GRACE = 3600.0  # seconds since a part file's last write, far past any write's idle bound


def remove_partial_files(root: Path, idle: float = PART_GRACE) -> int:
    """Delete the ``.part`` files of downloads and uploads cut by a stop or a crash: those not
    written for ``idle`` seconds. Younger ones may be another live process's on the same media
    root (a rolling deploy starts the new process beside the old); returns how many went."""
    cutoff, removed = time.time() - idle, 0
    for part in root.glob("*/.*.part"):
        try:
            if part.stat().st_mtime >= cutoff:
                continue
            part.unlink()
        except FileNotFoundError:  # finished or removed meanwhile
            continue
        removed += 1
    return removed


@dataclass(frozen=True)
class Erased:
    """A session erased: its rows are gone; ``folder_left`` is what stayed of its files."""

    folder_left: FolderLeft | None = None


async def erase_session(store: Store, root: Path, session_id: str) -> Erased | None:
    """Delete a session: its rows (messages, events, attachments...) in one transaction, then
    its folder. Rows first: no row ever points at a file that is gone. None if there is none;
    a folder that could not be removed wholly is logged (a WARNING) and returned."""
    if not await store.delete_session(session_id):
        return None
    left = remove_session_files(root, session_id)
    if left is not None:
        log.warning(
            "erased session %s, but its folder under media.root could not be removed wholly:"
            " %d file(s) left (%s); remove the folder by hand",
            session_id,
            left.files,
            left.reason,
        )
    return Erased(left)


def clean_name(name: str | None, fallback: str) -> str:
    """A file name fit to show: its last path part, no control characters, at most 255 chars.

    ``../../etc/passwd`` -> ``passwd``; ``C:\\x\\y.txt`` -> ``y.txt``; NUL and other control
    characters are dropped; leading dots go (with any spaces between them: ``. ..`` too), so
    no name is hidden or ``..``.
    """
    text = (name or "").replace("\\", "/").rsplit("/", 1)[-1]
    text = "".join(ch for ch in text if unicodedata.category(ch)[0] != "C")
    text = _LEADING.sub("", unicodedata.normalize("NFC", text))
    return text[:MAX_NAME].rstrip() or fallback
