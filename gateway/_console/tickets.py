"""One-time tickets: the console's live feed authenticates with one instead of the admin token,
so the token never travels in a WebSocket URL or frame that a proxy might log."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

TICKET_SECONDS = 30.0


class Tickets:
    """Tickets handed out by an authenticated POST, each good once and for a short while."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._open: dict[str, float] = {}  # ticket -> expiry

    def issue(self) -> str:
        self._forget_expired()
        ticket = secrets.token_urlsafe(32)
        self._open[ticket] = self._clock() + TICKET_SECONDS
        return ticket

    def redeem(self, ticket: object) -> bool:
        """True once for a ticket issued less than TICKET_SECONDS ago."""
        if not isinstance(ticket, str):
            return False
        expiry = self._open.pop(ticket, None)
        return expiry is not None and expiry > self._clock()

    def _forget_expired(self) -> None:
        now = self._clock()
        self._open = {ticket: at for ticket, at in self._open.items() if at > now}
