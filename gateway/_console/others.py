"""Sessions other processes changed, for the console's list: found by a poll.

The store tells a process of the sessions its own commits changed (``Store.watch_events``);
what another process of the deployment commits reaches no listener here. So while a console
feed is open, the newest sessions are read every ``POLL_SECONDS`` and those updated since the
last read are announced too. A session announced twice only refreshes the list twice.
"""

from __future__ import annotations

import contextlib

from webhook_bot_gateway.store import Store, StoreError

POLL_SECONDS = 2.0
PAGE = 100  # the newest sessions read per poll: more changed in one period refresh the list too


class OthersChanges:
    """The sessions updated since the last ``changed()`` or ``start()`` (none at the first
    call: its baseline)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._since: float | None = None
        self._at_since: set[str] = set()  # announced already, updated exactly at ``_since``

    async def start(self) -> None:
        """Take the baseline now; a store that fails leaves it to the first poll."""
        with contextlib.suppress(StoreError):
            await self.changed()

    async def changed(self) -> list[str]:
        sessions = await self._store.list_sessions(limit=PAGE)  # newest update first
        stamped = [(s.updated_at.timestamp(), s.session_id) for s in sessions]
        since = self._since
        if since is None:
            found: list[str] = []
        else:
            found = [
                sid
                for at, sid in stamped
                if at > since or (at == since and sid not in self._at_since)
            ]
        newest = max((at for at, _ in stamped), default=since if since is not None else 0.0)
        if since is None or newest > since:
            self._since = newest
            self._at_since = {sid for at, sid in stamped if at == newest}
        else:
            self._at_since |= {sid for at, sid in stamped if at == since}
        return found
