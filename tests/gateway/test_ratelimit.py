"""Token buckets and the per-chat / per-account limiter, on a fake clock."""

from __future__ import annotations

import pytest

from webhook_bot_gateway.gateway._pipeline._ratelimit import Buckets, RateLimiter, TokenBucket


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def drain(limiter: RateLimiter, chat: str, *, account: str = "bot", channel: str = "tg") -> int:
    """Take tokens for ``chat`` while one is free now; return how many went."""
    sent = 0
    while limiter.wait(channel, account, chat) == 0:
        limiter.take(channel, account, chat)
        sent += 1
    return sent


def test_token_bucket_starts_full_and_allows_a_burst() -> None:
    bucket = TokenBucket.full(rate=1.0, burst=3, now=0.0)
    for _ in range(3):
        assert bucket.wait(0.0) == 0
        bucket.take(0.0)
    assert bucket.wait(0.0) == pytest.approx(1.0)


def test_token_bucket_refills_at_its_rate() -> None:
    bucket = TokenBucket.full(rate=2.0, burst=1, now=0.0)
    bucket.take(0.0)
    assert bucket.wait(0.25) == pytest.approx(0.25)
    assert bucket.wait(0.5) == 0
    bucket.take(0.5)
    assert bucket.wait(0.5) == pytest.approx(0.5)


def test_token_bucket_never_saves_more_than_its_burst() -> None:
    bucket = TokenBucket.full(rate=10.0, burst=2, now=0.0)
    assert bucket.wait(3600.0) == 0
    bucket.take(3600.0)
    bucket.take(3600.0)
    assert bucket.wait(3600.0) == pytest.approx(0.1)


def test_token_bucket_takes_back_a_token_up_to_its_burst() -> None:
    bucket = TokenBucket.full(rate=1.0, burst=2, now=0.0)
    bucket.take(0.0)
    bucket.take(0.0)
    bucket.give_back(0.0)
    assert bucket.wait(0.0) == 0
    bucket.give_back(0.0)
    bucket.give_back(0.0)  # already full: nothing more is saved
    bucket.take(0.0)
    bucket.take(0.0)
    assert bucket.wait(0.0) == pytest.approx(1.0)


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_token_bucket_refuses_a_rate_or_burst_that_cannot_send(rate: float, burst: int) -> None:
    with pytest.raises(ValueError):
        TokenBucket.full(rate, burst, 0.0)


def test_rate_limiter_paces_one_chat_without_slowing_another() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock)
    limiter.configure("tg", chat_rate=1.0, account_rate=30.0, burst=3)
    assert drain(limiter, "chat-a") == 3
    assert limiter.wait("tg", "bot", "chat-a") == pytest.approx(1.0)
    assert drain(limiter, "chat-b") == 3  # another chat of the same bot is not held back
    clock.now += 1.0
    assert drain(limiter, "chat-a") == 1


def test_rate_limiter_caps_an_account_over_all_its_chats() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock)
    limiter.configure("tg", chat_rate=1.0, account_rate=5.0, burst=1)
    sent = sum(drain(limiter, f"chat-{n}") for n in range(20))
    assert sent == 5
    assert limiter.wait("tg", "bot", "chat-99") == pytest.approx(0.2)
    assert drain(limiter, "chat-99", account="other-bot") == 1  # accounts are separate
    clock.now += 0.2
    assert drain(limiter, "chat-99") == 1


def test_rate_limiter_leaves_an_unconfigured_channel_unlimited() -> None:
    limiter = RateLimiter(FakeClock())
    for _ in range(1000):
        assert limiter.wait("web", "x", "y") == 0
        limiter.take("web", "x", "y")


def test_buckets_forget_refilled_buckets_when_full_of_keys() -> None:
    buckets = Buckets(rate=1.0, burst=1, max_keys=2)
    buckets.get("a", 0.0).take(0.0)
    buckets.get("b", 0.0).take(0.0)
    busy = buckets.get("c", 0.5)  # a and b are still empty: kept, so c makes three
    busy.take(0.5)
    assert buckets.get("a", 0.5).wait(0.5) == pytest.approx(0.5)  # remembered, still paced
    buckets.get("d", 10.0)  # everything refilled by now: forgotten, memory stays bounded
    assert len(buckets._buckets) == 1


def test_rate_limiter_holds_a_group_to_its_rate_per_minute_and_a_private_chat_not() -> None:
    """Telegram takes at most 20 messages a minute in one group: a busy group bot's replies at
    the chat's 1 a second were refused with 429 and used up their tries."""
    clock = FakeClock()
    limiter = RateLimiter(clock)
    limiter.configure("tg", chat_rate=1.0, account_rate=30.0, burst=3, group_rate=20 / 60)
    sent = {"-1001234": 0, "42": 0}
    for _ in range(60):  # one minute, a second at a time
        for chat in sent:
            sent[chat] += drain(limiter, chat)
        clock.now += 1.0
    assert sent["-1001234"] == 3 + 20 - 1  # the burst, then one every 3 s
    assert sent["42"] == 3 + 59  # a private chat: the chat's own 1 a second
    assert limiter.available("tg", "bot", "-1001234", 10) == 1
