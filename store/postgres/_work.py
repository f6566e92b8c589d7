"""Ownership across processes on PostgreSQL: leases, and hearing of other processes' work.

Each store renews a lease (a ``leases`` row) while its process lives; the turns it runs name it
in ``sessions.owner`` and its outbox claims in ``outbox.claimed_by``, and another process takes
either over only once that lease or claim has run out (``interrupt_running``, ``claim``).

``watch`` listens on a connection of its own (a pooled one would be handed to others between
calls) for the notifications the inbox and outbox triggers send at each COMMIT (_schema.py).
Each starts with the ``gateway.origin`` of the writing connection, its store's owner: a store
ignores its own, which its process hears of directly. If that connection is lost, a warning
says so and it is made again in the background (``_listen.py``); meanwhile the dispatcher's and
the sender's polls still find the work. The same connection carries the cancel relay's requests
and answers (``_cancel_relay.py``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import asyncpg

from ._listen import Listening

log = logging.getLogger("store.postgres")  # the names operators filter on stay short

INBOX_CHANNEL = "gateway_inbox"  # payload: "<origin> <session id>"
OUTBOX_CHANNEL = "gateway_outbox"  # payload: "<origin>"
CANCEL_CHANNEL = "gateway_cancel"  # payload: "<to owner> <from owner> <request id> <session id>"
ANSWER_CHANNEL = "gateway_cancel_answer"  # payload: "<to owner> <request id> <1 or 0>"

InboxListener = Callable[[frozenset[str]], None]
OutboxListener = Callable[[], None]
CancelListener = Callable[[str, str, str], None]  # (from owner, request id, session id)
AnswerListener = Callable[[str, bool], None]  # (request id, accepted)


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


async def secret(conn: asyncpg.Connection, name: str, fresh: str) -> str:
    """The secret ``name``, stored as ``fresh`` if it has none yet (two statements: the
    SELECT's snapshot must see a row another process inserted while this INSERT waited)."""
    await conn.execute(
        "INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT DO NOTHING", name, fresh
    )
    value: str = await conn.fetchval("SELECT value FROM secrets WHERE name = $1", name)
    return value


async def running_owner(conn: asyncpg.Connection, session_id: str, now: float) -> str | None:
    """The owner of the session's running turn if its lease is live, else None."""
    owner: str | None = await conn.fetchval(
        "SELECT s.owner FROM sessions s JOIN leases l ON l.owner = s.owner"
        " WHERE s.session_id = $1 AND s.status = 'running' AND l.expires_at > $2",
        session_id,
        now,
    )
    return owner


async def notify(conn: asyncpg.Connection, channel: str, payload: str) -> None:
    """Send one notification now (outside a transaction: at once)."""
    await conn.execute("SELECT pg_notify($1, $2)", channel, payload)


def _guarded(name: str, call: Callable[[], None]) -> None:
    """A listener's exception would reach only the event loop's handler: log it here."""
    try:
        call()
    except Exception:
        log.exception("a listener of other processes' %s failed", name)


@asynccontextmanager
async def watch(
    url: str,
    owner: str,
    on_inbox: InboxListener,
    on_outbox: OutboxListener,
    on_cancel: CancelListener,
    on_answer: AnswerListener,
    *,
    connect_timeout: float,
) -> AsyncIterator[None]:
    """While entered, call ``on_inbox({session_id})`` for each inbox row and ``on_outbox()``
    for each outbox row another store committed (one call per notification: PostgreSQL sends
    one per distinct payload and transaction), and ``on_cancel``/``on_answer`` for the cancel
    requests and answers addressed to ``owner``. StoreUnavailable if the connection cannot be
    made; one lost later is made again (``_listen.py``)."""

    def inbox_heard(_c: object, _pid: int, _channel: str, payload: object) -> None:
        origin, _, session_id = str(payload).partition(" ")
        if origin != owner and session_id:
            _guarded("inbox rows", lambda: on_inbox(frozenset({session_id})))

    def outbox_heard(_c: object, _pid: int, _channel: str, payload: object) -> None:
        if str(payload) != owner:
            _guarded("outbox rows", on_outbox)

    def cancel_heard(_c: object, _pid: int, _channel: str, payload: object) -> None:
        to, asker, request_id, session_id = (str(payload).split(" ") + ["", "", "", ""])[:4]
        if to == owner and session_id:
            _guarded("cancel requests", lambda: on_cancel(asker, request_id, session_id))

    def answer_heard(_c: object, _pid: int, _channel: str, payload: object) -> None:
        to, request_id, accepted = (str(payload).split(" ") + ["", "", ""])[:3]
        if to == owner:
            _guarded("cancel answers", lambda: on_answer(request_id, accepted == "1"))

    heard = {
        INBOX_CHANNEL: inbox_heard,
        OUTBOX_CHANNEL: outbox_heard,
        CANCEL_CHANNEL: cancel_heard,
        ANSWER_CHANNEL: answer_heard,
    }

    listening = Listening(url, heard, connect_timeout)
    await listening.open()
    try:
        yield
    finally:
        await listening.close()
