"""Erasure: which quarantined bodies name a chat, and which dedup keys go with a chat's session.

A quarantined body could not be parsed, so no column names its chat: the body itself is
searched for the chat id, as a whole token (``123`` is not found in ``-1234`` or ``51234``).
The backend narrows the rows with a substring match in SQL; this decides on each of them.

Dedup keys are kept when a session is erased: a platform's redelivery of an erased message must
stay a duplicate. The web channel's keys are ``web:<chat id>:<client_id>`` (channels/_web.py
``web_dedup_key``): ids the user's own client chose, which it uses again ("c1") in the session
begun anew under the same id, so they go with the session (docs/data.md "Erasure").
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CLIENT_KEYED_CHANNEL = "web"


def names_chat(body: bytes, chat_id: str) -> bool:
    """Whether ``body`` holds ``chat_id`` as a whole token (not inside a longer id)."""
    token = re.compile(rb"(?<![\w-])" + re.escape(chat_id.encode()) + rb"(?![\w])")
    return token.search(body) is not None


def client_key_prefixes(chats: Iterable[tuple[str, str]]) -> list[str]:
    """For erased ``(channel, chat_id)`` pairs: the prefix of each web chat's dedup keys."""
    return sorted(
        {f"{channel}:{chat_id}:" for channel, chat_id in chats if channel == CLIENT_KEYED_CHANNEL}
    )
