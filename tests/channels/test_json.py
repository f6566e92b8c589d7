"""A platform's JSON read as text every store can hold: lone surrogates become U+FFFD."""

from __future__ import annotations

import json

import pytest

from webhook_bot_gateway.channels._json import load_json


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (rb'{"id": "wamid.\ud800x"}', {"id": "wamid.\ufffdx"}),
        (rb'{"t": "\uDC00"}', {"t": "\ufffd"}),
        (rb'{"\udbff": ["a\ud800", {"b": "\udfff"}]}', {"\ufffd": ["a\ufffd", {"b": "\ufffd"}]}),
        (rb'{"emoji": "\ud83d\ude00"}', {"emoji": "\U0001f600"}),  # a pair stays one character
        (rb'{"text": "\\ud800"}', {"text": "\\ud800"}),  # an escaped backslash, not an escape
        (rb'{"n": 1, "ok": true, "none": null}', {"n": 1, "ok": True, "none": None}),
    ],
)
def test_load_json_replaces_lone_surrogates_only(raw: bytes, expected: object) -> None:
    loaded = load_json(raw)
    assert loaded == expected
    json.dumps(loaded, ensure_ascii=False).encode("utf-8")  # storable as UTF-8


def test_load_json_reads_a_string_as_well() -> None:
    assert load_json('{"response": "\\ud800"}') == {"response": "\ufffd"}


@pytest.mark.parametrize("raw", [b"{", b"\xff\xfe", b"[" * 100_000])
def test_load_json_raises_as_json_loads_does(raw: bytes) -> None:
    with pytest.raises((ValueError, RecursionError)):
        load_json(raw)
