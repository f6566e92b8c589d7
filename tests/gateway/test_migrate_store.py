"""``gateway migrate-store``: a populated SQLite store moves to PostgreSQL and back, rows and
ids intact; the gateway's memory (sessions, agents, dedup) carries on; non-empty targets and
bad urls are refused with a message and no traceback."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import asyncpg
import pytest

from tests.pg import fresh_schema
from webhook_bot_gateway.gateway.cli import main
from webhook_bot_gateway.store import (
    DeliveryIn,
    InboxIn,
    NewMessage,
    OutboxIn,
    ParsedDelivery,
    QuarantineIn,
    SQLiteStore,
    Store,
    copy_store,
    open_store,
)
from webhook_bot_gateway.store._copy import TABLES, counts

SID = "whatsapp-1555-u1"


async def populate(store: Store) -> None:
    """A little of everything: sessions, a turn, events, dedup keys, inbox, outbox, quarantine."""
    session = await store.get_or_create_session("whatsapp", "1555", "u1", "triage")
    async with store.turn(session.session_id) as turn:
        turn.append(NewMessage("user", "where is INV-1001?"))
        turn.append(NewMessage("assistant", "it is paid", agent="billing"))
        turn.set_active_agent("billing")
        turn.add_outbox(OutboxIn(SID, "whatsapp", "1555", "u1", {"text": "it is paid"}))
    await store.set_agent(SID, "human", reason="operator")
    await store.get_or_create_session("telegram", "support", "42", "triage")
    stored, _ = await store.ingest(
        [
            DeliveryIn("whatsapp", None, b'{"entry": []}', ("whatsapp:wamid.1",)),
            QuarantineIn("whatsapp", None, b"not json", "bad body"),
        ]
    )
    assert stored.delivery_id is not None
    item = InboxIn("whatsapp", "1555", "u1", "whatsapp:wamid.1", {"text": "hi"})
    await store.record_parsed(
        stored.delivery_id, ParsedDelivery(inbox=(item,)), starting_agent="triage"
    )
    await store.ingest([DeliveryIn("whatsapp", None, b"{}", ("whatsapp:wamid.2",))])


async def made(url: str) -> None:
    """An empty store at ``url``."""
    await (await open_store(url)).aclose()


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


ANALYZED = ("sessions", "messages", "session_events", "inbox")


async def planned_rows(url: str) -> dict[str, int]:
    """The row count the planner holds for each of some tables (``pg_class.reltuples``)."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT relname, reltuples FROM pg_class WHERE oid = ANY($1::regclass[])",
            list(ANALYZED),
        )
    finally:
        await conn.close()
    return {row["relname"]: int(row["reltuples"]) for row in rows}


async def run_async(*argv: str) -> tuple[int, str]:
    """The command from a test's event loop: it runs its own, in a thread."""
    return await asyncio.to_thread(run, *argv)


async def test_sqlite_to_postgresql_and_back_keeps_every_row(tmp_path: Path) -> None:
    source_url = f"sqlite:///{tmp_path / 'old.db'}"
    source = await open_store(source_url)
    await populate(source)
    before = await counts(source)  # type: ignore[arg-type]
    branch = await source.get_branch(SID)
    await source.aclose()
    assert all(before[name] > 0 for name in ("sessions", "messages", "session_events", "inbox"))

    async with fresh_schema() as pg_url:
        code, out = await run_async("migrate-store", "--from", source_url, "--to", pg_url)
        assert code == 0, out
        assert "counts verified" in out
        moved = await open_store(pg_url)
        try:
            assert await counts(moved) == before  # type: ignore[arg-type]
            # Analyzed after the copy: the planner knows how many rows came (-1: never).
            assert await planned_rows(pg_url) == {
                name: count for name, count in before.items() if name in ANALYZED
            }
            session = await moved.get_session(SID)
            assert session is not None
            assert session.active_agent == "human"
            assert await moved.get_branch(SID) == branch
            # The dedup memory came along: a redelivered old message is still a duplicate.
            assert await moved.claim(["whatsapp:wamid.1", "whatsapp:wamid.3"]) == {
                "whatsapp:wamid.3"
            }
            # New rows get ids past the copied ones.
            appended = await moved.append_message(SID, "user", "and INV-1002?")
            assert appended.id > max(message.id for message in branch)
            assert [row.dedup_key for row in await moved.pending_inbox(SID)] == ["whatsapp:wamid.1"]
        finally:
            await moved.aclose()

        back_url = f"sqlite:///{tmp_path / 'back.db'}"
        code, out = await run_async("migrate-store", "--from", pg_url, "--to", back_url)
        assert code == 0, out
    back = await open_store(back_url)
    try:
        after = await counts(back)  # type: ignore[arg-type]
        assert after == {
            **before,
            "messages": before["messages"] + 1,
            "processed_messages": before["processed_messages"] + 1,
        }
        assert (await back.get_branch(SID))[: len(branch)] == branch
    finally:
        await back.aclose()


async def test_a_non_empty_target_is_refused_unless_replaced(tmp_path: Path) -> None:
    source_url, target_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    for url in (source_url, target_url):
        store = await open_store(url)
        await populate(store)
        await store.aclose()
    target = SQLiteStore(tmp_path / "b.db")
    async with target:
        await target.get_or_create_session("telegram", "support", "only-in-target", "triage")
        untouched = await counts(target)

    code, out = await run_async("migrate-store", "--from", source_url, "--to", target_url)
    assert code == 1
    async with SQLiteStore(tmp_path / "b.db") as target:
        assert await counts(target) == untouched  # nothing written

    code, out = await run_async(
        "migrate-store", "--from", source_url, "--to", target_url, "--replace"
    )
    assert code == 0, out
    async with SQLiteStore(tmp_path / "a.db") as source, SQLiteStore(tmp_path / "b.db") as target:
        assert await counts(target) == await counts(source)
        assert await target.get_session("telegram-support-only-in-target") is None


def test_refusals_name_the_problem_without_a_traceback_or_a_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = tmp_path / "typo.db"
    assert (
        run(
            "migrate-store",
            "--from",
            f"sqlite:///{absent}",
            "--to",
            f"sqlite:///{tmp_path / 'y.db'}",
        )[0]
        == 1
    )
    assert "names no SQLite file" in capsys.readouterr().err
    assert not absent.exists()
    assert not (tmp_path / "y.db").exists()  # nothing opened, nothing made
    same = f"sqlite:///{tmp_path / 'x.db'}"
    asyncio.run(made(same))  # a source that exists: an empty store
    assert run("migrate-store", "--from", same, "--to", same)[0] == 1
    assert "name the same store" in capsys.readouterr().err
    assert run("migrate-store", "--from", same, "--to", "mysql://u:hunter2@db/x")[0] == 1
    err = capsys.readouterr().err
    assert "unsupported store url scheme 'mysql'" in err
    assert "hunter2" not in err
    assert "Traceback" not in err
    # A copy into memory was counted, verified, said OK (exit 0), and gone with the command.
    assert run("migrate-store", "--from", same, "--to", "sqlite:///:memory:") == (1, "")
    assert "which holds nothing once the command ends" in capsys.readouterr().err
    down = "postgresql://u:hunter2@127.0.0.1:1/x"
    assert run("migrate-store", "--from", same, "--to", down)[0] == 1
    err = capsys.readouterr().err
    assert "did not answer" in err
    assert "hunter2" not in err
    assert "Traceback" not in err


async def test_copy_store_checks_every_table(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "a.db") as source, SQLiteStore(tmp_path / "b.db") as target:
        await populate(source)
        copied = await copy_store(source, target)
        assert set(copied) == {table.name for table in TABLES}
        assert copied == await counts(target)


@pytest.mark.parametrize("side", ["--from", "--to"])
async def test_a_store_a_gateway_still_runs_on_is_refused_on_either_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], side: str
) -> None:
    """A live lease: a gateway works on the store. As the source, its rows changed during the
    copy (the counts then differed, or the target refused a row: errors that read like bad
    data); as the target, --replace emptied a running deployment. Refused, nothing written;
    once the gateway stopped (its lease released), the copy goes."""
    source_url, target_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    for url in (source_url, target_url):
        store = await open_store(url)
        await populate(store)
        await store.aclose()
    running = SQLiteStore(tmp_path / ("a.db" if side == "--from" else "b.db"))
    async with running:
        await running.renew_lease(600)
        async with SQLiteStore(tmp_path / "b.db") as target:
            before = await counts(target)
        code, _ = await run_async(
            "migrate-store", "--from", source_url, "--to", target_url, "--replace"
        )
        assert code == 1
        error = capsys.readouterr().err
        path = tmp_path / ("a.db" if side == "--from" else "b.db")
        assert error.startswith(f"error: {side} {path} is in use: a gateway process holds a lease")
        assert "stop it first" in error
        async with SQLiteStore(tmp_path / "b.db") as target:
            assert await counts(target) == before  # nothing written
        await running.release_lease()
        code, out = await run_async(
            "migrate-store", "--from", source_url, "--to", target_url, "--replace"
        )
    assert code == 0, out
