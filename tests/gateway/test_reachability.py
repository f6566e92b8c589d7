"""Which platform answers mean a user is gone, and the intake's part: a WhatsApp status that
failed with 131026 marks the user's session like a block."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from webhook_bot_gateway.channels import (
    DeliveryStatus,
    ParseResult,
    PermanentSendError,
    PlatformError,
)
from webhook_bot_gateway.gateway import _reachability as reachability
from webhook_bot_gateway.gateway._pipeline._intake import to_parsed
from webhook_bot_gateway.store import Delivery, SQLiteStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_gone_reason_of_telegram_block_and_whatsapp_undeliverable() -> None:
    blocked = PermanentSendError("telegram", "Forbidden: bot was blocked by the user", status=403)
    kicked = PermanentSendError("telegram", "Forbidden: bot was kicked from the group", status=403)
    deleted = PermanentSendError("telegram", "Forbidden: user is deactivated", status=403)
    gone = PermanentSendError("whatsapp", "Graph error 131026", error_code=131026, status=400)
    window = PermanentSendError("whatsapp", "Graph error 131047", error_code=131047, status=400)
    assert reachability.gone_reason("telegram", blocked) == "blocked"
    assert reachability.gone_reason("whatsapp", gone) == "unreachable"
    assert reachability.gone_reason("telegram", kicked) is None
    assert reachability.gone_reason("telegram", deleted) == "unreachable"
    assert reachability.gone_reason("whatsapp", window) is None


def test_only_whatsapp_sessions_are_released_by_the_users_message() -> None:
    assert reachability.released_by_message("whatsapp", {"blocked": True})
    assert not reachability.released_by_message("telegram", {"blocked": True})
    assert not reachability.released_by_message("whatsapp", {"blocked": False})


def status(code: int | None, state: str = "failed") -> DeliveryStatus:
    errors = (PlatformError(code=code, title="Message undeliverable"),) if code else ()
    return DeliveryStatus(
        channel="whatsapp",
        account="1555",
        chat_id="4477",
        message_id="wamid.out1",
        dedup_key=f"whatsapp:wamid.out1:{state}:{code}",
        timestamp=NOW,
        state=state,
        errors=errors,
    )


def test_failed_status_131026_marks_the_reply_unreachable() -> None:
    events = (status(131026), status(131047), status(None, "delivered"))
    keys = frozenset(event.dedup_key for event in events)
    delivery = Delivery(1, "whatsapp", None, b"{}", keys, NOW)
    parsed = to_parsed(delivery, ParseResult(events=events), {("whatsapp", "1555"): "sales"})
    assert [s.unreachable for s in parsed.statuses] == [True, False, False]
    assert parsed.memberships == ()  # the store marks the session that sent the reply


async def test_failed_status_131026_of_a_message_not_sent_here_makes_no_session(
    tmp_path: Path,
) -> None:
    """Meta sends every app of the business account the statuses of every app's messages, and
    a deleted session may get a late status: an unknown wamid is nobody's session."""
    event = status(131026)
    delivery = Delivery(1, "whatsapp", None, b"{}", frozenset({event.dedup_key}), NOW)
    async with SQLiteStore(tmp_path / "gateway.db") as store:
        parsed = to_parsed(delivery, ParseResult(events=(event,)))
        await store.record_parsed(None, parsed, starting_agent="triage")
        assert await store.list_sessions() == []
