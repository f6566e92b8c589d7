"""Per-session files: a web user's uploads (``POST /web/sessions/{id}/attachments``) and an
operator's download of any session's file (``GET /api/sessions/{id}/attachments/{att_id}``).

An upload streams to a temporary file in the session's folder, stops at ``media.max_bytes``
(413, nothing kept), is renamed to its generated id, and only then gets its row: a row always
has its file. The client's file name is cleaned and kept as metadata, never used as a path.

Uploads are bounded like webhook bodies, with slots of their own so that uploads never take a
webhook's: at most ``server.max_concurrent_reads`` read at once (503 ``busy`` past it), and a
body that sends nothing for ``server.read_timeout`` seconds is dropped (408): a large file may
take long, a stalled one may not hold its slot.

The disk is the gateway's to protect, not the reverse proxy's: an upload that would leave less
than ``media.min_free_bytes`` free on the media root's disk is refused with 507 (checked before
the body is read and before each chunk is written), and a web session holds at most
``media.max_uploads_per_session`` uploaded files (409 past it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import quote

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import BadHttpMessage

from webhook_bot_gateway.channels.web import ACCOUNT, CHANNEL
from webhook_bot_gateway.store import (
    Session,
    SessionNotFound,
    Store,
    StoreError,
    make_private_folders,
    open_private,
    validate_session_id,
)

from .._admin._api_models import AttachmentAnswer, AttachmentOut
from .._admin._routes import ApiError, admin_route, check_identity, existing_session, store_failed
from .._http import ReadSlots, json_error
from .._keys import SETTINGS, STORE, WEB_IDS
from .._media.files import attachment_path, clean_name
from .._media.space import DiskFloor
from .ws import WEB_SESSION, short

log = logging.getLogger("gateway.web")

CHUNK = 64 * 1024
FIELD = "file"
DEFAULT_TYPE = "application/octet-stream"
_CONTENT_TYPE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,63}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
)


NOT_MULTIPART = (
    "send multipart/form-data with the file in its 'file' part (a URL-encoded form, such as an"
    ' HTML form without enctype="multipart/form-data", carries no file)'
)

NO_FILE_CHOSEN = "the 'file' part is empty and names no file (filename=\"\"): none was chosen"


UPLOADS = web.AppKey("upload_reads", ReadSlots)  # server.max_concurrent_reads, uploads only
UPLOAD_FLOOR = web.AppKey("upload_floor", DiskFloor)  # media.min_free_bytes
# session id -> its uploads being received in this process (media.max_uploads_per_session)
UNDER_WAY = web.AppKey("uploads_under_way", Counter[str])


class TooLarge(Exception):
    pass


class Truncated(Exception):
    """The body ended before the file part's closing boundary."""


class NoRoom(Exception):
    """The next chunk would take the disk under ``media.min_free_bytes``."""


async def upload(request: web.Request) -> web.Response:
    """POST /web/sessions/{id}/attachments (multipart, field ``file``)."""
    slots = request.app[UPLOADS]
    if not slots.take():
        message = f"{slots.size} uploads are being read already; retry later"
        return ApiError(503, "busy", message, close=True).response()
    try:
        return await _upload(request)
    except ApiError as exc:
        return exc.response()
    except StoreError as exc:  # the session's lookup or its row: the file is gone already
        return store_failed(request, exc).response()
    finally:
        slots.give_back()


async def _upload(request: web.Request) -> web.Response:
    sid = request.match_info["id"]
    try:
        validate_session_id(sid)
    except ValueError as exc:
        raise ApiError(400, "invalid_session_id", str(exc)) from None
    check_identity(request)
    store = request.app[STORE]
    web_id = WEB_SESSION.fullmatch(sid) is not None
    session = await store.get_session(sid) if web_id else None
    if session is None and not (web_id and request.app[WEB_IDS].issued(sid)):
        raise ApiError(404, "unknown_session", "no such web session")
    under_way = request.app[UNDER_WAY]
    ahead = under_way[sid]  # taken with no await between: uploads that overlap count each other
    under_way[sid] += 1
    try:
        await _refuse_unfit(request, session, ahead)
        return await _received(request, session, sid)
    finally:
        under_way[sid] -= 1
        if not under_way[sid]:
            del under_way[sid]


async def _received(request: web.Request, session: Session | None, sid: str) -> web.Response:
    attachment_id = uuid.uuid4().hex
    dest = attachment_path(Path(request.app[SETTINGS].media.root), sid, attachment_id)
    new_folder = not dest.parent.exists()
    try:
        return await _receive(request, session, dest, attachment_id)
    except BaseException:
        if new_folder:  # a refused upload leaves nothing, not even the session's folder
            with contextlib.suppress(OSError):  # not empty: another upload's file is in it
                dest.parent.rmdir()
        raise


async def _refuse_unfit(request: web.Request, session: Session | None, ahead: int) -> None:
    """The refusals made before a byte of the body is read: a file announced too large, a
    session holding as many files as it may (with the ``ahead`` of its uploads under way
    here), a disk without room for the file above the floor."""
    media, announced = request.app[SETTINGS].media, request.content_length
    if announced is not None and announced > media.max_bytes + CHUNK:
        raise _too_large(media.max_bytes)
    await _check_upload_count(request.app[STORE], session, media.max_uploads_per_session, ahead)
    if not request.app[UPLOAD_FLOOR].has_room(min(announced or 0, media.max_bytes)):
        raise _no_room()


async def _receive(
    request: web.Request, session: Session | None, dest: Path, attachment_id: str
) -> web.Response:
    """The file to ``dest``, then its row (and the session's, if not stored yet)."""
    sid, store = request.match_info["id"], request.app[STORE]
    limit = request.app[SETTINGS].media.max_bytes
    idle = request.app[SETTINGS].server.read_timeout
    try:
        async with asyncio.timeout(idle):
            part = await _file_part(request)
        make_private_folders(dest.parent)  # owner-only: users' files (docs/security.md)
        size = await _save(part, dest, limit, idle, request.app[UPLOAD_FLOOR])
    except TooLarge:
        raise _too_large(limit) from None
    except NoRoom:
        raise _no_room() from None
    except (Truncated, ValueError, BadHttpMessage):
        message = "the multipart body ends or breaks before the file's closing boundary"
        raise ApiError(400, "invalid_body", message, close=True) from None
    except TimeoutError:
        message = f"the upload sent nothing for {idle:g} s (server.read_timeout)"
        raise ApiError(408, "request_timeout", message, close=True) from None
    except ConnectionError:  # the client went away mid-upload: an INFO line, not a traceback
        log.info("web session %s: upload cut off: the client went away", short(sid))
        raise ApiError(
            400, "incomplete_body", "the connection closed mid-upload", close=True
        ) from None
    except FileNotFoundError:  # the session's folder went while the file was written
        raise await _folder_gone(store, sid, session) from None
    if size == 0 and part.filename == "":  # a browser's file input with no file chosen
        _remove(dest)
        raise ApiError(400, "missing_file", NO_FILE_CHOSEN, FIELD)
    name = clean_name(part.filename, "file")
    content_type = _content_type(part.headers.get("Content-Type"))
    try:
        if session is None:  # given out, not stored yet: the upload stores it
            starting = request.app[SETTINGS].agents.starting_agent
            await store.get_or_create_session(CHANNEL, ACCOUNT, sid.removeprefix("web-"), starting)
        attachment = await store.create_attachment(
            sid,
            name=name,
            content_type=content_type,
            source="upload",
            size=size,
            attachment_id=attachment_id,
        )
    except SessionNotFound:
        _remove(dest)
        raise ApiError(404, "unknown_session", "no such web session") from None
    except BaseException:
        _remove(dest)
        raise
    log.info("web session %s: attachment of %d bytes stored", short(sid), size)
    answer = AttachmentAnswer(
        attachment=AttachmentOut.model_validate(attachment, from_attributes=True)
    )
    return web.json_response(answer.model_dump(mode="json"), status=201)


async def _folder_gone(store: Store, sid: str, session: Session | None) -> ApiError:
    """The answer to an upload whose folder was removed under it: the session was deleted
    meanwhile (its files go with it), else something outside the gateway removed it."""
    if session is not None and await store.get_session(sid) is None:
        log.info("web session %s: upload cut off: the session was deleted", short(sid))
        return ApiError(
            404, "unknown_session", "the session was deleted during the upload", close=True
        )
    log.warning("web session %s: upload failed: its media folder was removed", short(sid))
    message = "the file's folder was removed while it was written"
    return ApiError(500, "storage_failed", message, close=True)


def _remove(saved: Path) -> None:
    """A saved file whose row could not be written: nothing of the upload stays."""
    saved.unlink(missing_ok=True)


async def _file_part(request: web.Request) -> BodyPartReader:
    if not request.content_type.startswith("multipart/"):
        raise ApiError(400, "invalid_body", NOT_MULTIPART)
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if isinstance(part, BodyPartReader) and part.name == FIELD:
                return part
            await part.release()
    except (ValueError, AssertionError, RuntimeError, BadHttpMessage):
        raise ApiError(400, "invalid_body", "the multipart body cannot be read") from None
    raise ApiError(400, "missing_file", "the multipart body has no 'file' field", FIELD)


async def _save(part: BodyPartReader, dest: Path, limit: int, idle: float, floor: DiskFloor) -> int:
    """Stream the part to ``dest``; TooLarge past ``limit`` bytes, NoRoom when a chunk would
    take the disk under the floor, TimeoutError when no chunk comes for ``idle`` seconds,
    Truncated when the body ends before the part's boundary (in every case nothing stays on
    disk)."""
    temp = dest.with_name(f".{dest.name}.{secrets.token_hex(4)}.part")
    size = 0
    try:
        with open_private(temp) as file:
            while chunk := await asyncio.wait_for(part.read_chunk(CHUNK), idle):
                size += len(chunk)
                if size > limit:
                    raise TooLarge
                if not floor.has_room(len(chunk)):
                    raise NoRoom
                file.write(chunk)
            if not part.at_eof():  # the stream ended, not the part: a file cut short
                raise Truncated
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, dest)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return size


def _content_type(header: str | None) -> str:
    value = (header or "").split(";", 1)[0].strip().lower()
    return value if _CONTENT_TYPE.fullmatch(value) else DEFAULT_TYPE


async def _check_upload_count(store: Store, session: Session | None, most: int, ahead: int) -> None:
    """409 when the session's uploaded files and the ``ahead`` of its uploads under way in this
    process (so that those never pass the bound together) reach ``most`` (a session not stored
    yet holds none). Processes on one store do not see each other's uploads under way: with
    several, a session may end one file over per other process uploading to it at that moment."""
    stored = 0
    if session is not None:
        try:
            files = await store.list_attachments(session.session_id)
        except SessionNotFound:
            raise ApiError(404, "unknown_session", "no such web session") from None
        stored = sum(file.source == "upload" for file in files)
    if stored + ahead >= most:
        message = f"a web session may hold {most} uploaded files (media.max_uploads_per_session)"
        raise ApiError(409, "too_many_uploads", message, close=True)


def _no_room() -> ApiError:
    message = "the server's disk is too full to keep the file; retry later"
    return ApiError(507, "insufficient_storage", message, close=True)


def _too_large(limit: int) -> ApiError:
    message = f"a file may hold {limit} bytes (media.max_bytes)"
    return ApiError(413, "too_large", message, close=True)  # the rest is not worth reading


@admin_route
async def download(request: web.Request) -> web.StreamResponse:
    """GET /api/sessions/{id}/attachments/{att_id}: the file, for an operator."""
    session = await existing_session(request)
    raw = request.match_info["att_id"]
    store = request.app[STORE]
    try:
        attachment = await store.get_attachment(session.session_id, raw)
    except ValueError:
        attachment = None
    if attachment is None or attachment.state != "ready":
        raise ApiError(404, "unknown_attachment", f"no downloaded attachment {raw!r} here")
    path = attachment_path(Path(request.app[SETTINGS].media.root), session.session_id, raw)
    if not path.is_file():
        return json_error(404, "unknown_attachment", "the attachment's file is missing")
    disposition = f"attachment; filename*=UTF-8''{quote(attachment.name)}"
    headers = {
        "Content-Type": attachment.content_type,
        "Content-Disposition": disposition,
        "X-Content-Type-Options": "nosniff",
    }
    return web.FileResponse(path, headers=headers)


def add_attachment_routes(app: web.Application) -> None:
    """Register the upload and the operator's download (before the /api catch-all)."""
    app[UPLOADS] = ReadSlots(app[SETTINGS].server.max_concurrent_reads)
    app[UNDER_WAY] = Counter()
    media = app[SETTINGS].media
    refused = "uploads are refused (507 insufficient_storage)"
    app[UPLOAD_FLOOR] = DiskFloor(Path(media.root), media.min_free_bytes, refused=refused)
    app.router.add_post("/web/sessions/{id}/attachments", upload)
    app.router.add_get("/api/sessions/{id:[^/]*}/attachments/{att_id}", download)
