"""Counters in memory, rendered in the Prometheus text format at ``/metrics``."""

from __future__ import annotations

from collections import defaultdict

Labels = tuple[tuple[str, str], ...]

HELP = {
    "gateway_webhooks_received_total": "Webhook requests received, by channel.",
    "gateway_webhooks_accepted_total": "Deliveries durably recorded, by channel.",
    "gateway_webhooks_duplicate_total": "Deliveries whose every key was seen before, by channel.",
    "gateway_webhooks_rejected_total": "Webhook requests refused, by channel and reason.",
    "gateway_webhooks_quarantined_total": "Authenticated deliveries that could not be parsed.",
    "gateway_updates_ignored_total": "Update types acknowledged but not handled, by channel.",
    "gateway_turns_total": "Turns by outcome (committed, failed, dead, cancelled, deleted).",
    "gateway_outbox_total": "Replies by outcome (sent, retried, failed, dead, uncertain).",
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Monotonic counters; one instance per application."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))

    def inc(self, name: str, amount: float = 1, **labels: str) -> None:
        self._counts[name][tuple(sorted(labels.items()))] += amount

    def value(self, name: str, **labels: str) -> float:
        return self._counts.get(name, {}).get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> str:
        lines: list[str] = []
        for name in sorted(set(HELP) | set(self._counts)):
            lines.append(f"# HELP {name} {HELP.get(name, name)}")
            lines.append(f"# TYPE {name} counter")
            for labels, count in sorted(self._counts.get(name, {}).items()):
                text = ",".join(f'{key}="{_escape(value)}"' for key, value in labels)
                lines.append(f"{name}{{{text}}} {count:g}" if text else f"{name} {count:g}")
        return "\n".join(lines) + "\n"
