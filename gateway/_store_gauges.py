"""Gauges read from the store: inbox and outbox rows that wait or are dead, busy sessions.

They are read when /metrics is scraped, at most once per ``TTL_SECONDS`` (one statement of
index ranges: ``store.pipeline_counts``), so a gateway nobody scrapes pays nothing and one
scraped often pays once per TTL. Scrapes that come together share one read. A scrape waits at
most ``READ_TIMEOUT_SECONDS`` for it; past that, or when the read fails, it shows the last values
read and ``gateway_store_errors_total{component="metrics"}`` grows, so a slow or broken store
never holds a scrape for long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from webhook_bot_gateway.store import PipelineCounts, Store

from ._metrics import CHANNELS, OTHER, STORE_ERRORS, Metrics

log = logging.getLogger("gateway.metrics")

TTL_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 1.0
INBOX_STATES = ("pending", "dead")
OUTBOX_STATES = ("pending", "dead")
SESSION_STATUSES = ("running", "interrupted")
INBOX_ROWS = "gateway_inbox_rows"
OUTBOX_ROWS = "gateway_outbox_rows"
SESSIONS = "gateway_sessions"


class StoreGauges:
    """A prometheus-client collector of the store's counts, refreshed by ``refresh()``."""

    def __init__(
        self,
        store: Store,
        metrics: Metrics,
        channels: Iterable[str],
        *,
        clock: Callable[[], float] = time.monotonic,
        ttl: float = TTL_SECONDS,
        timeout: float = READ_TIMEOUT_SECONDS,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._channels = sorted(set(channels) & CHANNELS)
        self._clock = clock
        self._ttl = ttl
        self._timeout = timeout
        self._counts = PipelineCounts()
        self._read_at: float | None = None
        self._reading: asyncio.Task[None] | None = None

    async def refresh(self) -> None:
        """Read the counts again if the last read is older than the TTL (bounded wait)."""
        if self._read_at is not None and self._clock() - self._read_at < self._ttl:
            return
        if self._reading is None or self._reading.done():
            self._reading = asyncio.create_task(self._read(), name="store-gauges")
        try:
            await asyncio.wait_for(asyncio.shield(self._reading), self._timeout)
        except TimeoutError:
            self._metrics.inc(STORE_ERRORS, component="metrics")
            log.warning("store counts took over %g s: /metrics shows the last ones", self._timeout)

    async def aclose(self) -> None:
        """Stop a read still under way (shutdown)."""
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reading

    async def _read(self) -> None:
        try:
            counts = await self._store.pipeline_counts()
        except Exception as exc:  # whatever the store raised: keep the last values, say so
            self._metrics.inc(STORE_ERRORS, component="metrics")
            log.warning("store counts for /metrics failed: %s", type(exc).__name__)
            return
        self._counts, self._read_at = counts, self._clock()

    def collect(self) -> Iterator[Metric]:
        """The three gauge families, every known label set present (0 when no row)."""
        counts = self._counts
        inbox = GaugeMetricFamily(
            INBOX_ROWS, "Inbox rows by state: pending (to answer) and dead.", labels=["state"]
        )
        for state in INBOX_STATES:
            inbox.add_metric([state], counts.inbox.get(state, 0))
        yield inbox
        yield self._outbox(counts)
        sessions = GaugeMetricFamily(
            SESSIONS, "Sessions running a turn, or interrupted by a stop.", labels=["status"]
        )
        for status in SESSION_STATUSES:
            sessions.add_metric([status], counts.sessions.get(status, 0))
        yield sessions

    def _outbox(self, counts: PipelineCounts) -> GaugeMetricFamily:
        by_label = {(channel, state): 0 for channel in self._channels for state in OUTBOX_STATES}
        for (channel, state), count in counts.outbox.items():
            key = (channel if channel in CHANNELS else OTHER, state)
            by_label[key] = by_label.get(key, 0) + count
        family = GaugeMetricFamily(
            OUTBOX_ROWS,
            "Outbox rows (replies) by channel and state: pending (to send) and dead.",
            labels=["channel", "state"],
        )
        for (channel, state), count in sorted(by_label.items()):
            family.add_metric([channel, state], count)
        return family
