"""Erasure (``delete_session``): which quarantined bodies belong to the session being erased.

A quarantined body could not be parsed, so no column names its chat: the body itself is
searched for the chat id, as a whole token (``123`` is not found in ``-1234`` or ``51234``).
The backend narrows the rows with a substring match in SQL; this decides on each of them.
"""

from __future__ import annotations

import re


def names_chat(body: bytes, chat_id: str) -> bool:
    """Whether ``body`` holds ``chat_id`` as a whole token (not inside a longer id)."""
    token = re.compile(rb"(?<![\w-])" + re.escape(chat_id.encode()) + rb"(?![\w])")
    return token.search(body) is not None
