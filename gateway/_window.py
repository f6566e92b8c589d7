"""WhatsApp's customer-service window: free text only within 24 hours of the user's last message.

Meta refuses free-form messages outside it (error 131047) and our own messages do not reopen it
(docs/channels-whatsapp.md). The store keeps when the user last wrote in the session's metadata
(``last_user_message_at``, the message's own timestamp); this module only reads it, so the
window is the same in every process and after a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook_bot_gateway.store import LAST_USER_MESSAGE_AT, Session

WHATSAPP = "whatsapp"
WINDOW_SECONDS = 24 * 3600


@dataclass(frozen=True, slots=True)
class Window:
    """The window of one session at one moment; ``closes_at`` is None if the user never wrote."""

    open: bool
    closes_at: float | None

    def describe(self) -> str:
        """Why a free-text reply is refused, for operators and agents."""
        if self.closes_at is None:
            return "WhatsApp's 24-hour window is closed: the user has not written yet"
        return (
            "WhatsApp's 24-hour window is closed: more than 24 hours have passed since the"
            " user's last message, so only an approved template is delivered until they write"
        )


def applies(session: Session) -> bool:
    """Whether the session's channel has the window (WhatsApp only)."""
    return session.channel == WHATSAPP


def window_of(metadata: Mapping[str, Any], now: float) -> Window:
    """The window as at ``now`` (Unix seconds), from a WhatsApp session's metadata."""
    wrote = metadata.get(LAST_USER_MESSAGE_AT)
    if not isinstance(wrote, int | float) or isinstance(wrote, bool):
        return Window(open=False, closes_at=None)
    closes_at = float(wrote) + WINDOW_SECONDS
    return Window(open=now < closes_at, closes_at=closes_at)


def free_text_refusal(session: Session, now: float) -> Window | None:
    """The closed window that refuses a free-text reply in ``session``; None when it may go."""
    if not applies(session):
        return None
    window = window_of(session.metadata, now)
    return None if window.open else window
