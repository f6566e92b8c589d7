"""``store.turn(id, recent_turns=n)``: the turn loads only what pruning to n turns can keep.

The bounded-walk tests count SQLite's own virtual machine steps: SQLite backend only."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.pg import fresh_schema_sync
from webhook_bot_gateway.store import OUTSIDE_TURNS, Message, NewMessage, Role, SQLiteStore, Store
from webhook_bot_gateway.store.postgres import PostgresStore
from webhook_bot_gateway.store.sqlite._schema import migrate
from webhook_bot_gateway.store.sqlite._sql_sessions import select_branch, select_recent

from .conftest import BACKENDS, Raw


def expected_recent(branch: Sequence[Message], turns: int) -> list[Message]:
    """The specification: from the ``turns``-th newest user message on, after every older
    system message; the whole branch when it has fewer user messages."""
    users = [i for i, m in enumerate(branch) if m.role == "user"]
    start = users[-turns] if len(users) >= turns else 0
    return [m for m in branch[:start] if m.role == "system"] + list(branch[start:])


async def recent(store: Store, sid: str, turns: int) -> list[Message]:
    async with store.turn(sid, recent_turns=turns) as turn:
        return list(turn.history)


async def add(store: Store, sid: str, roles: str) -> list[Message]:
    """Append one message per letter: s(ystem), u(ser), a(ssistant), t(ool)."""
    names: dict[str, Role] = {"s": "system", "u": "user", "a": "assistant", "t": "tool"}
    return [await store.append_message(sid, names[r], f"{r}{i}") for i, r in enumerate(roles)]


@pytest.fixture
async def sid(store: Store) -> str:
    return (await store.create_session("test", "bot", "1", "triage")).session_id


async def test_turn_recent_turns_keeps_last_whole_turns(store: Store, sid: str) -> None:
    messages = await add(store, sid, "uauatauaua")  # users at 0, 2, 6, 8
    assert await recent(store, sid, 2) == messages[6:]
    assert await recent(store, sid, 3) == messages[2:]


async def test_turn_recent_turns_with_fewer_turns_keeps_branch(store: Store, sid: str) -> None:
    messages = await add(store, sid, "atuaua")
    assert await recent(store, sid, 3) == messages
    assert await recent(store, sid, 40) == messages


async def test_turn_recent_turns_brings_older_system_messages_first(store: Store, sid: str) -> None:
    messages = await add(store, sid, "suasuauasua")  # users at 1, 4, 6, 9
    assert await recent(store, sid, 2) == [messages[0], messages[3], *messages[6:]]


async def test_turn_recent_turns_leaves_system_messages_of_other_branches(
    store: Store, sid: str
) -> None:
    first = await add(store, sid, "suaua")
    await store.set_active_head(sid, first[2].id)  # rewind, then a system message off-branch
    dropped = await add(store, sid, "sua")
    await store.set_active_head(sid, first[4].id)
    kept = await add(store, sid, "sua")
    history = await recent(store, sid, 1)
    assert history == [first[0], kept[0], *kept[1:]]
    assert dropped[0] not in history


async def test_turn_recent_turns_on_empty_session(store: Store, sid: str) -> None:
    assert await recent(store, sid, 1) == []


async def test_turn_recent_turns_none_loads_whole_branch(store: Store, sid: str) -> None:
    messages = await add(store, sid, "uauaua")
    async with store.turn(sid, recent_turns=None) as turn:
        assert list(turn.history) == messages


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
async def test_turn_recent_turns_refuses_non_positive_or_non_int(
    store: Store, sid: str, bad: object
) -> None:
    with pytest.raises(ValueError, match="recent_turns"):
        store.turn(sid, recent_turns=bad)  # type: ignore[arg-type]


async def test_turn_recent_turns_commits_after_the_head(store: Store, raw: Raw) -> None:
    """A turn that loaded only part of the branch still appends after the head."""
    sid = (await store.create_session("test", "bot", "2", "triage")).session_id
    messages = await add(store, sid, "uauaua")
    async with store.turn(sid, recent_turns=1) as turn:
        assert list(turn.history) == messages[4:]
        turn.append(NewMessage("user", "next"))
    branch = await store.get_branch(sid)
    assert branch[:-1] == messages
    assert branch[-1].parent_id == messages[-1].id
    rows = await raw.rows("SELECT status FROM sessions WHERE session_id = ?", sid)
    assert rows == [("idle",)]


# --- SQLite backend: the walk is bounded, by SQLite's own step counter ----------------------------


def _long_branch(turns: int, system_at_root: bool) -> tuple[sqlite3.Connection, int]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    conn.execute(
        "INSERT INTO sessions (session_id, channel, account, chat_id, active_agent, created_at,"
        " updated_at) VALUES ('s', 'test', 'bot', '1', 'triage', 0, 0)"
    )
    roles = (["system"] if system_at_root else []) + ["user", "assistant"] * turns
    parent = None
    for role in roles:
        parent = conn.execute(
            "INSERT INTO messages (session_id, parent_id, role, created_at)"
            " VALUES ('s', ?, ?, 0) RETURNING id",
            (parent, role),
        ).fetchone()[0]
    assert parent is not None
    return conn, parent


def _steps(conn: sqlite3.Connection, head: int, turns: int | None) -> int:
    """SQLite virtual machine steps (in units of 100) taken to load the turn's history."""
    count = 0

    def tick() -> int:
        nonlocal count
        count += 1
        return 0

    conn.set_progress_handler(tick, 100)
    try:
        if turns is None:
            select_branch(conn, head)
        else:
            select_recent(conn, "s", head, turns)
    finally:
        conn.set_progress_handler(None, 0)
    return count


def test_select_recent_walk_does_not_grow_with_the_branch() -> None:
    """The full walk grows with the branch; the recent one grows only by the role scan of
    the older messages (no row of them leaves SQLite): about a tenth as much, measured."""
    short, short_head = _long_branch(100, system_at_root=False)
    long, long_head = _long_branch(1000, system_at_root=False)
    full_growth = _steps(long, long_head, None) - _steps(short, short_head, None)
    recent_growth = _steps(long, long_head, 10) - _steps(short, short_head, 10)
    assert recent_growth * 5 < full_growth
    assert len(select_recent(long, "s", long_head, 10)) == 20


def test_select_recent_finds_system_message_at_the_root_of_a_long_branch() -> None:
    conn, head = _long_branch(1000, system_at_root=True)
    history = select_recent(conn, "s", head, 3)
    assert [m.role for m in history] == ["system"] + ["user", "assistant"] * 3
    assert history[0].parent_id is None


# --- property: the exact specification over random DAGs ---------------------------------------

Op = tuple[str, int]


def ops() -> st.SearchStrategy[list[Op]]:
    """Appends of any role and rewinds to any earlier message (by index)."""
    append = st.tuples(st.sampled_from("suat"), st.just(0))
    rewind = st.tuples(st.just("r"), st.integers(0, 1_000))
    return st.lists(st.one_of(append, append, append, rewind), max_size=40)


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    """Where the property's stores live: a new ``:memory:`` database for each example, or one
    PostgreSQL schema for the whole test (each example in a session of its own)."""
    if request.param != "postgres":
        yield ":memory:"
        return
    with fresh_schema_sync() as url:
        yield url


def _open(database: str) -> Store:
    if database == ":memory:":
        return SQLiteStore(database)
    return PostgresStore(database, pool_size=2)


async def _check(database: str, script: list[Op], turns: int) -> None:
    async with _open(database) as store:
        chat = uuid.uuid4().hex
        sid = (await store.create_session("test", "bot", chat, "triage")).session_id
        made: list[Message] = []
        for kind, pick in script:
            if kind == "r" and made:
                await store.set_active_head(sid, made[pick % len(made)].id)
            elif kind != "r":
                made += await add(store, sid, kind)
        branch = await store.get_branch(sid)
        assert await recent(store, sid, turns) == expected_recent(branch, turns)


# The fixture is set up once for all the examples of a test, as wanted: a schema for them all.
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops(), st.integers(1, 6))
def test_turn_recent_turns_matches_specification(
    database: str, script: list[Op], turns: int
) -> None:
    asyncio.run(_check(database, script, turns))


async def test_turn_recent_turns_counts_messages_to_a_person_with_the_turn_before(
    store: Store, sid: str
) -> None:
    """A user message marked OUTSIDE_TURNS (written while a person answered) starts no turn:
    the window reaches back to the turn that handed the session over, as pruning does."""
    before = await add(store, sid, "ua")
    asked = await store.append_message(sid, "user", "a person, please")
    human_phase = [asked, await store.append_message(sid, "assistant", "A person will answer.")]
    for index in range(5):
        marked = {OUTSIDE_TURNS: True}
        human_phase.append(await store.append_message(sid, "user", f"u{index}", data=marked))
        human_phase.append(await store.append_message(sid, "assistant", f"op{index}"))
    back = await add(store, sid, "ua")
    window = await recent(store, sid, 2)
    assert window == human_phase + back
    assert await recent(store, sid, 3) == before + human_phase + back
