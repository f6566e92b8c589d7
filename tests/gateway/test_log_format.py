"""``[logging]`` (docs/logging.md): the level and the format of the stderr log, the fields of the
webhook or turn under way on every line written while handling it, and the redaction of
secrets in JSON lines as in text ones. configure_logging runs as ``gateway`` runs it, on a
root logger of its own whose handler writes to a buffer."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.multipart import BadContentDispositionHeader, BadContentDispositionParam

from webhook_bot_gateway.agents import tool
from webhook_bot_gateway.gateway import _log_context as log_context
from webhook_bot_gateway.gateway._logging import configure_logging
from webhook_bot_gateway.gateway.cli import main
from webhook_bot_gateway.gateway.config import Settings, load_settings
from webhook_bot_gateway.gateway.errors import ConfigError

from .logging_helpers import fresh_root_logging, redirect_root_handlers

BOT_TOKEN = "111222333:AAF-log-format-token-0123456789ab"
DB_PASSWORD = 'pa"ss\\word-7'  # JSON escapes both: a line holds it as pa\"ss\\word-7
WEB_CHAT = "1128e765-9ac8-4a5c-8f3e-0123456789ab"
WEB_SESSION = f"web-{WEB_CHAT}"  # a web user's only credential
log = logging.getLogger("gateway.test_log_format")


def settings(**logging_config: str) -> Settings:
    return Settings.model_validate(
        {
            "logging": logging_config,
            "store": {"url": f"postgresql://gw:{DB_PASSWORD}@db:5432/gw"},
            "telegram": {"bots": [{"name": "support", "token": BOT_TOKEN, "secret_token": "s3cr"}]},
        }
    )


@pytest.fixture
def configure() -> Iterator[Any]:
    """``configure(**logging)``: configure_logging with that [logging] section; the buffer the
    root handler then writes to."""
    with fresh_root_logging():

        def run(**logging_config: str) -> io.StringIO:
            logging.getLogger().handlers = []  # pytest's capture handlers came back for the call
            configure_logging(settings(**logging_config))
            return redirect_root_handlers()

        yield run


def json_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


async def test_lines_of_a_turn_and_of_a_webhook_carry_their_fields_and_only_theirs(
    configure: Any,
) -> None:
    buffer = configure(format="json")
    with log_context.webhook("telegram"):
        log.info("before the keys")
        log_context.found_keys(["telegram:support:9"])
        log.info("after the keys")
    with log_context.turn("telegram-support-9", [4, 5], ["telegram:support:9", "k2"]):
        log.warning("in the turn")
        await asyncio.create_task(_log_from_a_task("from a task the turn started"))
        log.info("turn ended: committed", extra={"outcome": "committed"})
    log.info("after both")

    before, after, turn, task, end, outside = json_lines(buffer)
    assert (before["channel"], "dedup_keys" in before) == ("telegram", False)
    assert (after["channel"], after["dedup_keys"]) == ("telegram", ["telegram:support:9"])
    for line in (turn, task, end):
        assert line["session_id"] == "telegram-support-9"
        assert line["inbox_ids"] == [4, 5]
        assert line["dedup_keys"] == ["telegram:support:9", "k2"]
        assert "channel" not in line
    assert "outcome" not in turn
    assert end["outcome"] == "committed"
    assert set(outside) == {"time", "level", "logger", "message"}
    assert (outside["level"], outside["logger"], outside["message"]) == (
        "INFO",
        log.name,
        "after both",
    )


async def test_a_sync_tools_lines_carry_the_fields_of_its_turn(configure: Any) -> None:
    """A sync tool runs in a thread (agents/_tool_threads.py): the turn's fields go with it."""

    @tool
    def crm_lookup(customer: str) -> str:
        """Look a customer up."""
        log.info("looking up from %s", threading.current_thread().name[:5])
        raise ConnectionError("could not connect")

    buffer = configure(format="json")
    with log_context.turn("telegram-support-9", [4], ["telegram:support:9"]):
        await crm_lookup.invoke('{"customer": "ann"}')
    lines = json_lines(buffer)
    assert [line["message"] for line in lines] == [
        "looking up from tool-",
        "tool crm_lookup raised ConnectionError",
    ]
    for line in lines:
        assert (line["session_id"], line["inbox_ids"]) == ("telegram-support-9", [4])


def test_a_delivery_with_huge_or_many_keys_writes_a_bounded_line(configure: Any) -> None:
    """A platform's id has no bound: a signed delivery with a 100,000-character wamid, or
    thousands of messages, must not write a line of that size."""
    buffer = configure(format="json")
    huge = "whatsapp:" + "w" * 100_000
    many = [f"whatsapp:wamid.{n}" for n in range(500)]
    with log_context.webhook("whatsapp"):
        log_context.found_keys([huge])
        log.info("one huge key")
    with log_context.turn("whatsapp-1-2", [1], many):
        log.info("many keys")
    one, lots = json_lines(buffer)
    [shown] = one["dedup_keys"]
    assert shown == huge[: log_context.MAX_LOGGED_KEY] + f"...({len(huge)} chars)"
    assert lots["dedup_keys"] == [*many[: log_context.MAX_LOGGED_KEYS], "...(+480 more)"]
    assert max(len(line) for line in buffer.getvalue().splitlines()) < 2_000


def test_python_warnings_are_log_lines_and_aiohttps_disposition_ones_dropped(
    configure: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warning printed raw to stderr breaks the JSON lines; aiohttp's about a client's
    malformed Content-Disposition echo the client's header, once per distinct value."""
    monkeypatch.setattr(logging, "_warnings_showwarning", None)  # as in a fresh process
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # undone after the test
    buffer = configure(format="json")
    with warnings.catch_warnings():
        warnings.filterwarnings("always", category=UserWarning)
        warnings.warn("an odd thing", UserWarning, stacklevel=1)
        warnings.warn("filename*=UTF-8''%FF%FE", BadContentDispositionParam, stacklevel=1)
        warnings.warn("inline; x", BadContentDispositionHeader, stacklevel=1)
    [line] = json_lines(buffer)
    assert (line["logger"], line["level"]) == ("py.warnings", "WARNING")
    assert "UserWarning: an odd thing" in line["message"]


async def _log_from_a_task(message: str) -> None:
    log.info(message)


def test_text_lines_append_the_fields_as_key_value(configure: Any) -> None:
    buffer = configure(format="text")
    with log_context.turn("telegram-support-9", [4, 5], ["telegram:support:9"]):
        log.info("turn ended: committed", extra={"outcome": "committed"})
    log.info("no fields")
    turn, plain = buffer.getvalue().splitlines()
    assert turn.endswith(
        " INFO gateway.test_log_format turn ended: committed dedup_keys=telegram:support:9"
        " session_id=telegram-support-9 inbox_ids=4,5 outcome=committed"
    )
    assert plain.endswith(" INFO gateway.test_log_format no fields")


@pytest.mark.parametrize("level", ["INFO", "debug", "WARNING"])
def test_the_configured_level_filters_the_lines_below_it(configure: Any, level: str) -> None:
    buffer = configure(level=level, format="json")
    log.debug("a debug line")
    log.info("an info line")
    log.warning("a warning line")
    shown = [line["level"] for line in json_lines(buffer)]
    expected = {"INFO": ["INFO", "WARNING"], "debug": ["DEBUG", "INFO", "WARNING"]}
    assert shown == expected.get(level, ["WARNING"])


def test_auto_is_text_on_a_terminal_and_json_lines_otherwise(
    configure: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    buffer = configure()  # format = "auto", stderr a pipe or a file under pytest
    log.info("to a file")
    assert json.loads(buffer.getvalue())["message"] == "to a file"

    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as terminal, os.fdopen(leader, "rb", buffering=0) as screen:
        monkeypatch.setattr(sys, "stderr", terminal)
        logging.getLogger().handlers = []  # as at a fresh start, with stderr a terminal
        configure_logging(settings())
        log.info("to a terminal")
        terminal.flush()
        shown = screen.read(4096).decode()
    assert " INFO gateway.test_log_format to a terminal" in shown
    assert not shown.startswith("{")


def test_no_secret_reaches_a_json_line_in_a_message_a_traceback_or_a_field(
    configure: Any,
) -> None:
    buffer = configure(format="json")
    log.info("the user wrote %s and %s", BOT_TOKEN, DB_PASSWORD)
    try:
        raise RuntimeError(f"refused: {DB_PASSWORD} / {BOT_TOKEN}")
    except RuntimeError:
        log.exception("a call failed")
    with log_context.turn(WEB_SESSION, [1], [f"web:{WEB_CHAT}:client-1"]):
        log.info("web turn")
    text = buffer.getvalue()
    lines = json_lines(buffer)
    assert len(lines) == 3
    for secret in (BOT_TOKEN, DB_PASSWORD, json.dumps(DB_PASSWORD)[1:-1], WEB_CHAT):
        assert secret not in text
    assert lines[0]["message"] == "the user wrote <redacted> and <redacted>"
    assert "RuntimeError: refused: <redacted> / <redacted>" in lines[1]["exc"]
    assert lines[2]["session_id"] == "web-1128e765…"
    assert lines[2]["dedup_keys"] == ["web:1128e765…:client-1"]


def test_a_bad_level_or_format_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    for key, value in (("level", "verbose"), ("format", "xml")):
        path.write_text(f'[logging]\n{key} = "{value}"\n', encoding="utf-8")
        with pytest.raises(ConfigError) as caught:
            load_settings(path, {})
        assert caught.value.key == f"logging.{key}"


def test_check_config_shows_the_logging_settings(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    agents = '[agents]\nstarting_agent = "a"\n[[agents.list]]\nname = "a"\nkind = "human"\n'
    path.write_text(f'[logging]\nlevel = "warning"\nformat = "json"\n{agents}', encoding="utf-8")
    out = io.StringIO()
    with fresh_root_logging():
        assert main(["check-config", "--config", str(path)], out=out) == 0
    assert "  logging: level WARNING; format json\n" in out.getvalue()
