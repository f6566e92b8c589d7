"""A private chat's plain text is read without PTB's objects: the same event as PTB's path,
which still reads (and refuses) every other shape."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from telegram import Bot

from tests.channels.telegram_fakes import fixture_bytes, fixture_names
from webhook_bot_gateway.channels import ChannelError, ParseResult
from webhook_bot_gateway.channels._telegram import _parse
from webhook_bot_gateway.channels._telegram._parse import parse_update
from webhook_bot_gateway.channels._telegram._plain import plain_text

BOT = Bot("1:t")  # parsing makes no request
PRIVATE_TEXT = json.loads(fixture_bytes("01_private_text.json"))


def now() -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC)


def both_paths(body: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """What the parser gives with the plain path and without it (PTB's path alone): a
    ParseResult, or the ChannelError's reason."""

    def parse() -> Any:
        try:
            return parse_update(body, "support", BOT, now)
        except ChannelError as exc:
            return exc.reason

    fast = parse()
    with monkeypatch.context() as patched:
        patched.setattr(_parse, "plain_text", lambda data, common: None)
        slow = parse()
    return fast, slow


def test_the_commonest_update_takes_the_plain_path() -> None:
    event = plain_text(PRIVATE_TEXT, {"channel": "telegram", "account": "a", "dedup_key": "k"})
    assert event is not None
    assert (event.chat_id, event.sender_id, event.sender_name) == (
        "123456789",
        "123456789",
        "Alice Example",
    )


@pytest.mark.parametrize("name", fixture_names())
def test_every_fixture_parses_the_same_on_both_paths(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, slow = both_paths(fixture_bytes(name), monkeypatch)
    assert fast == slow


names = st.text(max_size=12)
numbers = st.integers(min_value=-(2**63), max_value=2**63) | st.booleans()


def put(*path: str) -> Callable[[dict[str, Any], Any], None]:
    """Set (or, given ``DROP``, remove) the value at ``path``, when its parent is an object."""

    def change(message: dict[str, Any], value: Any) -> None:
        *parents, key = path
        target: Any = message
        for parent in parents:
            target = target.get(parent) if isinstance(target, dict) else None
        if not isinstance(target, dict):
            return
        if value is DROP:
            target.pop(key, None)
        else:
            target[key] = copy.deepcopy(value)  # sampled objects are shared between examples

    return change


DROP = object()
SHAPES = [
    put("text"),
    put("message_id"),
    put("date"),
    put("from", "id"),
    put("from", "first_name"),
    put("from", "last_name"),
    put("chat", "id"),
    put("chat", "type"),
    put("entities"),
    put("from"),
]
values = (
    names
    | numbers
    | st.none()
    | st.sampled_from(["private", "group", "supergroup", "channel", [], {}, 1e300, 2**70])
    | st.lists(st.fixed_dictionaries({"type": names, "offset": numbers, "length": numbers}))
    | st.just(DROP)
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(SHAPES) - 1), values), max_size=3))
def test_varied_private_texts_parse_the_same_on_both_paths(
    changes: list[tuple[int, Any]],
) -> None:
    message = copy.deepcopy(PRIVATE_TEXT)
    for shape, value in changes:
        SHAPES[shape](message["message"], value)
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, slow = both_paths(json.dumps(message).encode(), monkeypatch)
    assert fast == slow
    if isinstance(fast, ParseResult) and fast.events:
        assert fast.events[0].kind in ("text", "command", "unsupported")
