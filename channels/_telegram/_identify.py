"""Who each bot is: ``getMe``, and ``getMe`` again in the background for as long as it fails."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

log = logging.getLogger("channels.telegram")

# Seconds before each new round of getMe while one fails: growing, then every 30 s for as long
# as the process runs (a bot whose username is unknown cannot tell whom /cmd@name is for).
RETRY_DELAYS: Sequence[float] = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)

Sleep = Callable[[float], Awaitable[None]]
# One getMe per bot still unknown: the reasons of the failures, by bot; empty once all are known.
Round = Callable[[], Awaitable[Mapping[str, str]]]


def retry_delay(rounds: int) -> float:
    """The pause before the retry that follows ``rounds`` failed retries."""
    return RETRY_DELAYS[min(rounds, len(RETRY_DELAYS) - 1)]


async def retry(attempt: Round, sleep: Sleep | None = None) -> int:
    """Run ``attempt`` after each pause of ``RETRY_DELAYS`` (its last one repeated) until it
    fails no more; each failure again is logged at DEBUG only. Returns the rounds it took."""
    pause = sleep or asyncio.sleep
    rounds = 0
    while True:
        await pause(retry_delay(rounds))
        failures = await attempt()
        rounds += 1
        if not failures:
            return rounds
        for bot, reason in failures.items():
            log.debug(
                "bot %s: getMe failed again (%s); next try in %g s",
                bot,
                reason,
                retry_delay(rounds),
            )


def unidentified(bot: str, reason: str, *, again: bool) -> None:
    """The one warning of a bot whose getMe failed (``again``: it is asked again later)."""
    then = (
        "until it answers (asked again in the background)" if again else "until it is asked again"
    )
    log.warning(
        "bot %s: getMe failed (%s); %s, messages that name a bot (/cmd@name, group"
        " @mentions) are quarantined, to be replayed once it has",
        bot,
        reason,
        then,
    )


def identified(bot: str, username: str | None) -> None:
    log.info("bot %s: getMe answered: @%s", bot, username)
