"""The ``/ws`` frames: client frames validated with pydantic, server frames built in one place."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from webhook_bot_gateway.store import SessionEvent

from .._admin._api_models import MAX_JSON_DEPTH
from .._admin._routes import NotJsonValue, nested_deeper_than, refuse_constant

ClientFrameType = Literal["message", "cancel_turn"]
CLIENT_ID = r"^[A-Za-z0-9_.:-]{1,128}$"
_CLIENT_ID = re.compile(CLIENT_ID)


class _Frame(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _storable(text: str) -> str:
    """Text the store can hold: no NUL (PostgreSQL refuses it) and no lone surrogate (a
    ``\\ud800`` escape is valid JSON but no Unicode text, and cannot be written as UTF-8)."""
    if "\x00" in text:
        raise PydanticCustomError("nul_character", "must not hold a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise PydanticCustomError("lone_surrogate", "must not hold a lone surrogate") from None
    return text


def _once_each(ids: tuple[str, ...]) -> tuple[str, ...]:
    """An attachment listed twice is attached once, where it first appears."""
    return tuple(dict.fromkeys(ids))


class MessageData(_Frame):
    text: Annotated[str, AfterValidator(_storable)] = ""
    client_id: str = Field(min_length=1, max_length=128, pattern=CLIENT_ID)
    attachments: Annotated[tuple[str, ...], AfterValidator(_once_each)] = ()


class MessageFrame(_Frame):
    type: Literal["message"]
    data: MessageData


class CancelFrame(_Frame):
    type: Literal["cancel_turn"]
    data: dict[str, Any] | None = None  # takes no data: an object or null is ignored


class FrameError(Exception):
    """A frame the server refuses; the socket stays open and gets an ``error`` frame."""

    def __init__(self, code: str, message: str, client_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.client_id = client_id


def parse_frame(text: str) -> MessageFrame | CancelFrame:
    """A client frame; FrameError naming what is wrong."""
    try:
        raw = json.loads(text, parse_constant=refuse_constant)
    except RecursionError:  # json's C scanner gives up deeper than the interpreter's stack
        raise _too_deep() from None
    except NotJsonValue as exc:
        raise FrameError("invalid_json", exc.said_of("the frame")) from None
    except ValueError:
        raise FrameError("invalid_json", "the frame is not JSON") from None
    if nested_deeper_than(raw, MAX_JSON_DEPTH):
        raise _too_deep()
    if not isinstance(raw, dict):
        raise FrameError("invalid_frame", "a frame is a JSON object with 'type' and 'data'")
    kind = raw.get("type")
    model: type[MessageFrame] | type[CancelFrame]
    if kind == "message":
        model = MessageFrame
    elif kind == "cancel_turn":
        model = CancelFrame
    else:
        raise FrameError("unknown_type", f"unknown frame type {kind!r}; use message or cancel_turn")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "frame"
        raise FrameError("invalid_frame", f"{field}: {first['msg']}", _client_id(raw)) from None


def _client_id(raw: dict[str, Any]) -> str | None:
    """The refused message's ``client_id``, when it is one: the error is then about it."""
    data = raw.get("data")
    value = data.get("client_id") if isinstance(data, dict) else None
    return value if isinstance(value, str) and _CLIENT_ID.match(value) else None


def _too_deep() -> FrameError:
    message = f"the frame nests arrays and objects deeper than {MAX_JSON_DEPTH} levels"
    return FrameError("json_too_deep", message)


def error_frame(code: str, message: str, client_id: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"code": code, "message": message}
    if client_id is not None:
        data["client_id"] = client_id
    return {"type": "error", "data": data}


def event_frame(event: SessionEvent) -> dict[str, Any]:
    """A logged event as the frame of its kind, with its seq."""
    return {
        "type": event.kind,
        "seq": event.seq,
        "data": {**event.detail, "at": event.created_at.isoformat()},
    }
