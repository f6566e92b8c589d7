"""The gateway's metrics: one prometheus-client registry per application, every series declared.

Call sites name a series and give its labels (``metrics.inc(RECEIVED, channel="telegram")``);
the table below fixes each series' type, help text and label names, so /metrics shows every
family with its HELP and TYPE from the first scrape. Label values stay bounded: a channel
outside the known ones, an agent outside the configured ones, or an update type of an odd shape
or past ``OPEN_LABEL_LIMIT`` distinct values is counted as ``other`` (a series per value a
request could choose would let any sender grow the scrape without limit).
docs/operations.md lists every series with its meaning and the alerts worth setting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.registry import Collector

# The ``*_created`` twin of every counter and histogram holds a start time nobody alerts on;
# it would double the scrape. (A process-wide switch of prometheus-client: this is its only user.)
disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus-client

OTHER = "other"  # the value every label outside its bounded set becomes
CHANNELS = frozenset({"telegram", "whatsapp", "web"})
AGENT_LABELS = frozenset({"agent", "from_agent", "to_agent"})
OPEN_LABELS = frozenset({"type"})  # values a platform's body names: shape-checked and capped
OPEN_LABEL_SHAPE = re.compile(r"[a-z][a-z0-9_:]{0,47}")
OPEN_LABEL_LIMIT = 64  # distinct values kept per open label; later new ones are ``other``

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
TURN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)

# names used by more than one module
RECEIVED = "gateway_webhooks_received_total"
ACCEPTED = "gateway_webhooks_accepted_total"
DUPLICATE = "gateway_webhooks_duplicate_total"
REJECTED = "gateway_webhooks_rejected_total"
QUARANTINED = "gateway_webhooks_quarantined_total"
IGNORED = "gateway_updates_ignored_total"
TEMPLATE_UPDATES = "gateway_whatsapp_template_updates_total"
DELIVERY_FAILURES = "gateway_delivery_failures_total"
TURNS = "gateway_turns_total"
CANCELS = "gateway_cancels_total"
OUTBOX = "gateway_outbox_total"
ACK_SECONDS = "gateway_webhook_ack_seconds"
TURN_SECONDS = "gateway_turn_seconds"
MODEL_SECONDS = "gateway_model_call_seconds"
SEND_SECONDS = "gateway_send_seconds"
BATCH_SIZE = "gateway_ingest_batch_size"
HANDOFFS = "gateway_handoffs_total"
RATE_LIMIT_WAITS = "gateway_rate_limit_waits_total"
STORE_ERRORS = "gateway_store_errors_total"
BACKLOG = "gateway_backlog"
TURNS_IN_FLIGHT = "gateway_turns_in_flight"
PACED_RATE = "gateway_pipeline_paced_rate"


@dataclass(frozen=True, slots=True)
class Series:
    """One declared metric family."""

    kind: type[Counter] | type[Gauge] | type[Histogram]
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


SERIES: dict[str, Series] = {
    RECEIVED: Series(Counter, "Webhook requests received, by channel.", ("channel",)),
    ACCEPTED: Series(Counter, "Deliveries durably recorded, by channel.", ("channel",)),
    DUPLICATE: Series(
        Counter, "Deliveries whose every key was seen before, by channel.", ("channel",)
    ),
    REJECTED: Series(
        Counter, "Webhook requests refused, by channel and reason.", ("channel", "reason")
    ),
    QUARANTINED: Series(
        Counter, "Authenticated deliveries (or parts) that could not be parsed.", ("channel",)
    ),
    TEMPLATE_UPDATES: Series(
        Counter,
        "WhatsApp template status and quality webhooks, by field and new status or quality.",
        ("field", "state"),
    ),
    DELIVERY_FAILURES: Series(
        Counter,
        "Replies a platform accepted and later reported as not delivered (a failed status),"
        " by channel and the platform's error code.",
        ("channel", "code"),
    ),
    IGNORED: Series(
        Counter,
        "Updates acknowledged but not handled, by channel and type (none: nothing to key).",
        ("channel", "type"),
    ),
    TURNS: Series(
        Counter,
        "Turns by outcome (committed, cancelled_by_user, failed, dead, cancelled, deleted,"
        " taken_over).",
        ("outcome",),
    ),
    CANCELS: Series(
        Counter,
        "Cancels of a running turn (API or /ws) by outcome (taken, relayed, refused, unanswered).",
        ("outcome",),
    ),
    OUTBOX: Series(
        Counter,
        "Send attempts of replies by outcome (sent, retried, failed, dead, uncertain, parked).",
        ("channel", "outcome"),
    ),
    "gateway_media_downloads_total": Series(
        Counter, "Platform media downloads by channel and outcome.", ("channel", "outcome")
    ),
    "gateway_ws_frames_total": Series(
        Counter, "Web chat client frames by outcome (ok or the error code).", ("outcome",)
    ),
    "gateway_ws_connections_total": Series(
        Counter, "Web chat connections by outcome (attached or the error code).", ("outcome",)
    ),
    HANDOFFS: Series(
        Counter,
        "Changes of a session's agent, by agent before and after and reason"
        " (handoff: a model's; operator: the admin API; dead_letter: after max_attempts).",
        ("from_agent", "to_agent", "reason"),
    ),
    RATE_LIMIT_WAITS: Series(
        Counter,
        "Replies that had to wait for the gateway's own rate limits before their send.",
        ("channel",),
    ),
    STORE_ERRORS: Series(
        Counter, "Store operations that failed, by the part of the gateway.", ("component",)
    ),
    ACK_SECONDS: Series(
        Histogram,
        "Seconds from a webhook request's arrival to its 200, by channel.",
        ("channel",),
        LATENCY_BUCKETS,
    ),
    TURN_SECONDS: Series(
        Histogram,
        "Seconds a committed turn took, by the agent it started with.",
        ("agent",),
        TURN_BUCKETS,
    ),
    MODEL_SECONDS: Series(
        Histogram,
        "Seconds of one model call (retries included), by configured model and outcome.",
        ("model", "outcome"),
        TURN_BUCKETS,
    ),
    SEND_SECONDS: Series(
        Histogram,
        "Seconds of one send attempt to a platform (every part of a split reply), by channel.",
        ("channel",),
        LATENCY_BUCKETS,
    ),
    BATCH_SIZE: Series(
        Histogram, "Items (deliveries, quarantined bodies) per group commit.", (), BATCH_BUCKETS
    ),
    BACKLOG: Series(
        Gauge, "Messages acknowledged and not yet answered (stored deliveries, pending inbox rows)."
    ),
    TURNS_IN_FLIGHT: Series(Gauge, "Turns running in this process now."),
    PACED_RATE: Series(
        Gauge, "Acks first: new deliveries and turns admitted per second while paced; 0: unpaced."
    ),
}

Child = Counter | Gauge | Histogram


class Metrics:
    """The series of one application, on its own registry (tests build many apps per process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._families = {name: _family(name, s, self.registry) for name, s in SERIES.items()}
        self._children: dict[tuple[object, ...], Child] = {}
        self._agents: frozenset[str] = frozenset()
        self._open_seen: set[str] = set()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)

    def allow_agents(self, names: Iterable[str]) -> None:
        """Agent names that may be label values (the configured ones); others are ``other``."""
        self._agents = self._agents | frozenset(names)

    def inc(self, name: str, amount: float = 1, **labels: str) -> None:
        """Add to a counter."""
        cast(Counter, self._child(name, labels)).inc(amount)

    def observe(self, name: str, value: float, **labels: str) -> None:
        """Record one value in a histogram."""
        cast(Histogram, self._child(name, labels)).observe(value)

    def set_function(self, name: str, read: Callable[[], float]) -> None:
        """Read an unlabelled gauge from ``read`` at every scrape (cheap, in-memory values)."""
        family = self._families[name]
        assert isinstance(family, Gauge), name
        family.set_function(read)

    def register(self, collector: Collector) -> None:
        """Add a collector of its own (gauges read from the store)."""
        self.registry.register(collector)

    def value(self, name: str, **labels: str) -> float:
        """The sum of the series' samples whose labels include ``labels`` (tests, benchmarks)."""
        total = 0.0
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.name == name and labels.items() <= sample.labels.items():
                    total += sample.value
        return total

    def render(self) -> bytes:
        """The Prometheus text exposition of every series."""
        return generate_latest(self.registry)

    def _child(self, name: str, labels: dict[str, str]) -> Child:
        key = (name, *labels.items())  # the hot path: one dict lookup for a series seen before
        child = self._children.get(key)
        return self._new_child(name, labels, key) if child is None else child

    def _new_child(self, name: str, labels: dict[str, str], key: tuple[object, ...]) -> Child:
        bounded = {label: self._bounded(label, value) for label, value in labels.items()}
        family = self._families[name]
        child = family.labels(**bounded) if bounded else family
        if bounded == labels:  # only accepted values become keys: the cache stays bounded too
            self._children[key] = child
        return child

    def _bounded(self, label: str, value: str) -> str:
        if label == "channel":
            return value if value in CHANNELS else OTHER
        if label in AGENT_LABELS:
            return value if value in self._agents else OTHER
        if label in OPEN_LABELS:
            return self._open(value)
        return value  # the gateway's own constants: outcomes, reasons, error codes

    def _open(self, value: str) -> str:
        if value in self._open_seen:
            return value
        if len(self._open_seen) >= OPEN_LABEL_LIMIT or not OPEN_LABEL_SHAPE.fullmatch(value):
            return OTHER
        self._open_seen.add(value)
        return value


def _family(name: str, series: Series, registry: CollectorRegistry) -> Child:
    if series.kind is Histogram:
        return Histogram(
            name, series.help, series.labels, registry=registry, buckets=series.buckets
        )
    return series.kind(name, series.help, series.labels, registry=registry)
