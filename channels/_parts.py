"""Sending a reply that the platform needs several messages for, resumably."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from ._errors import SendError
from ._model import SendResult

Part = Callable[[], Awaitable[str]]  # sends one message, returns its platform id


async def send_parts(parts: Sequence[Part], skip: int, limit: int | None = None) -> SendResult:
    """Send ``parts`` after the first ``skip`` (delivered by an earlier try), in order, at
    most ``limit`` of them (the chat's rate limit): ``SendResult.remaining`` counts the rest.

    A failure carries the ids this try delivered in ``SendError.sent_ids``, so the caller can
    record them and start the next try after them: no part reaches the user twice.
    """
    ids: list[str] = []
    todo = parts[skip:]
    now = todo if limit is None else todo[:limit]
    try:
        for part in now:
            ids.append(await part())
    except SendError as exc:
        exc.sent_ids = tuple(ids)
        raise
    return SendResult(message_ids=tuple(ids), remaining=len(todo) - len(now))
