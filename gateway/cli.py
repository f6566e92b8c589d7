"""The ``gateway`` command line."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TextIO, get_args

from webhook_bot_gateway.agents import AgentError
from webhook_bot_gateway.channels import ChannelError
from webhook_bot_gateway.store import QuarantineNotFound, StoreError

from ._admin._api_models import (
    DEFAULT_PAGE,
    MAX_PAGE,
    MAX_ROW_ID,
    MAX_SEARCH,
    NUL,
    Channel,
    Status,
)
from ._admin_token import admin_token_source
from ._cli import _commands, _quarantine
from ._cli._migrate import migrate_store
from ._cli._output import (
    BROKEN_PIPE_STATUS,
    OutputError,
    discard_rest,
    guarded,
    is_broken_pipe,
    reserve_standard_descriptors,
)
from ._logging import configure_logging
from .config import (
    Settings,
    parse_settings,
    read_config,
    resolve_config_path,
    with_admin_token_file,
)
from .errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

Handler = Callable[[Settings, argparse.Namespace, TextIO], Coroutine[Any, Any, int]]


class _Parser(argparse.ArgumentParser):
    """argparse drops a help page it cannot write on stdout and exits 0; here the failure
    reaches ``main`` (its subcommands' parsers are of this class too)."""

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        stdout: TextIO = sys.stdout  # the help pages' stream (argparse looks it up at each call)
        if message and file is stdout:
            guarded(stdout).write(message)
        else:
            super()._print_message(message, file)


CONFIG_HELP = "config file (default: $GATEWAY_CONFIG, else config.toml)"


def build_parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = _Parser(
        prog="gateway", description="Webhook bot gateway for WhatsApp Cloud API and Telegram."
    )
    parser.add_argument("--config", metavar="PATH", help=CONFIG_HELP)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add(commands, "serve", "migrate the store, recover interrupted runs, serve HTTP")
    _add(commands, "check-config", "validate the config and print a summary, secrets masked")
    purge = "delete expired dedup rows and orphaned media files now (old history: retention_days)"
    _add(commands, "purge", purge)
    _add_migrate(commands)
    _add_sessions(commands)
    _add_quarantine(commands)
    _add_telegram(commands)
    return parser


def _add(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    text: str,
    *,
    reads_config: bool = True,
) -> argparse.ArgumentParser:
    sub = commands.add_parser(name, help=text, description=text)
    # Accept --config after the command too (`gateway serve --config x.toml`), and show it in
    # the command's --help, unless the command reads no config (it is then accepted, unused).
    shown = CONFIG_HELP if reads_config else argparse.SUPPRESS
    sub.add_argument("--config", default=argparse.SUPPRESS, metavar="PATH", help=shown)
    return sub


def _add_migrate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "copy a stopped gateway's store to another backend (SQLite <-> PostgreSQL)"
    migrate = _add(commands, "migrate-store", text, reads_config=False)
    migrate.add_argument("--from", dest="source", required=True, help="the store url to copy")
    migrate.add_argument("--to", dest="target", required=True, help="the store url to fill")
    migrate.add_argument(
        "--replace", action="store_true", help="empty a target that holds rows (else refused)"
    )


def _add_sessions(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sessions = _add(commands, "sessions", "list, show, delete or export sessions (offline)")
    actions = sessions.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = _add(actions, "list", "list sessions, newest first")
    _add_paging(listing)
    listing.add_argument("--channel", choices=get_args(Channel))
    listing.add_argument("--status", choices=get_args(Status))
    listing.add_argument("--agent")
    text = "only sessions whose chat id or session id holds TEXT, in any case (the API's q;"
    text += f" at most {MAX_SEARCH} characters)"
    listing.add_argument("--search", "--q", dest="q", metavar="TEXT", help=text)
    _add_one_session(actions, "show", "show one session and its current branch")
    _add_one_session(actions, "delete", "delete a session and its history")
    text = "print everything held of a session as JSON (docs/data.md)"
    export = _add_one_session(actions, "export", text)
    export.add_argument("--files", metavar="OUT.zip", help="also write a zip: the JSON and files")


def _add_one_session(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], name: str, text: str
) -> argparse.ArgumentParser:
    action = _add(actions, name, text)
    action.add_argument("session_id", metavar="ID", help="e.g. telegram-support-12345")
    return action


def _add_paging(listing: argparse.ArgumentParser) -> None:
    rows = f"rows to print, 1-{MAX_PAGE} (default: {DEFAULT_PAGE})"
    listing.add_argument("--limit", type=int, default=DEFAULT_PAGE, metavar="N", help=rows)
    listing.add_argument("--offset", type=int, default=0, metavar="N", help="rows to skip first")


def _add_quarantine(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    quarantine = _add(commands, "quarantine", "deliveries that could not be parsed (offline)")
    actions = quarantine.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = _add(actions, "list", "list quarantined deliveries as JSON, newest first")
    _add_paging(listing)
    listing.add_argument("--pending", action="store_true", help="only rows not replayed yet")
    replay = _add(actions, "replay", "re-parse quarantined deliveries; record those that pass")
    replay.add_argument("id", nargs="?", type=int, help="one row (default: every row not replayed)")
    _add_quarantine_delete(actions)


def _add_quarantine_delete(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "erase quarantined deliveries: one row, or every row whose body names a chat"
    delete = _add(actions, "delete", text)
    which = delete.add_mutually_exclusive_group(required=True)
    which.add_argument("id", nargs="?", type=int, help="the row to erase")
    chat = "every row of --channel whose body names this chat id (a user's erasure request)"
    which.add_argument("--chat", metavar="CHAT_ID", help=chat)
    delete.add_argument("--channel", choices=get_args(Channel), help="the channel of --chat")


def _add_telegram(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    telegram = _add(commands, "telegram", "Telegram bot set-up")
    actions = telegram.add_subparsers(dest="action", required=True, metavar="ACTION")
    hook = _add(actions, "set-webhook", "call setWebhook with the bot's secret and updates")
    hook.add_argument("--bot", required=True, help="the bot's name in [[telegram.bots]]")
    hook.add_argument("--url", required=True, help="public https URL of /webhooks/telegram/NAME")


# The numbers a listing takes and their ranges, those of the admin API's query (PageQuery): a
# page of 1..MAX_PAGE rows, an offset as large as the store can hold (SQLite and PostgreSQL
# integers are 64-bit: a larger one failed in the driver with a traceback).
NUMBERS = {"limit": ("--limit", 1, MAX_PAGE), "offset": ("--offset", 0, MAX_ROW_ID)}
TEXTS = {"agent": "--agent", "q": "--search"}  # the API refuses a NUL in any of its values


def check_arguments(args: argparse.Namespace) -> None:
    """ValueError or QuarantineNotFound (``error: ...``, exit 1) for an argument the admin API
    would refuse, in its words where the API has them, before any store is opened or created."""
    _check_numbers(args)
    _check_texts(args)
    row = getattr(args, "id", None)
    if row is not None and not 0 < row <= MAX_ROW_ID:  # the API's 404 for an id no row can have
        raise QuarantineNotFound(row)


def _check_numbers(args: argparse.Namespace) -> None:
    for name, (shown, low, high) in NUMBERS.items():
        value = getattr(args, name, None)
        if value is not None and not low <= value <= high:
            raise ValueError(f"{shown} must be between {low} and {high}, got {value}")


def _check_texts(args: argparse.Namespace) -> None:
    for name, shown in TEXTS.items():
        text = getattr(args, name, None)
        if text is not None and NUL in text:  # only main(argv) can pass one: argv holds none
            raise ValueError(f"{shown} must not hold a NUL character")
    search = getattr(args, "q", None)
    if search is not None and len(search) > MAX_SEARCH:
        raise ValueError(f"--search must be at most {MAX_SEARCH} characters, got {len(search)}")


def arguments_checked(handler: Handler) -> Handler:
    """``handler``, run only once ``check_arguments`` passed."""

    async def checked(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
        check_arguments(args)
        return await handler(settings, args, out)

    return checked


HANDLERS: dict[str, Handler] = {
    "purge": _commands.purge,
    "quarantine": arguments_checked(_quarantine.command),
    "sessions": arguments_checked(_commands.sessions),
    "telegram": _commands.telegram_command,
}


def _admin_value(raw: dict[str, Any]) -> object:
    """``admin.token`` as written in the config file (its ``${VAR}`` references kept)."""
    admin = raw.get("admin")
    return admin.get("token") if isinstance(admin, dict) else None


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    """Run one command; return the process exit status. A closed output pipe ends the command
    quietly with 141 (as a shell tool killed by SIGPIPE); any other failure to write the output,
    a stdout closed from the start included, is one ``error: cannot write the output: ...``
    line and 1."""
    reserve_standard_descriptors()
    output = guarded(out)
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit:  # --help's page is on sys.stdout, flushed here so a closed pipe is quiet
            guarded(sys.stdout).flush()
            raise
        status = _run(args, output)
        output.flush()  # here, not at the interpreter's exit, where a failure is a traceback
        return status
    except OutputError as exc:
        discard_rest(exc)
        if is_broken_pipe(exc):
            return BROKEN_PIPE_STATUS
        fail(f"cannot write the output: {exc}")
        return 1


def _run(args: argparse.Namespace, out: TextIO) -> int:
    configure_logging()
    path = resolve_config_path(args.config)
    try:
        if args.command == "migrate-store":  # needs two urls, not a config
            return asyncio.run(migrate_store(args, out))
        # Nothing here makes a missing admin.token_file: serve does, once it has started, so
        # that neither a command run before nor a failed start takes its token's print away.
        raw = read_config(path)
        settings = with_admin_token_file(parse_settings(raw, os.environ))
        configure_logging(settings)  # from here on every configured secret is scrubbed
        if args.command == "check-config":
            return asyncio.run(_commands.check_config(settings, path, out))
        if args.command == "serve":
            from .app import serve

            serve(settings, admin_token_source(_admin_value(raw), settings, os.environ))
            return 0
        return asyncio.run(HANDLERS[args.command](settings, args, out))
    except ConfigError as exc:  # `error: FILE: KEY: problem`; a file's own error names it once
        fail(str(exc) if exc.key == str(path) else f"{path}: {exc}")
    except (StoreError, ChannelError, AgentError, ValueError) as exc:  # InvalidSessionId too
        fail(str(exc))
    except KeyboardInterrupt:  # Ctrl-C in an offline command: its transaction rolled back
        fail("interrupted")
        return 130
    return 1


def fail(message: str) -> None:
    """A failure's one line on stderr: every command's is ``error: ...``."""
    print(f"error: {message}", file=sys.stderr)
