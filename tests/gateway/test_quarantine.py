"""Quarantine: a delivery the parser refused is kept, then replayed once the parser accepts it."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.e2e.gateway_proc import eventually
from webhook_bot_gateway.channels import ADAPTERS, ChannelAdapter, ChannelError, WhatsAppAdapter
from webhook_bot_gateway.gateway._channels_ctx import open_adapters
from webhook_bot_gateway.gateway._cli._quarantine import replay
from webhook_bot_gateway.gateway._pipeline._intake import to_parsed
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.gateway.cli import main
from webhook_bot_gateway.gateway.config import Settings
from webhook_bot_gateway.store import DeliveryIn, QuarantineIn, QuarantineNotFound, SQLiteStore

from .ingest_helpers import counts, rows, settings, tg_update, wa_delivery, wa_headers, wa_text

MARKER = "NEW-MESSAGE-TYPE"


class OldWhatsApp(WhatsAppAdapter):
    """An older parser: it cannot read deliveries that carry MARKER."""

    def delivery_keys(self, body: bytes, account: str | None = None) -> list[str]:
        if MARKER.encode() in body:
            raise ChannelError("whatsapp", "a message type this version does not know")
        return super().delivery_keys(body, account)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "gateway.db"


@pytest.fixture
def config(db_path: Path) -> Settings:
    return settings(db_path)


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(db_path) as opened:
        yield opened


@pytest.fixture
async def adapters(config: Settings) -> AsyncIterator[Mapping[str, ChannelAdapter]]:
    async with open_adapters(config) as opened:
        yield opened


async def replayed(
    store: SQLiteStore, adapters: Mapping[str, ChannelAdapter], only: int | None = None
) -> tuple[int, str]:
    out = io.StringIO()
    status = await replay(store, adapters, only, out, "triage")
    return status, out.getvalue()


async def quarantine_with_old_parser(aiohttp_client: Any, config: Settings, body: bytes) -> None:
    """Post ``body`` to a gateway running the old parser: it lands in quarantine."""
    app = build_app(
        config, adapter_factories={**ADAPTERS, "whatsapp": OldWhatsApp}, ingest_only=True
    )
    client: TestClient[Any, Any] = await aiohttp_client(app)
    try:
        response = await client.post("/webhooks/whatsapp", data=body, headers=wa_headers(body))
        assert response.status == 200
    finally:
        await client.close()


async def test_replay_records_a_quarantined_delivery_once_the_parser_accepts_it(
    aiohttp_client: Any,
    config: Settings,
    db_path: Path,
    store: SQLiteStore,
    adapters: Mapping[str, ChannelAdapter],
) -> None:
    body = wa_delivery([wa_text("wamid.q1", MARKER), wa_text("wamid.q2", MARKER)])
    await quarantine_with_old_parser(aiohttp_client, config, body)
    assert (counts(db_path)["quarantine"], counts(db_path)["deliveries"]) == (1, 0)
    [(qid,)] = rows(db_path, "SELECT id FROM quarantine")

    status, out = await replayed(store, adapters)

    assert status == 0
    assert f"quarantine {qid} (whatsapp): recorded as delivery" in out
    assert "2 new key(s)" in out
    [(stored, keys)] = rows(db_path, "SELECT body, keys FROM deliveries")
    assert stored == body
    assert sorted(json.loads(keys)) == ["whatsapp:wamid.q1", "whatsapp:wamid.q2"]
    item = await store.get_quarantine(qid)
    assert item is not None
    assert item.replayed_at is not None
    assert (await replayed(store, adapters))[1] == "nothing to replay\n"


async def test_replay_leaves_a_delivery_that_still_fails(
    store: SQLiteStore, adapters: Mapping[str, ChannelAdapter], db_path: Path
) -> None:
    [result] = await store.ingest(
        [QuarantineIn("telegram", "support", b"{broken", "body is not JSON")]
    )
    status, out = await replayed(store, adapters)
    assert status == 0
    assert f"quarantine {result.quarantine_id} (telegram): still fails: body is not JSON" in out
    assert rows(db_path, "SELECT replayed_at FROM quarantine") == [(None,)]
    assert counts(db_path)["deliveries"] == 0


async def test_replay_of_one_id_touches_only_that_row(
    store: SQLiteStore, adapters: Mapping[str, ChannelAdapter], db_path: Path
) -> None:
    first, second = await store.ingest(
        [
            QuarantineIn("telegram", "support", tg_update(1), "an old parser's bug"),
            QuarantineIn("telegram", "support", tg_update(2), "an old parser's bug"),
        ]
    )
    status, out = await replayed(store, adapters, second.quarantine_id)
    assert status == 0
    assert out.count("recorded as delivery") == 1
    assert [json.loads(k) for (k,) in rows(db_path, "SELECT keys FROM deliveries")] == [
        ["telegram:support:2"]
    ]
    assert second.quarantine_id is not None
    again = await replayed(store, adapters, second.quarantine_id)
    assert "already replayed" in again[1]
    assert first.quarantine_id is not None
    untouched = await store.get_quarantine(first.quarantine_id)
    assert untouched is not None
    assert untouched.replayed_at is None


async def test_replay_of_an_unknown_id_fails(
    store: SQLiteStore, adapters: Mapping[str, ChannelAdapter]
) -> None:
    out = io.StringIO()
    with pytest.raises(QuarantineNotFound, match="^no quarantined delivery 404$"):
        await replay(store, adapters, 404, out, "triage")
    assert out.getvalue() == ""


async def test_replay_records_messages_directly_when_their_keys_were_claimed(
    store: SQLiteStore, adapters: Mapping[str, ChannelAdapter], db_path: Path
) -> None:
    body = wa_delivery([wa_text("wamid.k1", "first"), wa_text("wamid.k2", "second")])
    await store.claim(["whatsapp:wamid.k1", "whatsapp:wamid.k2"])  # claimed by the first ack
    [result] = await store.ingest([QuarantineIn("whatsapp", None, body, "an old parser's bug")])
    _, out = await replayed(store, adapters)
    assert "recorded directly for 1 session(s); marked replayed" in out
    inbox = rows(db_path, "SELECT dedup_key FROM inbox ORDER BY id")
    assert inbox == [("whatsapp:wamid.k1",), ("whatsapp:wamid.k2",)]
    assert result.quarantine_id is not None
    item = await store.get_quarantine(result.quarantine_id)
    assert item is not None
    assert item.replayed_at is not None


async def test_replay_records_nothing_twice(
    store: SQLiteStore, adapters: Mapping[str, ChannelAdapter], db_path: Path
) -> None:
    body = tg_update(3)
    [stored] = await store.ingest(
        [DeliveryIn("telegram", "support", body, ("telegram:support:3",))]
    )
    await store.ingest([QuarantineIn("telegram", "support", body, "a retry's bug")])
    _, out = await replayed(store, adapters)
    assert "recorded directly for 1 session(s)" in out
    # The intake then parses the stored delivery: its message is in the inbox already.
    [delivery] = await store.unparsed_deliveries()
    parsed = to_parsed(delivery, adapters["telegram"].parse(delivery.body, delivery.account))
    assert await store.record_parsed(stored.delivery_id, parsed, starting_agent="triage") == []
    assert rows(db_path, "SELECT dedup_key FROM inbox") == [("telegram:support:3",)]
    assert (await replayed(store, adapters))[1] == "nothing to replay\n"


def write_config(tmp_path: Path, db_path: Path) -> Path:
    """A config file the CLI can load: the helpers' settings, dumped back to TOML."""
    path = tmp_path / "gateway.toml"
    path.write_text(
        "\n".join(
            [
                "[store]",
                f'url = "sqlite:///{db_path}"',
                "[whatsapp]",
                'app_secret = "s"',
                "[[whatsapp.numbers]]",
                'phone_number_id = "1122334455667"',
                'access_token = "t"',
                "[agents]",
                'starting_agent = "solo"',
                "[[agents.list]]",
                'name = "solo"',
                'model = "rules"',
                "[[agents.list.rules]]",
                'reply = "hi"',
            ]
        ),
        encoding="utf-8",
    )
    return path


def test_quarantine_cli_lists_and_replays(tmp_path: Path, db_path: Path) -> None:
    body = wa_delivery([wa_text("wamid.cli")])

    async def seed() -> None:
        async with SQLiteStore(db_path) as store:
            await store.ingest([QuarantineIn("whatsapp", None, body, "an old parser's bug")])

    asyncio.run(seed())
    config = str(write_config(tmp_path, db_path))
    out = io.StringIO()
    assert main(["--config", config, "quarantine", "list"], out=out) == 0
    [listed] = json.loads(out.getvalue())["quarantine"]
    assert (listed["channel"], listed["reason"], listed["size"]) == (
        "whatsapp",
        "an old parser's bug",
        len(body),
    )
    out = io.StringIO()
    assert main(["--config", config, "quarantine", "replay"], out=out) == 0
    assert "quarantine 1 (whatsapp): recorded as delivery" in out.getvalue()
    assert json.loads(rows(db_path, "SELECT keys FROM deliveries")[0][0]) == ["whatsapp:wamid.cli"]
    out = io.StringIO()
    assert main(["--config", config, "quarantine", "list", "--pending"], out=out) == 0
    assert json.loads(out.getvalue())["quarantine"] == []
    out = io.StringIO()
    assert main(["--config", config, "quarantine", "replay"], out=out) == 0
    assert out.getvalue() == "nothing to replay\n"


def test_quarantine_cli_deletes_one_row_or_the_rows_naming_a_chat(
    tmp_path: Path, db_path: Path
) -> None:
    """A support desk erasing a user who has no session: by row id, or by the chat's id."""
    chat = "4915550001234"
    bodies = [f'{{"wa_id": "{chat}", "n": {n}}}'.encode() for n in range(3)]

    async def seed() -> None:
        async with SQLiteStore(db_path) as store:
            await store.ingest([QuarantineIn("whatsapp", None, body, "bad") for body in bodies])

    asyncio.run(seed())
    config = str(write_config(tmp_path, db_path))
    out = io.StringIO()
    assert main(["--config", config, "quarantine", "delete", "1"], out=out) == 0
    assert out.getvalue() == "deleted quarantined delivery 1\n"
    out = io.StringIO()
    command = ["quarantine", "delete", "--chat", chat, "--channel", "whatsapp"]
    assert main(["--config", config, *command], out=out) == 0
    assert out.getvalue() == f"deleted 2 quarantined deliveries naming whatsapp chat {chat}\n"
    assert rows(db_path, "SELECT count(*) FROM quarantine") == [(0,)]


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (["--chat", "42"], "error: --chat needs --channel (telegram, whatsapp or web)\n"),
        (["1", "--channel", "telegram"], "error: --channel goes with --chat CHAT_ID\n"),
        (["--chat", "", "--channel", "telegram"], "error: --chat must not be empty\n"),
    ],
)
def test_quarantine_cli_delete_refuses_a_chat_without_its_channel(
    tmp_path: Path,
    db_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    error: str,
) -> None:
    config = str(write_config(tmp_path, db_path))
    assert main(["--config", config, "quarantine", "delete", *command]) == 1
    assert capsys.readouterr().err == error
    assert not db_path.exists()  # refused before the store was opened (or created)


async def test_replay_turns_a_quarantined_delivery_into_a_turn_of_the_running_gateway(
    aiohttp_client: Any, config: Settings, db_path: Path
) -> None:
    app = build_app(config, adapter_factories={**ADAPTERS, "whatsapp": OldWhatsApp})
    client: TestClient[Any, Any] = await aiohttp_client(app)  # the whole pipeline runs
    body = wa_delivery([wa_text("wamid.turn", f"hi {MARKER}")])
    response = await client.post("/webhooks/whatsapp", data=body, headers=wa_headers(body))
    assert response.status == 200
    assert counts(db_path)["quarantine"] == 1

    async with SQLiteStore(db_path) as offline, open_adapters(config) as adapters:
        status, out = await replayed(offline, adapters)  # what `gateway quarantine replay` does
    assert status == 0
    assert "recorded as delivery" in out

    sid = "whatsapp-1122334455667-972987654321"
    await eventually(lambda: answered(db_path, sid), "the replayed message's turn")
    [(text,)] = rows(
        db_path, "SELECT text FROM messages WHERE session_id = ? AND role = 'user'", sid
    )
    assert MARKER in text
    assert rows(db_path, "SELECT count(*) FROM outbox WHERE session_id = ?", sid) == [(1,)]


def answered(db_path: Path, sid: str) -> bool:
    found = rows(
        db_path, "SELECT count(*) FROM messages WHERE session_id = ? AND role = 'assistant'", sid
    )
    return bool(found[0][0] > 0)
