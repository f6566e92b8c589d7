"""The offline commands: each opens what it needs, does one thing and closes it."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel

from webhook_bot_gateway.channels import ChannelError, RetryableSendError
from webhook_bot_gateway.store import (
    SessionNotFound,
    Store,
    is_postgres,
    sqlite_path,
    validate_session_id,
    why_no_store,
)

from .._accounts import dead_letter_warnings, gateway_registry
from .._admin._api_models import MessageOut, SessionDetail, SessionOut, SessionsPage
from .._admin._export import export_command
from .._admin_token import check_token_file_can_be_made
from .._demo_credentials import demo_credential_warnings
from .._logging import REDACTED, configured_secrets, secrets_pattern
from .._media.files import erase_session, require_media_root
from .._pipeline._purge import DAY, Purger, retention_of
from .._sandbox import sandbox_warnings
from .._store_open import naming_store_url, open_configured_store
from .._summary import mask_url, summarize
from ..config import Settings, own_url
from ._webhook_url import check_webhook_url

MEMORY = ":memory:"


async def check_store_exists(url: str) -> None:
    """ValueError or StoreError (``error: ...``, exit 1) unless the url names a gateway store
    that exists and can be read (not a folder, not a file that is no SQLite database):
    the offline commands work on a store ``gateway serve`` made, and never create one (a
    mistyped url would otherwise answer with an empty store, and leave a new file and folders,
    or a PostgreSQL schema's tables, behind). Nothing is written to find out."""
    if not is_postgres(url):
        _check_sqlite_file(sqlite_path(url))
    with naming_store_url():  # a file that is not a database, a server that does not answer
        why = await why_no_store(url)
    if why:
        raise ValueError(
            f"store.url names no gateway store ({why}): check the url;"
            " `gateway serve` creates the store at its first start"
        )


def _check_sqlite_file(path: str) -> None:
    if path == MEMORY:
        raise ValueError(
            "store.url is sqlite:///:memory:, which holds nothing outside a running gateway"
        )
    if Path(path).is_dir():
        raise ValueError(f"store.url: {path} cannot be used as a SQLite store: it is a folder")
    if not Path(path).is_file():
        raise ValueError(
            f"no SQLite store at {path} (store.url): check the url and the working directory;"
            " `gateway serve` creates the store at its first start"
        )


@asynccontextmanager
async def opened_store(settings: Settings) -> AsyncIterator[Store]:
    """The configured store, which must exist already (``check_store_exists``)."""
    await check_store_exists(settings.store.url)
    store = await open_configured_store(settings)
    try:
        yield store
    finally:
        await store.aclose()


def dump(answer: BaseModel, out: TextIO) -> None:
    """An answer model as the admin API sends it (datetimes in ISO 8601), indented."""
    data = answer.model_dump(mode="json")
    print(json.dumps(data, indent=2, ensure_ascii=False), file=out)


class SessionShown(SessionDetail):
    """``gateway sessions show``: ``GET /api/sessions/{id}`` and its current branch."""

    messages: list[MessageOut]


async def check_config(settings: Settings, path: Path, out: TextIO) -> int:
    """OK and the summary once every check passed, the agents' imports and keys included;
    nothing is written (``admin.token_file`` is made by ``gateway serve`` only)."""
    check_token_file_can_be_made(settings, probe=False)  # as serve would refuse it
    registry = await gateway_registry(settings)  # imports tools, checks handoffs and keys
    try:
        lines = [*summarize(settings), f"agents declared: {', '.join(registry.names)}"]
        lines += [f"warning: {warning}" for warning in sandbox_warnings(settings)]
        lines += [f"warning: {warning}" for warning in demo_credential_warnings(settings)]
        lines += [f"warning: {warning}" for warning in settings.agents.timing_warnings()]
        handoff = settings.dispatcher.dead_letter_handoff
        if handoff and registry.get(handoff) is None:
            lines.append(
                f"warning: dispatcher.dead_letter_handoff {handoff!r} is not a declared agent;"
                " dead-lettered sessions will stay with their agent"
            )
        lines += [f"warning: {warning}" for warning in dead_letter_warnings(settings)]
    finally:
        await registry.aclose()
    print(f"config {path}: OK", file=out)
    for line in lines:
        print(f"  {line}", file=out)
    return 0


async def purge(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    """Expired dedup rows now; with ``store.retention_days``, one retention pass too."""
    retention = retention_of(settings)
    root_missing = retention is not None and not retention.media_root.is_dir()
    async with opened_store(settings) as store:
        removed = await store.purge()
        purger = Purger(
            store,
            interval=DAY,
            keep_seconds=DAY,
            retention=retention,
            media_root=Path(settings.media.root),
        )
        history = await purger.retain_once()
        if retention is None:
            await purger.sweep_once()
    print(f"purged {removed} expired processed-message row(s)", file=out)
    if history is not None:
        counts = ", ".join(f"{table} {n}" for table, n in history.counts.items())
        days = settings.store.retention_days
        print(f"retention ({days} days): {counts}, files {len(history.attachments)}", file=out)
        if root_missing and history.attachments:
            return _no_media_root_status(Path(settings.media.root), len(history.attachments))
    return _files_left_status(purger.files_left)


def _no_media_root_status(root: Path, files: int) -> int:
    """1 after one stderr line: attachment rows went, but their files were looked for in a media
    root that is no folder here (a relative media.root read from another working directory)."""
    print(
        f"error: {files} attachment row(s) deleted, but media.root is no folder here"
        f" ({root.absolute()}; a relative media.root is read from the working directory):"
        " their files, named by attachment id, stay in the media root gateway serve uses;"
        " remove them by hand, and run purge where gateway serve runs or give media.root"
        " as an absolute path",
        file=sys.stderr,
    )
    return 1


def _files_left_status(left: tuple[Path, ...]) -> int:
    """0, or 1 after one stderr line naming the files of purged rows that are still on disk."""
    if not left:
        return 0
    paths = ", ".join(str(path) for path in left)
    print(
        f"error: {len(left)} file(s) of deleted rows could not be removed: {paths};"
        " remove them by hand",
        file=sys.stderr,
    )
    return 1


async def sessions(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    if args.action != "list":
        validate_session_id(args.session_id)  # before the store is opened (or created)
    async with opened_store(settings) as store:
        if args.action == "list":
            return await _list_sessions(store, args, out)
        if args.action == "show":
            return await _show_session(store, args.session_id, out)
        if args.action == "export":
            return await export_command(store, Path(settings.media.root), args, out)
        return await _delete_session(store, Path(settings.media.root), args.session_id, out)


async def _list_sessions(store: Store, args: argparse.Namespace, out: TextIO) -> int:
    """``GET /api/sessions``'s answer, from the same store calls with the same arguments."""
    filters = {
        "channel": args.channel,
        "status": args.status,
        "agent": args.agent,
        "search": args.q,
    }
    found = await store.list_sessions(args.limit, args.offset, **filters)
    total = await store.count_sessions(**filters)
    sessions = [SessionOut.model_validate(s, from_attributes=True) for s in found]
    dump(SessionsPage(sessions=sessions, total=total), out)
    return 0


async def _show_session(store: Store, session_id: str, out: TextIO) -> int:
    session = await store.get_session(session_id)
    if session is None:
        raise SessionNotFound(session_id)  # `error: no session 'ID'`, on stderr
    branch = await store.get_branch(session_id)
    detail = SessionDetail.of(session, await store.list_outbox(session_id))
    messages = [MessageOut.of(m) for m in branch]
    dump(SessionShown(**detail.model_dump(), messages=messages), out)
    return 0


async def _delete_session(store: Store, root: Path, session_id: str, out: TextIO) -> int:
    attachments = await store.list_attachments(session_id)
    require_media_root(root, session_id, sum(1 for a in attachments if a.state == "ready"))
    erased = await erase_session(store, root, session_id)
    if erased is None:
        raise SessionNotFound(session_id)
    print(f"deleted session {session_id}", file=out)
    left = erased.folder_left
    if left is None:
        return 0
    print(
        f"error: the session's rows are deleted, but its folder {left.path} could not be"
        f" removed wholly ({left.files} file(s) left: {left.reason}); remove it by hand",
        file=sys.stderr,
    )
    return 1


async def telegram_command(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    from webhook_bot_gateway.channels.telegram import set_webhook

    bots = {bot.name: bot for bot in settings.telegram.bots}
    if args.bot not in bots:
        known = ", ".join(sorted(bots)) or "none configured"
        raise ValueError(f"telegram.bots: no bot named {args.bot!r} (known: {known})")
    for warning in check_webhook_url(args.url, args.bot):  # before anything is sent
        print(f"warning: {warning}", file=sys.stderr)
    telegram = settings.telegram
    secrets = configured_secrets(settings)
    try:
        await set_webhook(
            bots[args.bot],
            args.url,
            telegram.api_base_url,
            request_timeout=telegram.request_timeout,
            redact=secrets,  # its error is printed: none of them may be in it
        )
    except RetryableSendError as exc:
        raise _unanswered_sandbox(settings, exc) from None
    print(f"webhook of bot {args.bot} set to {_shown_url(args.url, secrets)}", file=out)
    return 0


def _unanswered_sandbox(settings: Settings, exc: RetryableSendError) -> ChannelError:
    """``exc``, with what to do when the Bot API that did not answer is this gateway's own
    sandbox: only a running ``gateway serve`` answers there."""
    base = settings.telegram.api_base_url
    if not (settings.sandbox.enabled and base.startswith(own_url(settings) + "/")):
        return exc
    return ChannelError(
        exc.channel,
        f"{exc.reason}; telegram.api_base_url is this gateway's own sandbox ({mask_url(base)}),"
        " which answers only while `gateway serve` runs with this config: start it first",
    )


def _shown_url(url: str, secrets: tuple[str, ...]) -> str:
    """``url`` without its password (``user:***@``), its query or a configured secret."""
    masked = mask_url(url)
    pattern = secrets_pattern(secrets)
    return masked if pattern is None else pattern.sub(REDACTED, masked)
