"""Web session ids, ``web-<uuid4>``: made here, and signed, so that a socket can come back to
its session before the session is stored.

A new socket's session is stored only with its first message or upload: an unauthenticated
client that connects and says nothing leaves no row (it could otherwise fill the store). The
id it is given carries, in the uuid's last 32 bits, a MAC of the rest under the database's
``web_sessions`` secret (``Store.secret``, the same in every process), so an id that is not in
the store is still known as one this gateway gave out. 90 of the uuid's bits stay random.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid

SECRET_NAME = "web_sessions"
_MAC_BYTES = 4


class WebIds:
    """Gives out web session ids and recognizes them."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def issue(self) -> str:
        """A new, random web session id (not stored)."""
        head = bytearray(secrets.token_bytes(16 - _MAC_BYTES))
        head[6] = (head[6] & 0x0F) | 0x40  # version 4
        head[8] = (head[8] & 0x3F) | 0x80  # the RFC 4122 variant
        return f"web-{uuid.UUID(bytes=bytes(head) + self._mac(bytes(head)))}"

    def issued(self, session_id: str) -> bool:
        """Whether ``session_id`` (a well-formed web session id) was given out here."""
        raw = uuid.UUID(session_id.removeprefix("web-")).bytes
        return hmac.compare_digest(raw[-_MAC_BYTES:], self._mac(raw[:-_MAC_BYTES]))

    def _mac(self, head: bytes) -> bytes:
        return hmac.new(self._key, head, hashlib.sha256).digest()[:_MAC_BYTES]
