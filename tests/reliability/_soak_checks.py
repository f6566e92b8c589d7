"""What the soak reads back after a run: history, replies at the fakes, the outbox, the log.

``examine`` gathers the figures without asserting, so that the test can print the summary line
first and then fail on any of them.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.e2e.conftest import Platforms
from tests.e2e.fakes import DROP, FakePlatform
from tests.e2e.test_crash import Chat, repeats_outside_the_window, replies

from ._soak import Plan

Query = Callable[[str], Awaitable[list[tuple[Any, ...]]]]
# The sender's log lines (gateway/_pipeline/_sender.py) for the two ways a reply can reach a user
# twice or not knowingly: an attempt whose outcome was never recorded, and a send cut off
# unanswered.
RESENT = re.compile(r"outbox row (\d+): sending again after an attempt whose outcome")
UNCERTAIN = re.compile(r"outbox row (\d+) uncertain: ")
SENDS = ("sendMessage", "message")


@dataclass
class Findings:
    """The figures of one run; every list names the messages or replies at fault."""

    lost: list[str] = field(default_factory=list)  # acknowledged, no turn or no reply
    doubled: list[str] = field(default_factory=list)  # in more than one committed turn
    misordered: list[str] = field(default_factory=list)  # sessions out of arrival order
    repeats: int = 0  # replies that reached a user more than once
    outside_window: list[str] = field(default_factory=list)  # ... without a kill between
    unlogged_repeats: list[str] = field(default_factory=list)  # ... without the log line
    uncertain: int = 0  # outbox rows marked uncertain
    unexplained_uncertain: list[str] = field(default_factory=list)  # not a drop, or not logged
    unrecorded_drops: list[str] = field(default_factory=list)  # neither uncertain nor resent
    faults: Counter[str] = field(default_factory=Counter)  # what the fakes answered, per kind


def fake_of(platforms: Platforms, chat: Chat) -> FakePlatform:
    return platforms.telegram if chat.telegram else platforms.graph


def faults(platforms: Platforms) -> Counter[str]:
    """Every send the fakes answered, by outcome (``ok`` included)."""
    every = [*platforms.telegram.requests, *platforms.graph.requests]
    return Counter(r.outcome for r in every if r.method in SENDS)


async def outbox_rows(query: Query) -> dict[tuple[str, str], tuple[int, str]]:
    """(chat_id, reply text) -> (outbox id, state)."""
    rows = await query("SELECT id, chat_id, state, payload FROM outbox")
    found: dict[tuple[str, str], tuple[int, str]] = {}
    for row_id, chat_id, state, payload in rows:
        text = (json.loads(payload) if isinstance(payload, str) else payload)["text"]
        found[(chat_id, text)] = (row_id, state)
    return found


async def examine(
    plan: Plan,
    platforms: Platforms,
    query: Query,
    log: str,
    kills: list[tuple[float, float]],
) -> Findings:
    """Read the store, the fakes' records and the gateway's ``log`` after a run."""
    findings = Findings(faults=faults(platforms))
    users = await query(
        "SELECT session_id, text FROM messages WHERE role = 'user' ORDER BY session_id, id"
    )
    committed: dict[str, list[str]] = {}
    for session_id, text in users:
        committed.setdefault(session_id, []).append(text)
    outbox = await outbox_rows(query)
    resent = {int(found) for found in RESENT.findall(log)}
    for chat in plan.chats:
        fake = fake_of(platforms, chat)
        _examine_history(plan, chat, committed.get(chat.session_id, []), findings)
        _examine_replies(plan, chat, replies(fake, chat), findings)
        findings.outside_window += repeats_outside_the_window(fake, chat, kills)
        findings.unlogged_repeats += _unlogged_repeats(fake, chat, outbox, resent)
    logged = {int(found) for found in UNCERTAIN.findall(log)}
    findings.uncertain, findings.unexplained_uncertain = _uncertain(platforms, outbox, logged)
    findings.unrecorded_drops = _unrecorded_drops(platforms, outbox, resent)
    return findings


def _examine_history(plan: Plan, chat: Chat, committed: list[str], findings: Findings) -> None:
    """One committed turn per message, in arrival order."""
    expected = [chat.tag(n) for n in range(plan.per_chat)]
    turns = Counter(committed)
    findings.lost += [tag for tag in expected if turns[tag] == 0]
    findings.doubled += [tag for tag in expected if turns[tag] > 1]
    if committed != expected:
        findings.misordered.append(chat.session_id)


def _examine_replies(plan: Plan, chat: Chat, got: list[str], findings: Findings) -> None:
    """A reply to every message at the fake, the first copies in arrival order."""
    expected = [chat.tag(n) for n in range(plan.per_chat)]
    firsts = list(dict.fromkeys(got))
    findings.lost += [f"reply to {tag}" for tag in expected if tag not in firsts]
    if firsts != expected and chat.session_id not in findings.misordered:
        findings.misordered.append(chat.session_id)
    findings.repeats += len(got) - len(firsts)


def _unlogged_repeats(
    fake: FakePlatform,
    chat: Chat,
    outbox: dict[tuple[str, str], tuple[int, str]],
    resent: set[int],
) -> list[str]:
    """Replies the user got more than once whose row the sender never logged as sent again."""
    repeated = [text for text, n in Counter(fake.texts(chat.chat_id)).items() if n > 1]
    return [text for text in repeated if outbox.get((chat.chat_id, text), (0, ""))[0] not in resent]


def _dropped(platforms: Platforms) -> set[tuple[str, str | None]]:
    """(chat_id, text) of every send a fake took and then cut off."""
    every = [*platforms.telegram.requests, *platforms.graph.requests]
    return {(r.chat_id, r.text) for r in every if r.outcome == DROP}


def _unrecorded_drops(
    platforms: Platforms, outbox: dict[tuple[str, str], tuple[int, str]], resent: set[int]
) -> list[str]:
    """Cut-off sends whose row is not ``uncertain``: allowed only when a kill came before the
    gateway could record it, and the restart then sent it again (and logged that)."""
    unrecorded = []
    for chat_id, text in _dropped(platforms):
        row_id, state = outbox.get((chat_id, text or ""), (0, ""))
        if state != "uncertain" and row_id not in resent:
            unrecorded.append(f"{chat_id} {text}")
    return unrecorded


def _uncertain(
    platforms: Platforms, outbox: dict[tuple[str, str], tuple[int, str]], logged: Iterable[int]
) -> tuple[int, list[str]]:
    """How many rows are ``uncertain``; those that no dropped send explains or no line logs."""
    dropped = _dropped(platforms)
    rows = [(key, row_id) for key, (row_id, state) in outbox.items() if state == "uncertain"]
    logged = set(logged)
    unexplained = []
    for key, row_id in rows:
        if key not in dropped:
            sends = [(r.text, r.outcome) for r in _requests(platforms) if r.chat_id == key[0]]
            unexplained.append(f"outbox row {row_id}: no cut-off send of {key}; sends {sends}")
        elif row_id not in logged:
            unexplained.append(f"outbox row {row_id}: not logged")
    return len(rows), unexplained


def _requests(platforms: Platforms) -> list[Any]:
    return [*platforms.telegram.requests, *platforms.graph.requests]
