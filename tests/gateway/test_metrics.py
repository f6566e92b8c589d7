"""The metrics of one application: declared series, bounded label values, the exposition."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

from webhook_bot_gateway.gateway._metrics import (
    ACK_SECONDS,
    BACKLOG,
    HANDOFFS,
    IGNORED,
    OPEN_LABEL_LIMIT,
    REJECTED,
    SERIES,
    Metrics,
)

TYPES = {Counter: "counter", Gauge: "gauge", Histogram: "histogram"}


def parsed(metrics: Metrics) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of the exposition, by sample name, as a scraper reads it."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def test_counters_count_per_label_set_and_parse_back() -> None:
    metrics = Metrics()
    metrics.inc(REJECTED, channel="telegram", reason="bad_secret_token")
    metrics.inc(REJECTED, channel="telegram", reason="bad_secret_token")
    metrics.inc(REJECTED, channel="whatsapp", reason="bad_signature")
    assert sorted(parsed(metrics)[REJECTED], key=repr) == [
        ({"channel": "telegram", "reason": "bad_secret_token"}, 2.0),
        ({"channel": "whatsapp", "reason": "bad_signature"}, 1.0),
    ]
    assert metrics.value(REJECTED, channel="telegram") == 2  # a subset of the labels: the sum
    assert metrics.value(REJECTED) == 3


def test_every_declared_series_is_exposed_with_its_type_before_any_value() -> None:
    families = {
        family.name: family.type
        for family in text_string_to_metric_families(Metrics().render().decode())
    }
    for name, series in SERIES.items():
        family = name.removesuffix("_total")  # the parser names a counter's family without it
        assert families.get(family) == TYPES[series.kind], name


def test_histograms_count_and_sum_their_observations() -> None:
    metrics = Metrics()
    for seconds in (0.002, 0.004, 0.3):
        metrics.observe(ACK_SECONDS, seconds, channel="whatsapp")
    samples = parsed(metrics)
    assert samples[f"{ACK_SECONDS}_count"] == [({"channel": "whatsapp"}, 3.0)]
    [(_, total)] = samples[f"{ACK_SECONDS}_sum"]
    assert abs(total - 0.306) < 1e-9
    buckets = {labels["le"]: count for labels, count in samples[f"{ACK_SECONDS}_bucket"]}
    assert (buckets["0.0025"], buckets["0.005"], buckets["0.25"], buckets["+Inf"]) == (1, 2, 2, 3)


def test_each_application_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.inc(REJECTED, channel="telegram", reason="unknown_bot")
    assert first.value(REJECTED) == 1
    assert second.value(REJECTED) == 0


def test_a_channel_outside_the_known_ones_is_counted_as_other() -> None:
    metrics = Metrics()
    metrics.inc(REJECTED, channel="telegram\nx", reason="unknown_channel")
    metrics.inc(REJECTED, channel="nowhere", reason="unknown_channel")
    assert parsed(metrics)[REJECTED] == [({"channel": "other", "reason": "unknown_channel"}, 2.0)]


def test_only_configured_agent_names_become_label_values() -> None:
    metrics = Metrics()
    metrics.allow_agents(["triage", "human"])
    metrics.inc(HANDOFFS, from_agent="triage", to_agent="human", reason="operator")
    metrics.inc(HANDOFFS, from_agent="renamed-long-ago", to_agent="human", reason="operator")
    assert sorted(parsed(metrics)[HANDOFFS], key=repr) == [
        ({"from_agent": "other", "to_agent": "human", "reason": "operator"}, 1.0),
        ({"from_agent": "triage", "to_agent": "human", "reason": "operator"}, 1.0),
    ]


def test_update_types_from_bodies_are_shape_checked_and_capped() -> None:
    metrics = Metrics()
    metrics.inc(IGNORED, channel="whatsapp", type="field:account_update")
    metrics.inc(IGNORED, channel="whatsapp", type='field:"quoted" …')
    for n in range(OPEN_LABEL_LIMIT + 10):
        metrics.inc(IGNORED, channel="telegram", type=f"kind_{n}")
    types = {labels["type"] for labels, _ in parsed(metrics)[IGNORED]}
    assert "field:account_update" in types
    assert len(types) == OPEN_LABEL_LIMIT + 1  # the cap, plus "other"
    assert metrics.value(IGNORED, type="other") == 1 + 11  # the odd shape, then past the cap
    metrics.inc(IGNORED, channel="whatsapp", type="field:account_update")
    assert metrics.value(IGNORED, type="field:account_update") == 2  # a known one stays


def test_a_gauge_function_is_read_at_each_scrape() -> None:
    metrics, backlog = Metrics(), [3]
    metrics.set_function(BACKLOG, lambda: backlog[0])
    assert parsed(metrics)[BACKLOG] == [({}, 3.0)]
    backlog[0] = 0
    assert parsed(metrics)[BACKLOG] == [({}, 0.0)]


def test_process_metrics_are_on_the_applications_registry() -> None:
    samples = parsed(Metrics())
    assert samples["process_resident_memory_bytes"][0][1] > 0
    assert samples["process_cpu_seconds_total"][0][1] > 0
    assert "python_info" in samples
