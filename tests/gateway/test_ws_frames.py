"""``/ws`` client frames that JSON accepts but the gateway cannot take: one error each."""

from __future__ import annotations

import json

import pytest

from webhook_bot_gateway.gateway._web.frames import (
    CancelFrame,
    FrameError,
    MessageFrame,
    parse_frame,
)


def test_a_frame_nested_past_the_json_scanners_stack_is_json_too_deep() -> None:
    """json.loads raises RecursionError here (it escaped the handler and dropped the socket)."""
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(RecursionError):
        json.loads(deep)
    with pytest.raises(FrameError) as refused:
        parse_frame(deep)
    assert refused.value.code == "json_too_deep"


@pytest.mark.parametrize(
    ("text", "problem"),
    [("\\ud800", "must not hold a lone surrogate"), ("a\\u0000b", "must not hold a NUL character")],
    ids=["lone-surrogate", "nul"],
)
def test_message_text_the_store_cannot_hold_is_an_invalid_frame(text: str, problem: str) -> None:
    frame = '{"type": "message", "data": {"text": "' + text + '", "client_id": "c"}}'
    with pytest.raises(FrameError) as refused:
        parse_frame(frame)
    assert (refused.value.code, refused.value.message) == ("invalid_frame", f"data.text: {problem}")


@pytest.mark.parametrize(
    ("data", "client_id"),
    [
        ('{"text": "a\\u0000b", "client_id": "n1"}', "n1"),
        ('{"text": "hi", "client_id": "n2", "extra": 1}', "n2"),
        ('{"text": "hi", "client_id": "n3", "attachments": "x"}', "n3"),
        ('{"text": "hi", "client_id": "bad id!"}', None),  # not a client_id: none to name
        ('{"text": 5}', None),
    ],
)
def test_an_invalid_message_frame_names_its_client_id(data: str, client_id: str | None) -> None:
    """docs/web.md: an error carries the client_id when it is about a message."""
    with pytest.raises(FrameError) as refused:
        parse_frame('{"type": "message", "data": ' + data + "}")
    assert (refused.value.code, refused.value.client_id) == ("invalid_frame", client_id)


def test_an_attachment_listed_twice_in_a_message_is_attached_once() -> None:
    data = {"text": "two", "client_id": "c1", "attachments": ["b", "a", "b", "a", "c"]}
    frame = parse_frame(json.dumps({"type": "message", "data": data}))
    assert isinstance(frame, MessageFrame)
    assert frame.data.attachments == ("b", "a", "c")


@pytest.mark.parametrize(
    "frame",
    [
        '{"type": "cancel_turn"}',
        '{"type": "cancel_turn", "data": null}',
        '{"type": "cancel_turn", "data": {}}',
        '{"type": "cancel_turn", "data": {"reason": "changed my mind"}}',
    ],
    ids=["absent", "null", "empty", "ignored"],
)
def test_a_cancel_frame_takes_no_data_absent_null_or_an_object(frame: str) -> None:
    assert isinstance(parse_frame(frame), CancelFrame)


@pytest.mark.parametrize(
    "frame",
    [
        '{"type": "cancel_turn", "data": 5}',
        '{"type": "cancel_turn", "data": []}',
        '{"type": "cancel_turn", "data": "now"}',
        '{"type": "message", "data": null}',  # a message takes data
    ],
)
def test_a_data_that_is_neither_an_object_nor_a_cancels_null_is_an_invalid_frame(
    frame: str,
) -> None:
    with pytest.raises(FrameError) as refused:
        parse_frame(frame)
    assert refused.value.code == "invalid_frame"
    assert refused.value.message.startswith("data: ")


@pytest.mark.parametrize(
    ("frame", "constant"),
    [
        ('{"type": "cancel_turn", "data": {"x": NaN}}', "NaN"),
        ('{"type": "cancel_turn", "data": {"x": [Infinity]}}', "Infinity"),
        (
            '{"type": "message", "data": {"text": "x", "client_id": "c", "n": -Infinity}}',
            "-Infinity",
        ),
        ("NaN", "NaN"),
    ],
)
def test_nan_and_infinity_are_not_json(frame: str, constant: str) -> None:
    """Python's json reads them (json.loads("NaN") is nan); a frame holding one is invalid_json."""
    with pytest.raises(FrameError) as refused:
        parse_frame(frame)
    message = f"the frame is not JSON: {constant} is not a JSON value"
    assert (refused.value.code, refused.value.message) == ("invalid_json", message)
