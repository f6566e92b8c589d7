"""Session ids: ``<channel>-<account>-<chat_id>``; letters, digits, ``_``, ``-``; 1..128."""

from __future__ import annotations

import re

from ._errors import InvalidSessionId

MAX_SESSION_ID = 128
_VALID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def validate_session_id(session_id: object) -> str:
    """Return ``session_id`` unchanged, or raise InvalidSessionId naming the fault."""
    if not isinstance(session_id, str):
        raise InvalidSessionId(f"session id must be a string, got {type(session_id).__name__}")
    if not session_id:
        raise InvalidSessionId("session id is empty")
    if len(session_id) > MAX_SESSION_ID:
        raise InvalidSessionId(f"session id is longer than {MAX_SESSION_ID} characters")
    if not _VALID.fullmatch(session_id):
        raise InvalidSessionId(
            f"session id {session_id!r} may hold only letters, digits, '_' and '-'"
        )
    return session_id


def make_session_id(channel: str, account: str, chat_id: str) -> str:
    """Build the session id of a chat; characters outside the allowed set become ``_``.

    A channel without accounts (the web) passes ``account=""``: ``web-<uuid>``.
    """
    raw = f"{channel}-{account}-{chat_id}" if account else f"{channel}-{chat_id}"
    return validate_session_id(_UNSAFE.sub("_", raw))
