"""Where attachment files live: ``<media root>/<session id>/<attachment id>``, nothing else.

File names on disk are the generated attachment ids (32 hex digits) under a folder named by a
validated session id, so no name a client or a platform sends can reach the file system; the
original name is kept only as cleaned metadata.
"""

from __future__ import annotations

import re
import shutil
import unicodedata
from pathlib import Path

from webhook_bot_gateway.store import Store, validate_session_id

MAX_NAME = 255
_HEX = frozenset("0123456789abcdef")
_LEADING = re.compile(r"^[\s.]+")  # dots and spaces in front, in any mix


def session_dir(root: Path, session_id: str) -> Path:
    """The folder of one session's files."""
    return root / validate_session_id(session_id)


def attachment_path(root: Path, session_id: str, attachment_id: str) -> Path:
    """The file of one attachment; ValueError for an id that is not 32 hex digits."""
    if len(attachment_id) != 32 or not set(attachment_id) <= _HEX:
        raise ValueError("attachment id must be 32 lowercase hex digits")
    return session_dir(root, session_id) / attachment_id


def remove_session_files(root: Path, session_id: str) -> None:
    """Delete the session's folder and everything in it (nothing if there is none)."""
    shutil.rmtree(session_dir(root, session_id), ignore_errors=True)


def remove_partial_files(root: Path) -> int:
    """Delete the ``.part`` files of downloads and uploads cut by a stop or a crash.

    Called once at start, before this process begins any download; returns how many went.
    """
    removed = 0
    for part in root.glob("*/.*.part"):
        part.unlink(missing_ok=True)
        removed += 1
    return removed


async def erase_session(store: Store, root: Path, session_id: str) -> bool:
    """Delete a session: its rows (messages, events, attachments...) in one transaction, then
    its folder. Rows first: no row ever points at a file that is gone. False if none."""
    if not await store.delete_session(session_id):
        return False
    remove_session_files(root, session_id)
    return True


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
