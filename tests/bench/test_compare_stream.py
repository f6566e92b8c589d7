"""The stream every side of the comparison gets: increasing ids, 30% sent again, real bodies."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from bench.compare import stream


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_originals_increase_and_exactly_30_percent_repeat_a_recent_one(seed: int) -> None:
    numbers = stream.originals(10_000, seed)
    fresh, repeats = -1, 0
    for number in numbers:
        if number > fresh:
            assert number == fresh + 1  # originals come in order, none skipped
            fresh = number
        else:
            repeats += 1
            assert fresh - number < stream.RECENT  # a retry follows its original closely
    assert repeats == 3000
    assert numbers[0] == 0


def test_originals_are_the_same_for_the_same_seed() -> None:
    assert stream.originals(500, 4) == stream.originals(500, 4)
    assert stream.originals(500, 4) != stream.originals(500, 5)


def test_duplicates_counts_what_a_handler_got_beyond_one_per_key() -> None:
    assert stream.duplicates([]) == 0
    assert stream.duplicates([1, 2, 3]) == 0
    assert stream.duplicates([1, 2, 1, 1, 3, 2]) == 3
    assert stream.duplicates(stream.originals(1000, 2)) == 300


def test_a_repeated_delivery_is_the_very_bytes_of_its_original() -> None:
    numbers = [0, 1, 0, 2, 1]
    for platform in ("telegram", "whatsapp"):
        built = stream.requests(platform, numbers, first=50)
        assert built[0] == built[2]
        assert built[1] == built[4]
        assert len(set(built)) == 3


def test_telegram_updates_carry_increasing_update_ids_and_countable_texts() -> None:
    updates = [json.loads(stream.telegram_update(n, first=100)) for n in range(5)]
    ids = [u["update_id"] for u in updates]
    assert ids == sorted(ids)
    assert len(set(ids)) == 5
    assert [stream.number_of(u["message"]["text"]) for u in updates] == [100, 101, 102, 103, 104]


def test_whatsapp_requests_are_signed_over_the_exact_body() -> None:
    raw = stream.requests("whatsapp", [3], first=0)[0]
    head, body = raw.split(b"\r\n\r\n", 1)
    assert f"Content-Length: {len(body)}".encode() in head
    expected = hmac.new(stream.WHATSAPP_SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert f"X-Hub-Signature-256: sha256={expected}".encode() in head
    message = json.loads(body)["entry"][0]["changes"][0]["value"]["messages"][0]
    assert stream.number_of(message["text"]["body"]) == 3
