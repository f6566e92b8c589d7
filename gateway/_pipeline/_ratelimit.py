"""Token buckets: per chat and per account, on an injectable clock, so tests need no sleeping."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

Clock = Callable[[], float]


@dataclass(slots=True)
class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; starts full."""

    rate: float
    burst: float
    tokens: float
    updated: float

    @classmethod
    def full(cls, rate: float, burst: float, now: float) -> TokenBucket:
        """A bucket holding ``burst`` tokens at ``now``."""
        if rate <= 0 or burst < 1:
            raise ValueError(f"need rate > 0 and burst >= 1, got {rate}, {burst}")
        return cls(rate, burst, burst, now)

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def wait(self, now: float) -> float:
        """Seconds until one token is available (0.0 when one is there now)."""
        self._refill(now)
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate

    def available(self, now: float) -> int:
        """Whole tokens there now: the messages that may go at once."""
        self._refill(now)
        return int(self.tokens + 1e-9)  # float rounding may leave a token a hair short

    def take(self, now: float) -> None:
        """Spend one token (call only when ``wait(now)`` is 0; a later ``take`` of a message
        sent beyond the tokens there, a split reply's parts, leaves the bucket in debt)."""
        self._refill(now)
        self.tokens -= 1

    def give_back(self, now: float) -> None:
        """Return a token spent on a message that did not go (never above ``burst``)."""
        self._refill(now)
        self.tokens = min(self.burst, self.tokens + 1)


class Buckets:
    """One bucket per key, created full on first use; idle full buckets are forgotten."""

    def __init__(self, rate: float, burst: float, *, max_keys: int = 100_000) -> None:
        TokenBucket.full(rate, burst, 0.0)  # validates
        self._rate = rate
        self._burst = burst
        self._max_keys = max_keys
        self._buckets: dict[Hashable, TokenBucket] = {}

    def get(self, key: Hashable, now: float) -> TokenBucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self._max_keys:
                self._forget_full(now)
            bucket = self._buckets[key] = TokenBucket.full(self._rate, self._burst, now)
        return bucket

    def _forget_full(self, now: float) -> None:
        """A bucket that has refilled is the same as a new one: drop those to bound memory."""
        full = [key for key, b in self._buckets.items() if b.wait(now) == 0 and b.tokens >= b.burst]
        for key in full:
            del self._buckets[key]


class RateLimiter:
    """Per chat and per account limits: a message goes when both buckets have a token."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._chats: dict[str, Buckets] = {}
        self._accounts: dict[str, Buckets] = {}
        self._groups: dict[str, Buckets] = {}  # a further limit of group chats (Telegram's)

    def configure(
        self,
        channel: str,
        *,
        chat_rate: float,
        account_rate: float,
        burst: float,
        group_rate: float | None = None,
    ) -> None:
        """Set the limits of ``channel``; a channel never configured is not limited. With a
        ``group_rate``, a group chat (a negative chat id, as Telegram gives groups) is held to
        that rate too."""
        self._chats[channel] = Buckets(chat_rate, burst)
        # An account's burst is one second's worth: its limit is a rate over the whole second.
        self._accounts[channel] = Buckets(account_rate, max(account_rate, 1.0))
        if group_rate is not None:
            self._groups[channel] = Buckets(group_rate, burst)

    def wait(self, channel: str, account: str, chat_id: str) -> float:
        """Seconds until a message to this chat may go (0.0: now)."""
        now = self._clock()
        return max((b.wait(now) for b in self._pair(channel, account, chat_id)), default=0.0)

    def available(self, channel: str, account: str, chat_id: str, most: int) -> int:
        """How many messages may go to this chat now, at most ``most`` (``most`` when the
        channel is not limited)."""
        now = self._clock()
        return min([most, *(b.available(now) for b in self._pair(channel, account, chat_id))])

    def take(self, channel: str, account: str, chat_id: str, count: int = 1) -> None:
        """Spend ``count`` tokens of the chat and as many of the account."""
        now = self._clock()
        for bucket in self._pair(channel, account, chat_id):
            for _ in range(count):
                bucket.take(now)

    def give_back(self, channel: str, account: str, chat_id: str) -> None:
        """Return the tokens ``take`` spent on a message that did not go after all."""
        now = self._clock()
        for bucket in self._pair(channel, account, chat_id):
            bucket.give_back(now)

    def _pair(self, channel: str, account: str, chat_id: str) -> list[TokenBucket]:
        now = self._clock()
        chats, accounts = self._chats.get(channel), self._accounts.get(channel)
        if chats is None or accounts is None:
            return []
        pair = [chats.get((account, chat_id), now), accounts.get(account, now)]
        groups = self._groups.get(channel)
        if groups is not None and chat_id.startswith("-"):
            pair.append(groups.get((account, chat_id), now))
        return pair
