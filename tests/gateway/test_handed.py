"""HandedDeliveries: the intake trusts the hand-offs only while they are all that waits."""

from __future__ import annotations

from datetime import UTC, datetime

from webhook_bot_gateway.gateway._pipeline._handed import HandedDeliveries
from webhook_bot_gateway.store import Delivery


def delivery(n: int) -> Delivery:
    return Delivery(n, "whatsapp", None, b"{}", frozenset({f"k{n}"}), datetime.now(UTC))


def ids(deliveries: list[Delivery] | None) -> list[int] | None:
    return None if deliveries is None else [d.id for d in deliveries]


def test_nothing_is_trusted_before_a_read() -> None:
    handed = HandedDeliveries()
    handed.hand([delivery(1)])
    assert handed.take(10) is None


def test_after_a_read_that_found_all_the_hand_offs_are_taken_in_order() -> None:
    handed = HandedDeliveries()
    handed.after_read([delivery(1)], 10, handed.before_read())
    handed.hand([delivery(1), delivery(2)])  # 1 was committed before the read, handed after
    handed.hand([delivery(3)])
    assert ids(handed.take(2)) == [2, 3]
    assert ids(handed.take(2)) == []


def test_a_full_read_leaves_the_rest_to_the_next_read() -> None:
    handed = HandedDeliveries()
    handed.after_read([delivery(1), delivery(2)], 2, handed.before_read())
    handed.hand([delivery(3)])
    assert handed.take(10) is None


def test_a_hand_off_during_the_read_makes_it_read_again() -> None:
    """The read may have missed it, and it was not held: only another read finds it."""
    handed = HandedDeliveries()
    mark = handed.before_read()
    handed.hand([delivery(5)])
    handed.after_read([], 10, mark)
    assert handed.take(10) is None


def test_past_the_bound_and_after_an_error_the_store_is_read() -> None:
    handed = HandedDeliveries(bound=2)
    handed.after_read([], 10, handed.before_read())
    handed.hand([delivery(1), delivery(2), delivery(3)])
    assert handed.take(10) is None
    handed.after_read([], 10, handed.before_read())
    handed.hand([delivery(4)])
    handed.forget()
    assert handed.take(10) is None
