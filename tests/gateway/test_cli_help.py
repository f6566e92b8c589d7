"""Each command's --help tells what it takes: --config where the command reads a config (it
is accepted after the command too), and every action of a command group."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest

from webhook_bot_gateway.gateway.cli import build_parser, main

READ_CONFIG = [
    ["serve"],
    ["check-config"],
    ["purge"],
    ["sessions"],
    ["sessions", "list"],
    ["sessions", "show"],
    ["sessions", "delete"],
    ["sessions", "export"],
    ["quarantine"],
    ["quarantine", "list"],
    ["quarantine", "replay"],
    ["quarantine", "delete"],
    ["telegram"],
    ["telegram", "set-webhook"],
]


def help_of(command: list[str]) -> str:
    page = io.StringIO()
    with redirect_stdout(page), pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*command, "--help"])
    assert exited.value.code == 0
    return " ".join(page.getvalue().split())  # as wrapped for any terminal width


@pytest.mark.parametrize("command", READ_CONFIG, ids=" ".join)
def test_every_command_that_reads_the_config_shows_config_in_its_help(command: list[str]) -> None:
    page = help_of(command)
    assert "[--config PATH]" in page
    assert "config file (default: $GATEWAY_CONFIG, else config.toml)" in page


@pytest.mark.parametrize(
    "argv",
    [
        ["--config", "x.toml", "sessions", "list"],
        ["sessions", "--config", "x.toml", "list"],
        ["sessions", "list", "--config", "x.toml"],
        ["telegram", "set-webhook", "--bot", "b", "--url", "u", "--config", "x.toml"],
    ],
)
def test_config_is_read_wherever_the_help_shows_it(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).config == "x.toml"


def test_migrate_store_shows_no_config_it_would_not_read() -> None:
    assert "--config" not in help_of(["migrate-store"])


def test_the_sessions_help_names_all_four_actions() -> None:
    page = help_of(["sessions"])
    assert "list, show, delete or export sessions (offline)" in page
    for action, text in [
        ("list", "list sessions, newest first"),
        ("show", "show one session and its current branch"),
        ("delete", "delete a session and its history"),
        ("export", "print everything held of a session as JSON"),
    ]:
        assert f"{action} {text}" in page


def test_the_top_help_names_export_among_the_session_actions() -> None:
    page = help_of([])
    assert "sessions list, show, delete or export sessions (offline)" in page


def test_a_session_command_names_its_id_argument(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sessions", "show"])
    assert "the following arguments are required: ID" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["sessions", "list", "--limit", "abc"], "argument --limit: invalid int value: 'abc'"),
        (["quarantine", "replay", "abc"], "argument id: invalid int value: 'abc'"),
        (["serve", "--nope"], "unrecognized arguments: --nope"),
    ],
    ids=["no-command", "limit", "replay-id", "unknown-option"],
)
def test_a_command_line_that_cannot_be_read_is_the_usage_and_one_error_line_with_exit_2(
    argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """As README says: argparse's usage, then its ``error:`` line, exit 2 (not 1: the command
    never ran), and nothing on stdout."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("usage: gateway")
    last = err.strip().splitlines()[-1]
    assert last.startswith("gateway")
    assert f": error: {problem}" in last
