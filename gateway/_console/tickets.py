"""One-time tickets: the console's live feed authenticates with one instead of the admin token,
so the token never travels in a WebSocket URL or frame that a proxy might log.

Behind a load balancer the ticket's POST and the feed's handshake may reach two processes, so a
ticket is not kept where it was given: it carries its expiry and a MAC of it under the
database's ``console_tickets`` secret (``Store.secret``, the same in every process), and any
process of the deployment takes it. Each process takes a ticket once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable

TICKET_SECONDS = 30.0
SECRET_NAME = "console_tickets"
_MAC_BYTES = 16


class Tickets:
    """Tickets handed out by an authenticated POST, each good once (per process) and for a
    short while; ``use_key`` gives the shared key before the first."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock  # the wall clock: another machine's process checks the expiry
        self._key: bytes | None = None
        self._used: dict[str, float] = {}  # ticket -> expiry, until it expires

    def use_key(self, key: bytes) -> None:
        self._key = key

    def issue(self) -> str:
        expiry = f"{self._clock() + TICKET_SECONDS:.3f}"
        body = f"{expiry}.{secrets.token_urlsafe(16)}"
        return f"{body}.{self._mac(body)}"

    def redeem(self, ticket: object) -> bool:
        """True once for a ticket issued less than TICKET_SECONDS ago by a process of this
        store."""
        if not isinstance(ticket, str) or self._key is None:
            return False
        body, _, mac = ticket.rpartition(".")
        expiry_text = body.partition(".")[0]
        if not hmac.compare_digest(mac.encode(), self._mac(body).encode()):
            return False
        try:
            expiry = float(expiry_text)
        except ValueError:
            return False
        now = self._clock()
        self._used = {used: at for used, at in self._used.items() if at > now}
        if expiry <= now or ticket in self._used:
            return False
        self._used[ticket] = expiry
        return True

    def _mac(self, body: str) -> str:
        if self._key is None:
            raise RuntimeError("the tickets' key is not set yet")
        digest = hmac.new(self._key, body.encode(), hashlib.sha256).digest()[:_MAC_BYTES]
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")
