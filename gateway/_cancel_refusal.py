"""The words of a refused cancel (409 ``no_turn_running`` and the socket's error frame)."""

from __future__ import annotations

from webhook_bot_gateway.store import Store

NOT_RUNNING = "no turn of this session is running"
NOT_STOPPABLE = (
    "the session's turn could not be stopped: it is committing its answer, or it runs in"
    " another gateway process that this one cannot reach (SQLite passes no cancel between"
    " processes)"
)


async def not_stopped(store: Store, session_id: str) -> str:
    """Why no turn was stopped: none runs, or one runs where this process cannot stop it (the
    session's status says ``running`` meanwhile)."""
    session = await store.get_session(session_id)
    return NOT_STOPPABLE if session is not None and session.status == "running" else NOT_RUNNING
