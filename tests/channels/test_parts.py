"""send_parts: the one place a multi-message reply skips delivered parts and reports them."""

from __future__ import annotations

import pytest

from webhook_bot_gateway.channels._errors import RetryableSendError
from webhook_bot_gateway.channels._parts import Part, send_parts


def recorder(sent: list[str], fail_at: str | None = None) -> list[Part]:
    def part(name: str) -> Part:
        async def send() -> str:
            if name == fail_at:
                raise RetryableSendError("test", "503")
            sent.append(name)
            return f"id-{name}"

        return send

    return [part(name) for name in ("a", "b", "c")]


async def test_send_parts_sends_every_part_in_order() -> None:
    sent: list[str] = []
    result = await send_parts(recorder(sent), skip=0)
    assert sent == ["a", "b", "c"]
    assert result.message_ids == ("id-a", "id-b", "id-c")


async def test_send_parts_failure_reports_what_this_try_delivered() -> None:
    sent: list[str] = []
    with pytest.raises(RetryableSendError) as caught:
        await send_parts(recorder(sent, fail_at="c"), skip=0)
    assert caught.value.sent_ids == ("id-a", "id-b")


async def test_send_parts_skips_the_parts_an_earlier_try_delivered() -> None:
    sent: list[str] = []
    result = await send_parts(recorder(sent), skip=2)
    assert sent == ["c"]
    assert result.message_ids == ("id-c",)
