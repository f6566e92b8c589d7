"""Fixtures: a real SQLite store in a file under tmp_path, sessions, and small registries."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from webhook_bot_gateway.agents import Agent, ModelBackend, Registry, Runner, Tool, tool
from webhook_bot_gateway.store import SQLiteStore


@tool
def lookup_invoice(number: str) -> str:
    """Look up an invoice by number."""
    return f"{number}: 49.00 EUR, paid"


def make_registry(
    triage: ModelBackend,
    billing: ModelBackend | None = None,
    *,
    billing_tools: Sequence[Tool] = (lookup_invoice,),
    with_human: bool = True,
) -> Registry:
    """triage -> billing/human; billing -> triage. Without ``billing`` only triage (+ human)."""
    names = (["billing"] if billing else []) + (["human"] if with_human else [])
    agents = [Agent("triage", "You route.", handoffs=names, model=triage)]
    if billing is not None:
        agents.append(Agent("billing", "You do billing.", billing_tools, ["triage"], billing))
    if with_human:
        agents.append(Agent("human", kind="human", handoff_reply="A person will answer."))
    return Registry(agents, "triage")


ATTEMPT_LOG = ("turn_started", "turn_cancelled")  # what a rolled-back turn leaves in the log


def dump_tables(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, read with the stdlib sqlite3 module, bypassing the store;
    the event log without the entries that only record a turn's attempt (see log_kinds)."""
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        dump = {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
        dump["session_events"] = sorted(
            conn.execute(
                "SELECT * FROM session_events WHERE kind NOT IN (?, ?)", ATTEMPT_LOG
            ).fetchall(),
            key=repr,
        )
        dump["sqlite_sequence"] = [r for r in dump["sqlite_sequence"] if r[0] != "session_events"]
        return dump
    finally:
        conn.close()


def log_kinds(path: Path) -> list[tuple[str, str]]:
    """The event log as (kind, detail) pairs in seq order, read with sqlite3."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT kind, detail FROM session_events ORDER BY session_id, seq")
        return [(str(kind), str(detail)) for kind, detail in rows.fetchall()]
    finally:
        conn.close()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "agents.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(db_path) as opened:
        yield opened


@pytest.fixture
async def session_id(store: SQLiteStore) -> str:
    session = await store.create_session("test", "bot", "42", "triage")
    return session.session_id


def runner_for(store: SQLiteStore, registry: Registry, **limits: Any) -> Runner:
    return Runner(store, registry, **limits)
