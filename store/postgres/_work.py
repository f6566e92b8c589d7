"""Ownership across processes on PostgreSQL: leases, and hearing of other processes' work.

Each store renews a lease (a ``leases`` row) while its process lives; the turns it runs name it
in ``sessions.owner`` and its outbox claims in ``outbox.claimed_by``, and another process takes
either over only once that lease or claim has run out (``interrupt_running``, ``claim``).

``watch`` listens on a connection of its own (a pooled one would be handed to others between
calls) for the notifications the inbox and outbox triggers send at each COMMIT (_schema.py).
Each starts with the ``gateway.origin`` of the writing connection, its store's owner: a store
ignores its own, which its process hears of directly. If that connection is lost, a warning
says so and nothing else happens: the dispatcher's and the sender's polls still find the work.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import asyncpg

from ._db import CONNECTION_ERRORS, connect, unavailable

log = logging.getLogger("store.postgres")  # the names operators filter on stay short

INBOX_CHANNEL = "gateway_inbox"  # payload: "<origin> <session id>"
OUTBOX_CHANNEL = "gateway_outbox"  # payload: "<origin>"

InboxListener = Callable[[frozenset[str]], None]
OutboxListener = Callable[[], None]


async def renew_lease(conn: asyncpg.Connection, owner: str, expires_at: float) -> None:
    """Hold ``owner``'s lease until ``expires_at`` (insert or move it)."""
    await conn.execute(
        "INSERT INTO leases (owner, expires_at) VALUES ($1, $2)"
        " ON CONFLICT (owner) DO UPDATE SET expires_at = excluded.expires_at",
        owner,
        expires_at,
    )


async def release_lease(conn: asyncpg.Connection, owner: str) -> None:
    """Drop ``owner``'s lease: its running turns may be taken over at once."""
    await conn.execute("DELETE FROM leases WHERE owner = $1", owner)


def _guarded(name: str, call: Callable[[], None]) -> None:
    """A listener's exception would reach only the event loop's handler: log it here."""
    try:
        call()
    except Exception:
        log.exception("a listener of other processes' %s rows failed", name)


@asynccontextmanager
async def watch(
    url: str,
    owner: str,
    on_inbox: InboxListener,
    on_outbox: OutboxListener,
    *,
    connect_timeout: float,
) -> AsyncIterator[None]:
    """While entered, call ``on_inbox({session_id})`` for each inbox row and ``on_outbox()``
    for each outbox row another store committed (one call per notification: PostgreSQL sends
    one per distinct payload and transaction). StoreUnavailable if the connection fails."""
    conn = await connect(url, connect_timeout=connect_timeout)

    def inbox_heard(_c: object, _pid: int, _channel: str, payload: object) -> None:
        origin, _, session_id = str(payload).partition(" ")
        if origin != owner and session_id:
            _guarded("inbox", lambda: on_inbox(frozenset({session_id})))

    def outbox_heard(_c: object, _pid: int, _channel: str, payload: object) -> None:
        if str(payload) != owner:
            _guarded("outbox", on_outbox)

    def lost(_c: object) -> None:
        log.warning(
            "lost the PostgreSQL connection that hears of other processes' work;"
            " the polls still find it, only later"
        )

    try:
        conn.add_termination_listener(lost)
        await conn.add_listener(INBOX_CHANNEL, inbox_heard)
        await conn.add_listener(OUTBOX_CHANNEL, outbox_heard)
    except BaseException as exc:
        conn.terminate()
        if isinstance(exc, CONNECTION_ERRORS):
            raise unavailable(exc) from None
        raise
    try:
        yield
    finally:
        conn.remove_termination_listener(lost)
        await _close(conn, inbox_heard, outbox_heard, connect_timeout)


async def _close(
    conn: asyncpg.Connection,
    inbox_heard: Callable[..., None],
    outbox_heard: Callable[..., None],
    close_timeout: float,
) -> None:
    """Stop listening and close; a connection that fails to close is dropped (the exception of
    the ``async with`` body, if any, is the one that matters)."""
    if conn.is_closed():
        return  # lost meanwhile: already warned
    try:
        await conn.remove_listener(INBOX_CHANNEL, inbox_heard)
        await conn.remove_listener(OUTBOX_CHANNEL, outbox_heard)
        await conn.close(timeout=close_timeout)
    except Exception as exc:
        conn.terminate()
        log.debug("closing the listening connection failed (%s)", type(exc).__name__)
    except BaseException:
        conn.terminate()
        raise
