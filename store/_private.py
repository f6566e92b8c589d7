"""Folders and files only their owner can read: the store and the media hold users'
conversations (docs/security.md). What exists already keeps its mode: an operator's choice."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

FOLDER_MODE = 0o700
FILE_MODE = 0o600


def make_private_folders(folder: Path) -> None:
    """``folder`` and each missing parent made with mode 0700 (the umask can only take bits
    away); folders that exist are left as they are. OSError if one cannot be made."""
    if folder.is_dir():
        return
    if folder.parent != folder:
        make_private_folders(folder.parent)
    # exist_ok: another process may make it meanwhile; a file of that name still raises.
    folder.mkdir(mode=FOLDER_MODE, exist_ok=True)


def open_private(path: Path) -> BinaryIO:
    """A new file at ``path`` with mode 0600, open for writing (FileExistsError if something
    is there)."""
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE), "wb")


def make_private_file(path: Path) -> bool:
    """An empty file at ``path`` with mode 0600 unless something is there already; True when
    this call made it. OSError if it cannot be made (no folder, no permission)."""
    try:
        open_private(path).close()
    except FileExistsError:
        return False
    return True
