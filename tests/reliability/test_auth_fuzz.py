"""Authentication fuzz (issue 12): mutations of valid requests, against the real ``gateway serve``.

Routes: the WhatsApp webhook POST (``X-Hub-Signature-256``) and its GET subscription handshake
(``hub.verify_token``), the Telegram webhook POST of two bots (``X-Telegram-Bot-Api-Secret-Token``),
every admin API route (a bearer token), the sandbox's simulator (the admin token too) and its
fake Bot API (the bot token in the path) and Graph API (the access token as a bearer token).

First one valid request of each kind is sent and must be accepted (its turn runs and its reply
reaches the fake platform). Then ``TOTAL`` mutations drawn from a seeded RNG (printed;
``GATEWAY_FUZZ_SEED`` replays one) go out concurrently through one aiohttp session (a raw socket
for header bytes that are not UTF-8). Pass: no mutated request gets a 2xx or a 5xx, each gets
its route's refusal (status and JSON error code), the handshake never echoes the challenge,
the store (rows and ids given), the fake platforms' and the sandbox's recorded calls and the
accepted-delivery metrics are exactly as before the fuzz, the refusal metrics count every webhook
mutation, no secret is in the log, and valid requests sent after the fuzz are accepted.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from tests.e2e.conftest import MakeGateway, Platforms
from tests.e2e.gateway_proc import (
    ADMIN_TOKEN,
    APP_SECRET,
    BOT,
    BOT_SECRET,
    BOT_TOKEN,
    NUMBER,
    Gateway,
    eventually,
)
from tests.e2e.test_crash import ECHO_AGENTS
from tests.e2e.webhooks import Delivery, telegram_text, whatsapp_texts

from . import _fuzz_mutations as mut
from ._fuzz_http import Answer, Expect, Probe, send
from .scale import pick

TOTAL = pick(10_000, 10_000)
SEED_VARIABLE = "GATEWAY_FUZZ_SEED"
WORKERS = 32  # requests in flight at once
VERIFY_TOKEN = "e2e-verify"  # config_text's whatsapp.verify_token and the number's access token
ACCESS_TOKEN = "e2e-access-token"
OTHER_BOT = "other"
OTHER_SECRET = "e2e-other-bot-secret"
OTHER_TOKEN = "987654321:AAF-e2e_other_TOKEN-fedcba9876543210"
OTHER_BOT_TABLE = f"""
[[telegram.bots]]
name = "{OTHER_BOT}"
token = "{OTHER_TOKEN}"
secret_token = "{OTHER_SECRET}"
"""
SECRETS: tuple[str, ...] = (ADMIN_TOKEN, APP_SECRET, BOT_SECRET, BOT_TOKEN, VERIFY_TOKEN)
SECRETS += (ACCESS_TOKEN, OTHER_SECRET, OTHER_TOKEN)
# Shares of TOTAL by route; the admin share is spread over every admin route.
SHARES = {"whatsapp": 0.30, "telegram": 0.25, "handshake": 0.15, "admin": 0.24, "sandbox": 0.06}
STATE_TABLES: tuple[str, ...] = ("messages", "session_events", "processed_messages")
STATE_TABLES += ("deliveries", "quarantine", "inbox", "outbox", "attachments")
FUZZ_CHATS = 100  # mutated deliveries come from this many chats nobody else uses
FUZZ_TELEGRAM_CHAT = 77_000_000
FUZZ_WA_ID = 17_770_000_000
FUZZ_TAG = re.compile(r"c77-m[0-9]+")
SESSION_IN_PATH = re.compile(r"/api/sessions/[^/]+")


def victim_session(wa_id: str) -> str:
    return f"whatsapp-{NUMBER}-{wa_id}"


@dataclass(frozen=True)
class Valid:
    """The chats of the valid requests, each ``(chat id, tag)``; a reply is ``echo <tag>-m<n>``."""

    whatsapp: tuple[str, str] = ("15550000001", "c01")
    telegram: tuple[int, str] = (9001, "c02")
    other_bot: tuple[int, str] = (9002, "c03")
    doomed: tuple[str, str] = ("15550000004", "c04")  # deleted by the valid DELETE
    simulated: tuple[int, str] = (9005, "c05")  # posted by the sandbox's simulator

    def deliveries(self, round_: int) -> list[tuple[Delivery, str]]:
        """The webhook deliveries of one round (1 before the fuzz, 2 after it), with their tags."""
        wa_id, wa_tag = self.whatsapp[0], f"{self.whatsapp[1]}-m{round_}"
        chat, tg_tag = self.telegram[0], f"{self.telegram[1]}-m{round_}"
        other_chat, other_tag = self.other_bot[0], f"{self.other_bot[1]}-m{round_}"
        found = [
            (whatsapp_texts(wa_id, (f"wamid.{wa_tag}", wa_tag)), wa_tag),
            (telegram_text(1000 + round_, chat, tg_tag), tg_tag),
            (other_bot(telegram_text(2000 + round_, other_chat, other_tag)), other_tag),
        ]
        if round_ == 1:
            doomed, doomed_tag = self.doomed[0], f"{self.doomed[1]}-m1"
            found.append((whatsapp_texts(doomed, (f"wamid.{doomed_tag}", doomed_tag)), doomed_tag))
        return found


VALID = Valid()


def other_bot(delivery: Delivery) -> Delivery:
    """The same update as sent to the second bot, with its secret."""
    headers = {**delivery.headers, "X-Telegram-Bot-Api-Secret-Token": OTHER_SECRET}
    return Delivery(f"/webhooks/telegram/{OTHER_BOT}", delivery.body, headers)


# -- templates of the valid requests -----------------------------------------------------------


def _encoded(headers: dict[str, str], *drop: str) -> tuple[tuple[str, bytes], ...]:
    return tuple((k, v.encode()) for k, v in headers.items() if k not in drop)


def whatsapp_template(i: int) -> mut.Template:
    delivery = whatsapp_texts(str(FUZZ_WA_ID + i % FUZZ_CHATS), (f"wamid.fuzz{i}", f"c77-m{i}"))
    signature = delivery.headers["X-Hub-Signature-256"].encode()
    return mut.Template(
        route="POST /webhooks/whatsapp",
        method="POST",
        path=delivery.path,
        headers=_encoded(delivery.headers, "X-Hub-Signature-256"),
        body=delivery.body,
        credential="X-Hub-Signature-256",
        prefix=b"sha256=",
        secret=signature.removeprefix(b"sha256="),
        authentic=mut.signature_oracle(APP_SECRET.encode()),
        refused=Expect(401, "bad_signature"),
    )


def telegram_template(i: int, bot: str, secret: str) -> mut.Template:
    delivery = telegram_text(50_000_000 + i, FUZZ_TELEGRAM_CHAT + i % FUZZ_CHATS, f"c77-m{i}")
    return mut.Template(
        route=f"POST /webhooks/telegram/{bot}",
        method="POST",
        path=f"/webhooks/telegram/{bot}",
        headers=_encoded(delivery.headers, "X-Telegram-Bot-Api-Secret-Token"),
        body=delivery.body,
        credential="X-Telegram-Bot-Api-Secret-Token",
        prefix=b"",
        secret=secret.encode(),
        authentic=mut.equal_oracle(secret.encode()),
        refused=Expect(401, "bad_secret_token"),
    )


@dataclass(frozen=True)
class AdminRoute:
    """One route that takes the admin token, and what its valid request gets."""

    method: str
    path: str  # with the query, if any
    valid: Expect
    body: dict[str, Any] | None = None

    def template(self) -> mut.Template:
        headers: tuple[tuple[str, bytes], ...] = ()
        if self.body is not None:
            headers = (("Content-Type", b"application/json"),)
        route_path, _, query = self.path.partition("?")
        return mut.Template(
            route=f"{self.method} {SESSION_IN_PATH.sub('/api/sessions/{id}', route_path)}",
            method=self.method,
            path=route_path,
            query=query,
            headers=headers,
            body=b"" if self.body is None else json.dumps(self.body).encode(),
            credential="Authorization",
            prefix=b"Bearer ",
            secret=ADMIN_TOKEN.encode(),
            authentic=mut.bearer_oracle(ADMIN_TOKEN.encode()),
            refused=Expect(401, "unauthorized"),
        )


def admin_routes(victim: str, head_id: int, doomed: str) -> list[AdminRoute]:
    """Every route under /api/ that takes the token, and the sandbox's simulator.

    The valid requests are sent in this order: the DELETE erases ``doomed``; the mutated ones
    aim every route at ``victim`` (a DELETE that got through would erase it).
    """
    sid = f"/api/sessions/{victim}"
    simulate = {"channel": "telegram", "chat_id": str(VALID.simulated[0])}
    tag = f"{VALID.simulated[1]}-m1"
    return [
        AdminRoute("GET", "/api/sessions?limit=5&channel=whatsapp", Expect(200)),
        AdminRoute("GET", sid, Expect(200)),
        AdminRoute("GET", f"{sid}/messages", Expect(200)),
        AdminRoute("GET", f"{sid}/events?after=0&limit=5", Expect(200)),
        AdminRoute("GET", f"{sid}/attachments/none", Expect(404, "unknown_attachment")),
        AdminRoute("GET", "/api/queue", Expect(200)),
        AdminRoute("GET", "/api/agents", Expect(200)),
        AdminRoute("GET", "/api/deadletters", Expect(200)),
        AdminRoute("GET", "/api/quarantine?limit=5", Expect(200)),
        AdminRoute("GET", "/api/quarantine/1", Expect(404, "unknown_quarantine")),
        AdminRoute("GET", "/api/console/config", Expect(200)),
        AdminRoute("GET", "/api/no-such-route", Expect(404, "unknown_route")),
        AdminRoute("POST", "/api/console/ticket", Expect(200)),
        AdminRoute("POST", f"{sid}/cancel", Expect(409, "no_turn_running")),
        AdminRoute("POST", f"{sid}/handoff", Expect(200), {"agent": "echo"}),
        AdminRoute("POST", f"{sid}/rewind", Expect(200), {"message_id": head_id}),
        AdminRoute("POST", f"{sid}/reply", Expect(202), {"text": "operator-check"}),
        AdminRoute("DELETE", f"/api/sessions/{doomed}", Expect(204)),
        AdminRoute("POST", "/sandbox/api/simulate", Expect(200), {**simulate, "text": tag}),
        AdminRoute("GET", "/sandbox/api/sent?channel=telegram", Expect(200)),
    ]


def admin_path_variants(victim: str) -> list[str]:
    """Other spellings of admin paths that still reach a handler under /api/."""
    return [
        "/api/sessions/",
        "/api//sessions",
        "/api/%73essions",
        f"/api/sessions/{victim}/",
        f"/api/sessions/{victim}/messages/",
        "/api/sessions/%2e%2e/openapi.json",
        "/api/openapi.json/../sessions",
        "/api/Sessions",
        "/api/sessions;x",
    ]


def sandbox_bot_path(segment: str) -> str:
    return f"/sandbox/telegram/bot{segment}/sendMessage"


SANDBOX_BOT_ROUTE = "POST /sandbox/telegram/bot{token}/sendMessage"
SANDBOX_GRAPH_PATH = f"/sandbox/graph/v21.0/{NUMBER}/messages"


def sandbox_bot_template(i: int) -> mut.Template:
    """A sendMessage to the sandbox's fake Bot API; the bot token is in the path."""
    body = {"chat_id": str(FUZZ_TELEGRAM_CHAT + i % FUZZ_CHATS), "text": f"c77-m{i}"}
    return mut.Template(
        route=SANDBOX_BOT_ROUTE,
        method="POST",
        path=sandbox_bot_path(BOT_TOKEN),
        headers=(("Content-Type", b"application/json"),),
        body=json.dumps(body).encode(),
        credential="",
        prefix=b"",
        secret=BOT_TOKEN.encode(),
        authentic=lambda values, body: False,  # the credential is in the path, not a header
        refused=Expect(401, "401"),
    )


def sandbox_graph_template(i: int) -> mut.Template:
    """A message to the sandbox's fake Graph API, with the number's access token."""
    body: dict[str, Any] = {"messaging_product": "whatsapp", "to": str(FUZZ_WA_ID + i % FUZZ_CHATS)}
    body |= {"type": "text", "text": {"body": f"c77-m{i}"}}
    return mut.Template(
        route=f"POST {SANDBOX_GRAPH_PATH}",
        method="POST",
        path=SANDBOX_GRAPH_PATH,
        headers=(("Content-Type", b"application/json"),),
        body=json.dumps(body).encode(),
        credential="Authorization",
        prefix=b"Bearer ",
        secret=ACCESS_TOKEN.encode(),
        authentic=mut.bearer_oracle(ACCESS_TOKEN.encode()),
        refused=Expect(401, "190"),
    )


def sandbox_platform_valid() -> list[Probe]:
    """One accepted call to each of the sandbox's fake platform APIs."""
    bot = sandbox_bot_template(0)
    return [
        replace(bot.probe("valid", [], expect=Expect(200)), mutated=False),
        sandbox_graph_template(0).valid(Expect(200)),
    ]


# -- drawing the fuzz --------------------------------------------------------------------------


def seed() -> int:
    """The RNG's seed: ``GATEWAY_FUZZ_SEED`` if set, else a fresh one (printed either way)."""
    given = os.environ.get(SEED_VARIABLE)
    return int(given) if given else random.SystemRandom().randrange(1 << 32)


def shares(total: int) -> dict[str, int]:
    counts = {route: int(total * share) for route, share in SHARES.items()}
    counts["whatsapp"] += total - sum(counts.values())
    return counts


def other_secrets(*own: str) -> list[bytes]:
    return [s.encode() for s in SECRETS if s not in own]


def whatsapp_mutations() -> list[mut.Mutation]:
    keys = other_secrets(APP_SECRET)

    def another_delivery(rng: random.Random) -> tuple[bytes, bytes]:
        template = whatsapp_template(rng.randrange(1 << 30) + TOTAL)
        return template.body, template.value

    return [
        *mut.COMMON,
        mut.other_secret([bytes.hex(k)[:64].encode() for k in keys]),
        mut.other_header(["X-Hub-Signature", "X-Hub-Signature-256-Sha256", "Authorization"]),
        mut.body_changed,
        mut.body_changed,
        mut.body_changed,
        mut.signed_wrongly(APP_SECRET.encode(), keys),
        mut.signed_wrongly(APP_SECRET.encode(), keys),
        mut.replayed(another_delivery),
    ]


def telegram_mutations(bot: str, secret: str, other: str) -> list[mut.Mutation]:
    unknown = [f"/webhooks/telegram/{name}" for name in (bot.upper(), bot.title(), f"{bot}x")]
    unknown += [f"/webhooks/telegram/{bot}%20", f"/webhooks/telegram/{bot[:-1]}"]
    return [
        *mut.COMMON,
        mut.other_secret(other_secrets(secret)),
        mut.other_header(
            ["X-Telegram-Bot-Api-Secret", "X-Telegram-Secret-Token", "X-Secret-Token"]
        ),
        mut.cross_path(f"/webhooks/telegram/{other}", "path: another bot's, with this secret"),
        mut.unknown_bot(unknown),
        mut.unknown_bot(unknown),
    ]


def admin_mutations(victim: str) -> list[mut.Mutation]:
    return [
        *mut.COMMON,
        mut.other_secret(other_secrets(ADMIN_TOKEN)),
        mut.other_scheme,
        mut.token_elsewhere,
        mut.path_variant(admin_path_variants(victim)),
    ]


def draw_probes(rng: random.Random, routes: Sequence[AdminRoute], victim: str) -> list[Probe]:
    """``TOTAL`` mutated requests, shuffled, each with its own ids."""
    counts = shares(TOTAL)
    probes: list[Probe] = []
    wa = whatsapp_mutations()
    for i in range(counts["whatsapp"]):
        probes.append(mut.draw(rng, whatsapp_template(i), wa))
    bots = [(BOT, BOT_SECRET, OTHER_BOT), (OTHER_BOT, OTHER_SECRET, BOT)]
    tg = [telegram_mutations(*names) for names in bots]
    for i in range(counts["telegram"]):
        bot, secret, *_ = bots[i % 2]
        probes.append(mut.draw(rng, telegram_template(i, bot, secret), tg[i % 2]))
    others = other_secrets(VERIFY_TOKEN)
    for i in range(counts["handshake"]):
        probes.append(mut.handshake(rng, VERIFY_TOKEN.encode(), others, f"fuzz-challenge-{i}"))
    api = [r for r in routes if not r.path.startswith("/sandbox/")]
    sandbox = [r for r in routes if r.path.startswith("/sandbox/")]
    adm = admin_mutations(victim)
    for i in range(counts["admin"]):
        route = fuzz_route(api[i % len(api)], i, victim)
        probes.append(mut.draw(rng, route.template(), adm))
    probes += draw_sandbox(rng, sandbox, counts["sandbox"], adm)
    rng.shuffle(probes)
    return probes


def draw_sandbox(
    rng: random.Random, routes: Sequence[AdminRoute], count: int, adm: Sequence[mut.Mutation]
) -> list[Probe]:
    """The simulator's routes (the admin token) and the fake platforms' (their own tokens)."""
    bot_others = other_secrets(BOT_TOKEN, OTHER_TOKEN)  # both bots are the fake's users
    graph = [*mut.COMMON, mut.other_secret(other_secrets(ACCESS_TOKEN)), mut.other_scheme]
    probes = []
    for i in range(count):
        if i % 4 == 2:
            template = sandbox_bot_template(i)
            token = BOT_TOKEN.encode()
            probes.append(mut.path_token(rng, template, sandbox_bot_path, token, bot_others))
        elif i % 4 == 3:
            probes.append(mut.draw(rng, sandbox_graph_template(i), graph))
        else:
            probes.append(mut.draw(rng, fuzz_route(routes[i % 2], i, "").template(), adm))
    return probes


def fuzz_route(route: AdminRoute, i: int, victim: str) -> AdminRoute:
    """The route as the fuzz sends it: a DELETE aimed at ``victim``, which must survive; a reply
    or a simulated message with a text of its own, which must never arrive."""
    if route.method == "DELETE":
        return AdminRoute(route.method, f"/api/sessions/{victim}", route.valid)
    if route.body is None or "text" not in route.body:
        return route
    body = {**route.body, "text": f"c77-m{i}"}
    if "chat_id" in body:
        body["chat_id"] = str(FUZZ_TELEGRAM_CHAT + i % FUZZ_CHATS)
    return AdminRoute(route.method, route.path, route.valid, body)


# -- sending and judging -----------------------------------------------------------------------


Result = tuple[Probe, Answer]


async def send_all(
    client: aiohttp.ClientSession, base_url: str, probes: Sequence[Probe]
) -> list[Result]:
    """Every probe, ``WORKERS`` at a time; the answers in the probes' order."""
    queue = iter(enumerate(probes))
    answers: list[Answer | None] = [None] * len(probes)

    async def worker() -> None:
        for index, probe in queue:
            answers[index] = await send(client, base_url, probe)

    async with asyncio.TaskGroup() as group:
        for _ in range(WORKERS):
            group.create_task(worker())
    return [(p, a) for p, a in zip(probes, answers, strict=True) if a is not None]


def error_code(answer: Answer) -> str:
    """The error code of a JSON error body: the gateway's and Graph's ``error.code``, the Bot
    API's ``error_code``; "" for anything else."""
    body = answer.json()
    if not isinstance(body, dict):
        return ""
    if body.get("ok") is False:
        return str(body.get("error_code", ""))
    error = body.get("error")
    return str(error.get("code", "")) if isinstance(error, dict) else ""


def judge(probe: Probe, answer: Answer) -> str | None:
    """What is wrong with the answer, or None."""
    expect = probe.expect
    if probe.mutated and answer.status < 300:
        return "ACCEPTED"
    if answer.status >= 500:
        return "server error"
    if answer.status != expect.status:
        return f"status {answer.status}, expected {expect.status}"
    if expect.code and error_code(answer) != expect.code:
        return f"error code {error_code(answer)!r}, expected {expect.code!r}"
    if probe.mutated and probe.secret_marker and probe.secret_marker.encode() in answer.body:
        return "the challenge was echoed"
    if not probe.mutated and probe.secret_marker and answer.body != probe.secret_marker.encode():
        return "the challenge was not echoed"
    return None


def failures(results: Sequence[Result]) -> list[str]:
    found = []
    for probe, answer in results:
        wrong = judge(probe, answer)
        if wrong is not None:
            found.append(
                f"{probe.route} [{probe.kind}] {probe.method} {probe.target[:120]}"
                f" headers={probe.headers[-3:]!r}: {wrong}; body {answer.body[:200]!r}"
            )
    return found


async def expect_accepted(
    client: aiohttp.ClientSession, base_url: str, probes: Sequence[Probe]
) -> list[Result]:
    """Send valid requests one after another; each must get its route's answer."""
    results = [(probe, await send(client, base_url, probe)) for probe in probes]
    wrong = failures(results)
    assert not wrong, "valid requests refused:\n" + "\n".join(wrong)
    return results


def valid_probe(delivery: Delivery, route: str) -> Probe:
    headers = tuple((k, v.encode()) for k, v in delivery.headers.items())
    return Probe(
        route, "valid", "POST", delivery.path, headers, delivery.body, Expect(200), mutated=False
    )


# -- state that must not move --------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """What the fuzz must leave as it was: store rows, platform calls, accepted-webhook counts."""

    rows: dict[str, int]
    sequences: list[tuple[Any, ...]]  # every AUTOINCREMENT table's highest id ever given
    sessions: list[tuple[Any, ...]]
    telegram_calls: int
    graph_calls: int
    sandbox_calls: int
    metrics: dict[str, float]


async def snapshot(gateway: Gateway, fakes: Platforms, client: aiohttp.ClientSession) -> Snapshot:
    rows = {t: gateway.query(f"SELECT count(*) FROM {t}")[0][0] for t in STATE_TABLES}
    sessions = gateway.query(
        "SELECT session_id, active_agent, status, head_id, updated_at FROM sessions ORDER BY 1"
    )
    sent = await gateway.admin(client, "/sandbox/api/sent")
    return Snapshot(
        rows,
        gateway.query("SELECT name, seq FROM sqlite_sequence ORDER BY name"),
        sessions,
        len(fakes.telegram.requests),
        len(fakes.graph.requests),
        len(sent["sent"]),
        await webhook_metrics(gateway, client),
    )


METRIC_LINE = re.compile(r"(gateway_webhooks_\w+_total)\{([^}]*)\} (\S+)")


async def webhook_metrics(gateway: Gateway, client: aiohttp.ClientSession) -> dict[str, float]:
    """The webhook counters of /metrics, keyed by ``name{labels}``."""
    async with client.get(f"{gateway.url}/metrics") as response:
        text = await response.text()
    return {f"{m[1]}{{{m[2]}}}": float(m[3]) for m in METRIC_LINE.finditer(text)}


def rejected_by_metrics(before: dict[str, float], after: dict[str, float]) -> Counter[str]:
    """The webhook refusals counted between two snapshots, keyed by ``channel/reason``."""
    counted: Counter[str] = Counter()
    for key, value in after.items():
        if key.startswith("gateway_webhooks_rejected_total") and value > before.get(key, 0):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', key))
            counted[f"{labels['channel']}/{labels['reason']}"] += int(value - before.get(key, 0))
    return counted


def stored_counts(metrics: dict[str, float]) -> dict[str, float]:
    """The counters of deliveries let through: accepted, duplicate, quarantined."""
    kept = ("_accepted_", "_duplicate_", "_quarantined_")
    return {key: value for key, value in metrics.items() if any(k in key for k in kept)}


def rejected_by_fuzz(results: Sequence[Result]) -> Counter[str]:
    counted: Counter[str] = Counter()
    for probe, answer in results:
        if probe.route.startswith("POST /webhooks/"):
            channel = "whatsapp" if "whatsapp" in probe.route else "telegram"
            counted[f"{channel}/{error_code(answer)}"] += 1
    return counted


# -- waiting for turns -----------------------------------------------------------------------------


def echoes(fakes: Platforms) -> set[str]:
    """The tags of every reply the fake platforms accepted."""
    texts = [r.text or "" for fake in (fakes.telegram, fakes.graph) for r in fake.sent()]
    return {t.removeprefix("echo ") for t in texts}


async def settled(gateway: Gateway) -> bool:
    inbox = gateway.query("SELECT count(*) FROM inbox WHERE state != 'done'")[0][0]
    outbox = gateway.query("SELECT count(*) FROM outbox WHERE state != 'sent'")[0][0]
    running = gateway.query("SELECT count(*) FROM sessions WHERE status != 'idle'")[0][0]
    pending = gateway.query("SELECT count(*) FROM deliveries")[0][0]  # deleted once parsed
    return bool(inbox == outbox == running == pending == 0)


async def replied(fakes: Platforms, gateway: Gateway, tags: set[str]) -> None:
    await eventually(lambda: tags <= echoes(fakes), f"replies to {sorted(tags)}", seconds=30)
    await eventually(lambda: settled(gateway), "an idle gateway", seconds=30)


# -- the test ----------------------------------------------------------------------------------


async def test_auth_fuzz_no_mutated_request_is_accepted_or_leaves_a_trace(
    make_gateway: MakeGateway,
    platforms: Platforms,
    http: aiohttp.ClientSession,
) -> None:
    rng_seed = seed()
    print(f"\nauth fuzz: {TOTAL} mutations, seed {rng_seed} (replay: {SEED_VARIABLE}={rng_seed})")
    gateway = await make_gateway(
        agents=OTHER_BOT_TABLE + ECHO_AGENTS, sections={"sandbox": {"enabled": True}}
    )
    await accept_valid_webhooks(gateway, platforms, http, round_=1)
    routes = await accept_valid_admin_requests(gateway, platforms, http)
    victim = victim_session(VALID.whatsapp[0])
    before = await snapshot(gateway, platforms, http)

    probes = draw_probes(random.Random(rng_seed), routes, victim)
    started = time.monotonic()
    results = await send_all(http, gateway.url, probes)
    seconds = time.monotonic() - started
    wrong = failures(results)
    assert not wrong, f"seed {rng_seed}: {len(wrong)} wrong answers, e.g.:\n" + "\n".join(
        wrong[:20]
    )
    after = await snapshot(gateway, platforms, http)
    assert after.rows == before.rows
    assert after.sequences == before.sequences
    assert after.sessions == before.sessions
    assert (after.telegram_calls, after.graph_calls) == (before.telegram_calls, before.graph_calls)
    assert after.sandbox_calls == before.sandbox_calls
    assert rejected_by_metrics(before.metrics, after.metrics) == rejected_by_fuzz(results)
    assert stored_counts(after.metrics) == stored_counts(before.metrics)

    await accept_valid_webhooks(gateway, platforms, http, round_=2)
    assert not any(FUZZ_TAG.fullmatch(tag) for tag in echoes(platforms))
    assert no_secret_in(gateway.log(tail=1_000_000))
    print_tallies(results, seconds)


async def accept_valid_webhooks(
    gateway: Gateway, fakes: Platforms, client: aiohttp.ClientSession, *, round_: int
) -> None:
    """A valid delivery to each webhook route (both bots), a valid handshake and a valid call
    to each of the sandbox's fake APIs: all accepted, and every delivery's turn answered."""
    deliveries = VALID.deliveries(round_)
    probes = [valid_probe(delivery, f"POST {delivery.path}") for delivery, _ in deliveries]
    probes.append(mut.valid_handshake(VERIFY_TOKEN.encode(), f"valid-challenge-{round_}"))
    probes += sandbox_platform_valid()
    await expect_accepted(client, gateway.url, probes)
    await replied(fakes, gateway, {tag for _, tag in deliveries})


async def accept_valid_admin_requests(
    gateway: Gateway, fakes: Platforms, client: aiohttp.ClientSession
) -> list[AdminRoute]:
    """A valid request to every admin route, each answered as documented; the routes."""
    victim, doomed = victim_session(VALID.whatsapp[0]), victim_session(VALID.doomed[0])
    session = await gateway.admin(client, f"/api/sessions/{victim}")
    routes = admin_routes(victim, session["head_id"], doomed)
    await expect_accepted(client, gateway.url, [r.template().valid(r.valid) for r in routes])
    await replied(fakes, gateway, {f"{VALID.simulated[1]}-m1"})
    await eventually(
        lambda: "operator-check" in fakes.graph.texts(VALID.whatsapp[0]), "the operator's reply"
    )
    assert gateway.query("SELECT count(*) FROM sessions WHERE session_id = ?", doomed) == [(0,)]
    return routes


def no_secret_in(log: str) -> bool:
    return not [secret for secret in SECRETS if secret in log]


def print_tallies(results: Sequence[Result], seconds: float) -> None:
    by_route: Counter[str] = Counter()
    by_status: Counter[tuple[str, int, str]] = Counter()
    raw = 0
    for probe, answer in results:
        by_route[probe.route] += 1
        by_status[(probe.route, answer.status, error_code(answer))] += 1
        raw += probe.raw_only
    print(f"auth fuzz: {len(results)} mutated requests in {seconds:.1f} s, {raw} over raw sockets")
    for route, count in sorted(by_route.items()):
        answers = ", ".join(
            f"{n} x {status} {code}"
            for (r, status, code), n in sorted(by_status.items())
            if r == route
        )
        print(f"  {route}: {count} ({answers})")
