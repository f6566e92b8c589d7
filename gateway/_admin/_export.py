"""A user's data in one document: ``GET /api/sessions/{id}/export`` and ``gateway sessions export``.

The document (``SessionExport``) holds the session, every message of every branch with its id
and parent (the whole history DAG, not only the current branch), the event log and the
attachments' metadata. docs/export.schema.json is its JSON Schema, generated from the model
(tests/gateway/test_export.py fails while they differ). The zip form holds ``session.json``
and ``files/<attachment id>`` for each attachment whose file is stored.
"""

from __future__ import annotations

import argparse
import json
import logging
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal, TextIO

from pydantic import Field

from webhook_bot_gateway.store import Attachment, Message, SessionNotFound, Store

from .._media.files import attachment_path, require_media_root
from ._api_models import EventOut, SessionDetail, Timestamp, _Input, _Output

log = logging.getLogger("gateway.export")

JSON_NAME = "session.json"
FILES = "files"


class ExportQuery(_Input):
    files: Literal["zip"] | None = Field(
        default=None, description="zip: a zip of session.json and the stored files"
    )


class ExportedMessage(_Output):
    """One message of any branch, as stored."""

    id: int
    parent_id: int | None = Field(description="the message it follows; null for a root")
    role: Literal["system", "user", "assistant", "tool", "operator"]
    text: str | None
    agent: str | None = Field(description="the agent (or 'operator') that wrote it")
    data: dict[str, Any] = Field(description="tool calls, references of inbound messages, media")
    created_at: Timestamp


class ExportedAttachment(_Output):
    """A file of the session: its metadata (the bytes are in the zip form only)."""

    id: str = Field(pattern="^[0-9a-f]{32}$")
    name: str = Field(description="the cleaned original file name")
    content_type: str
    size: int = Field(ge=0)
    state: Literal["ready", "pending", "failed"]
    source: Literal["upload", "whatsapp", "telegram"]
    message_key: str | None
    error: str | None
    created_at: Timestamp
    file: str | None = Field(
        default=None,
        description="the file's path inside the zip (files/<id>); null in the plain JSON or"
        " when no file is stored",
    )


class SessionExport(_Output):
    """Everything the gateway holds of one session (docs/data.md#export)."""

    format: Literal["gateway.session-export"] = "gateway.session-export"
    version: Literal[1] = 1
    exported_at: Timestamp
    session: SessionDetail = Field(description="as GET /api/sessions/{id} gives it")
    messages: list[ExportedMessage] = Field(
        description="every message of every branch, in id order; parent_id links them and"
        " session.head_id names the tip of the current branch"
    )
    events: list[EventOut] = Field(description="the event log, in seq order")
    attachments: list[ExportedAttachment]


def export_schema() -> dict[str, Any]:
    """The JSON Schema of the document (docs/export.schema.json holds exactly this)."""
    schema = SessionExport.model_json_schema(mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


async def build_export(store: Store, session_id: str) -> SessionExport | None:
    """The document of one session, or None if there is none. Each part is one read: a turn
    committing meanwhile may show in a later part and not in an earlier one."""
    session = await store.get_session(session_id)
    if session is None:
        return None
    try:
        messages = await store.all_messages(session_id)
        events = await store.list_events(session_id)
        outbox = await store.list_outbox(session_id)  # its parked replies are counted
    except SessionNotFound:  # erased meanwhile
        return None
    attachments = await store.list_attachments(session_id)
    return SessionExport(
        exported_at=datetime.now(UTC),
        session=SessionDetail.of(session, outbox),
        messages=[_message(m) for m in messages],
        events=[EventOut.model_validate(e, from_attributes=True) for e in events],
        attachments=[_attachment(a) for a in attachments],
    )


def _message(message: Message) -> ExportedMessage:
    return ExportedMessage.model_validate(message, from_attributes=True)


def _attachment(attachment: Attachment) -> ExportedAttachment:
    return ExportedAttachment.model_validate(attachment, from_attributes=True)


def export_json(document: SessionExport) -> bytes:
    """The document as UTF-8 JSON, indented."""
    data = document.model_dump(mode="json")
    return json.dumps(data, indent=2, ensure_ascii=False).encode()


def write_zip(document: SessionExport, root: Path, out: IO[bytes]) -> None:
    """Write the zip form to ``out``: the files that are stored, and the JSON naming them."""
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        listed = []
        session_id = document.session.session_id
        for attachment in document.attachments:
            path = attachment_path(root, session_id, attachment.id)
            if attachment.state == "ready" and _stored(path, session_id, attachment.id):
                name = f"{FILES}/{attachment.id}"
                archive.write(path, name)
                attachment = attachment.model_copy(update={"file": name})
            listed.append(attachment)
        with_files = document.model_copy(update={"attachments": listed})
        archive.writestr(JSON_NAME, export_json(with_files))


def _stored(path: Path, session_id: str, attachment_id: str) -> bool:
    """Whether a ready attachment's file is there; a WARNING (the attachment's id, never the
    user's file name) when it is not: the zip then says ``file: null`` for a file it should hold."""
    if path.is_file():
        return True
    log.warning(
        "export of session %s: the file of ready attachment %s is missing under media.root;"
        " exported with file null",
        session_id,
        attachment_id,
    )
    return False


async def export_command(store: Store, root: Path, args: argparse.Namespace, out: TextIO) -> int:
    """``gateway sessions export ID [--files OUT.zip]``: the JSON on ``out``; with ``--files``
    the zip too, written beside its name and renamed into place only once whole."""
    target = None if args.files is None else Path(args.files)
    if target is not None:
        _check_target(target)
    document = await build_export(store, args.session_id)
    if document is None:
        raise SessionNotFound(args.session_id)  # `error: no session 'ID'`, on stderr
    if target is not None:
        stored = sum(1 for a in document.attachments if a.state == "ready")
        require_media_root(root, args.session_id, stored)
        _write_zip_file(document, root, target)
    out.write(export_json(document).decode() + "\n")
    return 0


def _check_target(target: Path) -> None:
    """ValueError before anything is read or written: a zip is never written over a file."""
    if target.exists():
        raise ValueError(f"--files {target} exists already; name a new file")
    if not target.parent.is_dir():
        raise ValueError(f"--files {target}: no folder {target.parent}")


def _write_zip_file(document: SessionExport, root: Path, target: Path) -> None:
    partial = target.with_name(f".{target.name}.part")
    try:
        with partial.open("wb") as spool:
            write_zip(document, root, spool)
        partial.replace(target)
    except BaseException as exc:
        partial.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ValueError(f"--files {target}: {exc.strerror or exc}") from None
        raise
