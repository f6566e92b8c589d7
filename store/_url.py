"""``open_store(url)``: pick and open a backend from the ``[store] url`` setting."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ._protocol import Store
from .sqlite._store import DEFAULT_DEDUP_TTL_HOURS, SQLiteStore

_SQLITE = "sqlite:///"
_MEMORY = ":memory:"


def sqlite_path(url: str) -> str:
    """The file path of a ``sqlite:///`` url (relative to the working directory), or ``:memory:``.

    Error messages name the scheme only: a url may carry a password.
    """
    if not isinstance(url, str):
        raise ValueError(f"store url must be a string, got {type(url).__name__}")
    if not url.startswith(_SQLITE):
        scheme = url.split(":", 1)[0] if ":" in url else ""
        if scheme == "sqlite":
            raise ValueError("sqlite store url must look like sqlite:///relative/path.db")
        raise ValueError(f"unsupported store url scheme {scheme!r}; supported: sqlite:///path.db")
    path = url[len(_SQLITE) :]
    if not path or "?" in path or path.endswith("/"):
        raise ValueError("sqlite store url must name a file: sqlite:///path.db (no query)")
    return path


async def open_store(
    url: str,
    *,
    dedup_ttl_hours: float = DEFAULT_DEDUP_TTL_HOURS,
    clock: Callable[[], float] = time.time,
) -> Store:
    """Open the store a url names, creating the file's parent directories if needed."""
    path = sqlite_path(url)
    if path != _MEMORY:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    return await SQLiteStore.open(path, dedup_ttl_hours=dedup_ttl_hours, clock=clock)
