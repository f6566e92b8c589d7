"""/metrics after a scripted run of the real gateway, read with prometheus-client's own parser.

One run against the fake platforms holds every case the operations doc promises a series for:
duplicates, a refused secret, a refused signature, an unknown bot, a 429, a reply that dies after
its tries, a model's handoff, a turn whose model server is down until it is dead-lettered, and a
reply held back by the gateway's own rate limit. Each series is then checked for its value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from .conftest import MakeGateway, Platforms
from .gateway_proc import BOT, NUMBER, Gateway, eventually, free_port
from .webhooks import Delivery, post, telegram_text, whatsapp_texts

Labels = Mapping[str, str]
Samples = dict[str, list[tuple[dict[str, str], float]]]

HELLO = "Hello!"


def agents(model_port: int) -> str:
    """triage routes "refund" to billing and "broken" to an agent whose model server is down."""
    return f"""
[agents]
starting_agent = "triage"

[agents.models.broken]
base_url = "http://127.0.0.1:{model_port}/v1"
model = "none"
max_retries = 0
timeout = 2

[[agents.list]]
name = "triage"
model = "rules"
handoffs = ["billing", "flaky", "human"]

[[agents.list.rules]]
match = 'refund'
handoff = "billing"

[[agents.list.rules]]
match = 'broken'
handoff = "flaky"

[[agents.list.rules]]
reply = "{HELLO}"

[[agents.list]]
name = "billing"
model = "rules"

[[agents.list.rules]]
reply = "Billing here."

[[agents.list]]
name = "flaky"
model = "broken"

[[agents.list]]
name = "human"
kind = "human"
"""


SECTIONS = {
    "dispatcher": {"max_attempts": 2, "retry_base_seconds": 0.1},
    # One token per WhatsApp chat, then one every 100 s: a second reply waits, whatever the timing.
    "sender": {"max_attempts": 3, "burst": 1, "whatsapp_chat_per_second": 0.01},
}


async def scrape(http: aiohttp.ClientSession, gateway: Gateway) -> Samples:
    """Every sample of /metrics, by sample name, parsed by prometheus-client."""
    async with http.get(f"{gateway.url}/metrics") as response:
        assert response.status == 200
        assert response.content_type == "text/plain"
        text = await response.text()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample of ``name`` with exactly ``labels``; 0 when there is none."""
    found = [v for have, v in samples.get(name, []) if have == labels]
    assert len(found) <= 1, (name, labels)
    return found[0] if found else 0.0


def states(gateway: Gateway, table: str, chat_id: str) -> list[str]:
    """The states of a chat's inbox or outbox rows, oldest first."""
    channel, account = ("whatsapp", NUMBER) if len(chat_id) > 4 else ("telegram", BOT)
    session_id = f"{channel}-{account}-{chat_id}"
    rows = gateway.query(f"SELECT state FROM {table} WHERE session_id = ? ORDER BY id", session_id)
    return [row[0] for row in rows]


def settled(gateway: Gateway) -> bool:
    """Every reply sent, dead or waiting for the rate limit; the broken turn dead-lettered."""
    return (
        all(states(gateway, "outbox", chat) == ["sent"] for chat in ("7101", "7102", "7103"))
        and states(gateway, "outbox", "7104") == ["dead"]
        and states(gateway, "outbox", "7105") == ["sent"]  # the apology
        and states(gateway, "inbox", "7105") == ["dead"]
        and states(gateway, "outbox", "15557100001") == ["sent", "pending"]
    )


def refused(delivery: Delivery, **headers: str) -> Delivery:
    return dataclasses.replace(delivery, headers={**delivery.headers, **headers})


async def scripted_run(http: aiohttp.ClientSession, gateway: Gateway) -> None:
    url = gateway.url
    hello = telegram_text(9001, 7101, "hello")
    statuses = [await post(http, url, hello) for _ in range(3)]  # two duplicates
    for update_id, chat_id, text in ((9002, 7102, "hello"), (9003, 7103, "a refund please")):
        statuses.append(await post(http, url, telegram_text(update_id, chat_id, text)))
    statuses.append(await post(http, url, telegram_text(9004, 7104, "hello")))
    statuses.append(await post(http, url, telegram_text(9005, 7105, "it is broken")))
    wa = whatsapp_texts("15557100001", ("wamid.m1", "hello"), ("wamid.m2", "hello again"))
    statuses.append(await post(http, url, wa))
    assert statuses == [200] * 8
    bad_secret = refused(
        telegram_text(9006, 7101, "x"), **{"X-Telegram-Bot-Api-Secret-Token": "no"}
    )
    bad_signature = refused(whatsapp_texts("15557100001", ("wamid.m3", "x")))
    bad_signature = refused(bad_signature, **{"X-Hub-Signature-256": "sha256=" + "0" * 64})
    unknown_bot = dataclasses.replace(
        telegram_text(9007, 7101, "x"), path="/webhooks/telegram/nobody"
    )
    answers = [await post(http, url, d) for d in (bad_secret, bad_signature, unknown_bot)]
    assert answers == [401, 401, 404]


async def test_metrics_after_a_scripted_run_show_every_series_with_its_value(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    platforms.telegram.fail("7102", "429:1")
    platforms.telegram.fail("7104", "500", "500", "500")
    gateway = await make_gateway(agents=agents(free_port()), sections=SECTIONS)
    await scripted_run(http, gateway)
    await eventually(lambda: settled(gateway), "the run to settle", seconds=30)
    await eventually(lambda: lanes_idle(gateway), "no turn left running", seconds=10)
    scraped: list[Samples] = []

    async def counted() -> bool:
        scraped[:] = [await scrape(http, gateway)]
        return caught_up(scraped[0])

    await eventually(counted, "the counts of what settled", seconds=10)
    samples = scraped[0]

    check_webhooks(samples)
    check_turns_and_agents(samples)
    check_sends(samples)
    check_gauges(samples)
    assert value(samples, "process_resident_memory_bytes") > 0  # ProcessCollector
    assert value(samples, "process_open_fds") > 0
    assert "gateway_store_errors_total" not in samples  # declared, and nothing failed
    assert "nobody" not in repr(samples)  # an unknown bot's name is no label


def lanes_idle(gateway: Gateway) -> bool:
    return gateway.query("SELECT count(*) FROM sessions WHERE status != 'idle'") == [(0,)]


def caught_up(samples: Samples) -> bool:
    """Whether the counts of the states ``settled`` and ``lanes_idle`` saw have been added:
    each comes after its commit (a row sent or dead, a turn committed or dead-lettered), the
    rate-limit wait in the sender's pass after the first WhatsApp reply was recorded sent. The
    checks then want these values exactly."""
    outbox, turns = "gateway_outbox_total", "gateway_turns_total"
    dead_letter = {"from_agent": "triage", "to_agent": "human", "reason": "dead_letter"}
    return (
        value(samples, outbox, channel="telegram", outcome="sent") >= 4
        and value(samples, outbox, channel="telegram", outcome="dead") >= 1
        and value(samples, outbox, channel="whatsapp", outcome="sent") >= 1
        and value(samples, "gateway_rate_limit_waits_total", channel="whatsapp") >= 1
        and value(samples, turns, outcome="committed") >= 6
        and value(samples, turns, outcome="dead") >= 1
        and value(samples, "gateway_handoffs_total", **dead_letter) >= 1
    )


def check_webhooks(samples: Samples) -> None:
    expected = {
        ("gateway_webhooks_received_total", "telegram"): 9,
        ("gateway_webhooks_received_total", "whatsapp"): 2,
        ("gateway_webhooks_accepted_total", "telegram"): 5,
        ("gateway_webhooks_accepted_total", "whatsapp"): 1,
        ("gateway_webhooks_duplicate_total", "telegram"): 2,
        ("gateway_webhooks_duplicate_total", "whatsapp"): 0,
        ("gateway_webhook_ack_seconds_count", "telegram"): 7,  # every 200: new or duplicate
        ("gateway_webhook_ack_seconds_count", "whatsapp"): 1,
    }
    for (name, channel), count in expected.items():
        assert value(samples, name, channel=channel) == count, (name, channel)
    rejected = "gateway_webhooks_rejected_total"
    assert value(samples, rejected, channel="telegram", reason="bad_secret_token") == 1
    assert value(samples, rejected, channel="telegram", reason="unknown_bot") == 1
    assert value(samples, rejected, channel="whatsapp", reason="bad_signature") == 1
    assert value(samples, "gateway_ingest_batch_size_sum") == 5 + 2 + 1  # every item committed
    assert 1 <= value(samples, "gateway_ingest_batch_size_count") <= 8


def check_turns_and_agents(samples: Samples) -> None:
    turns = "gateway_turns_total"
    # 7101, 7102, 7103, 7104 and the two WhatsApp messages (one turn each: enqueue) commit;
    # 7105's turn fails twice (max_attempts = 2) and is dead-lettered.
    assert value(samples, turns, outcome="committed") == 6
    assert value(samples, turns, outcome="failed") == 1
    assert value(samples, turns, outcome="dead") == 1
    assert value(samples, "gateway_turn_seconds_count", agent="triage") == 6
    assert value(samples, "gateway_turn_seconds_sum", agent="triage") > 0
    handoffs = "gateway_handoffs_total"
    assert value(samples, handoffs, from_agent="triage", to_agent="billing", reason="handoff") == 1
    dead = {"from_agent": "triage", "to_agent": "human", "reason": "dead_letter"}
    assert value(samples, handoffs, **dead) == 1
    # triage -> flaky happened in the failed turns only: rolled back, never counted
    assert sum(v for _, v in samples[handoffs]) == 2
    model = "gateway_model_call_seconds_count"
    # rules: one call per committed turn, two in 7103 (triage, then billing), one per failed try
    assert value(samples, model, model="rules", outcome="ok") == 6 + 1 + 2
    assert value(samples, model, model="broken", outcome="error") == 2


def check_sends(samples: Samples) -> None:
    outbox = "gateway_outbox_total"
    assert value(samples, outbox, channel="telegram", outcome="sent") == 4  # 7101-3, apology
    assert value(samples, outbox, channel="telegram", outcome="retried") == 1 + 2  # 429; 500s
    assert value(samples, outbox, channel="telegram", outcome="dead") == 1
    assert value(samples, outbox, channel="whatsapp", outcome="sent") == 1
    assert value(samples, "gateway_send_seconds_count", channel="telegram") == 1 + 2 + 1 + 3 + 1
    assert value(samples, "gateway_send_seconds_count", channel="whatsapp") == 1
    assert value(samples, "gateway_rate_limit_waits_total", channel="whatsapp") == 1
    assert value(samples, "gateway_rate_limit_waits_total", channel="telegram") == 0


def check_gauges(samples: Samples) -> None:
    assert value(samples, "gateway_inbox_rows", state="pending") == 0
    assert value(samples, "gateway_inbox_rows", state="dead") == 1
    expected = {("telegram", "pending"): 0, ("telegram", "dead"): 1}
    expected |= {("whatsapp", "pending"): 1, ("whatsapp", "dead"): 0}
    for (channel, state), count in expected.items():
        assert value(samples, "gateway_outbox_rows", channel=channel, state=state) == count
    assert value(samples, "gateway_sessions", status="running") == 0
    assert value(samples, "gateway_sessions", status="interrupted") == 0
    assert value(samples, "gateway_turns_in_flight") == 0
    assert value(samples, "gateway_backlog") == 0
    assert value(samples, "gateway_pipeline_paced_rate") == 0  # a quiet gateway is not paced
