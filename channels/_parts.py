"""Sending a reply that the platform needs several messages for, resumably."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from ._errors import SendError
from ._model import SendResult

Part = Callable[[], Awaitable[str]]  # sends one message, returns its platform id


async def send_parts(parts: Sequence[Part], skip: int) -> SendResult:
    """Send ``parts`` after the first ``skip`` (delivered by an earlier try), in order.

    A failure carries the ids this try delivered in ``SendError.sent_ids``, so the caller can
    record them and start the next try after them: no part reaches the user twice.
    """
    ids: list[str] = []
    try:
        for part in parts[skip:]:
            ids.append(await part())
    except SendError as exc:
        exc.sent_ids = tuple(ids)
        raise
    return SendResult(message_ids=tuple(ids))
