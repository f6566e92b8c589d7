"""The /metrics counters and their Prometheus text."""

from __future__ import annotations

from gateway._metrics import Metrics


def test_metrics_counts_per_label_set() -> None:
    metrics = Metrics()
    metrics.inc("gateway_webhooks_rejected_total", channel="telegram", reason="bad_secret_token")
    metrics.inc("gateway_webhooks_rejected_total", channel="telegram", reason="bad_secret_token")
    metrics.inc("gateway_webhooks_rejected_total", channel="whatsapp", reason="bad_signature")
    assert (
        metrics.value(
            "gateway_webhooks_rejected_total", channel="telegram", reason="bad_secret_token"
        )
        == 2
    )
    text = metrics.render()
    assert 'gateway_webhooks_rejected_total{channel="telegram",reason="bad_secret_token"} 2' in text
    assert 'gateway_webhooks_rejected_total{channel="whatsapp",reason="bad_signature"} 1' in text


def test_metrics_render_declares_every_known_counter_even_at_zero() -> None:
    text = Metrics().render()
    assert "# TYPE gateway_turns_total counter" in text
    assert "# TYPE gateway_outbox_total counter" in text


def test_metrics_escapes_label_values() -> None:
    metrics = Metrics()
    metrics.inc("x_total", reason='a"b\\c')
    assert 'x_total{reason="a\\"b\\\\c"} 1' in metrics.render()
