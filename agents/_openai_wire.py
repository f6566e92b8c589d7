"""The chat completions wire format: requests from our messages, responses to ours."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from webhook_bot_gateway.store import storable_text

from ._model import ImagePart, ModelMessage, ModelResponse, ToolCall, ToolSpec


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


EMPTY_RESULT = "(the tool returned nothing)"  # Anthropic-backed servers refuse an empty one


class _Function(_Wire):
    name: str = ""  # checked, with the id, before the call is stored (see _normalize)
    arguments: str | dict[str, Any] | None = None  # some servers send an object


class _ToolCall(_Wire):
    id: str | None = None
    function: _Function


class _Message(_Wire):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None
    refusal: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _joined_text_parts(cls, value: object) -> object:
        """Some compatible servers answer content as parts (``[{"type": "text", "text":
        ...}]``, as requests may send it): their texts, joined; a part of another kind is
        refused as before."""
        if not isinstance(value, list):
            return value
        texts = [_text_of(part) for part in value]
        if not texts or any(text is None for text in texts):
            return value  # not text parts only: the str check refuses it
        return "".join(text for text in texts if text is not None)


def _text_of(part: object) -> str | None:
    """The text of a ``{"type": "text", "text": ...}`` content part, else None."""
    if isinstance(part, dict) and part.get("type") == "text":
        text = part.get("text")
        return text if isinstance(text, str) else None
    return None


class _Choice(_Wire):
    message: _Message
    finish_reason: str | None = None


class UnusableAnswer(ValueError):
    """A chat completion whose answer cannot be used: a failed model call (the turn fails)."""


class EmptyAnswer(UnusableAnswer):
    """A completion with no text (or only white space), no tool call and no refusal."""


class IncompleteAnswer(UnusableAnswer):
    """A completion the server says is not whole (its ``finish_reason``): cut off at a length
    limit, stopped by a content filter, or broken by an error. Its text is never a reply."""


# The finish reasons of an answer that is not whole, and what each means (OpenAI's, Azure's
# and OpenRouter's; Mistral's model_length).
NOT_WHOLE = {
    "length": "the model's answer was cut off at a length limit (the server's max tokens, or"
    " the model's context)",
    "model_length": "the model's answer was cut off at the model's context length",
    "content_filter": "the provider's content filter stopped the model's answer",
    "error": "the server failed in the middle of the model's answer",
}


class _Completion(_Wire):
    choices: list[_Choice]


def request_body(
    model: str,
    messages: Sequence[ModelMessage],
    tools: Sequence[ToolSpec],
    *,
    vision: bool = False,
) -> dict[str, Any]:
    """The JSON body of a POST to ``{base_url}/chat/completions``; images only with ``vision``."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [_message(m, vision=vision) for m in messages],
    }
    if tools:
        body["tools"] = [_tool(spec) for spec in tools]
    return body


def parse_completion(payload: bytes, clean: Callable[[str], str] = str) -> ModelResponse:
    """Our response from the server's; ValueError when it is not a completion, an
    ``UnusableAnswer`` when its answer is empty or not whole. The error never repeats the body;
    the server's words it keeps (a ``finish_reason``) go through ``clean`` (the backend's: it
    takes the API key out) before they are cut short."""
    completion = _completion(payload)
    if not completion.choices:
        raise ValueError("a chat completion without choices")
    choice = completion.choices[0]
    message = choice.message
    calls = tuple(_call(call) for call in message.tool_calls or ())
    refusal = message.refusal or None
    if (why := NOT_WHOLE.get(choice.finish_reason or "")) is not None:
        size = len(message.content or "")
        raise IncompleteAnswer(
            f"{why}, finish_reason {choice.finish_reason!r}: {size} characters of text and"
            f" {len(calls)} tool call(s), not used"
        )
    if not calls and not _has_text(message.content) and not _has_text(refusal):
        reason = choice.finish_reason
        raise EmptyAnswer(
            "the model gave an empty answer (no text, no tool call)"
            + (f", finish_reason {clean(reason)[:40]!r}" if reason else "")
        )
    return ModelResponse(text=message.content or None, tool_calls=calls, refusal=refusal)


def _completion(payload: bytes) -> _Completion:
    """The body as a completion. JSON that holds half a character (``\\ud83d`` alone: a
    server that cut an emoji in two), which pydantic's parser refuses whole, is read with
    Python's, and each half character becomes U+FFFD (in a text, a refusal, a call's
    arguments: no UTF-8 text, so no stored message, holds it)."""
    try:
        return _Completion.model_validate_json(payload)
    except ValidationError as exc:
        if exc.errors()[0]["type"] != "json_invalid":
            raise ValueError(_what_is_wrong(exc)) from None
        try:
            body = _storable(json.loads(payload))
        except ValueError:  # not JSON for Python either: pydantic's words say why
            raise ValueError(_what_is_wrong(exc)) from None
    try:
        return _Completion.model_validate(body)
    except ValidationError as exc:
        raise ValueError(_what_is_wrong(exc)) from None


def _storable(value: Any) -> Any:
    """``value`` decoded from JSON, each of its strings as ``storable_text`` makes it."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, list):
        return [_storable(item) for item in value]
    if isinstance(value, dict):
        return {storable_text(key): _storable(item) for key, item in value.items()}
    return value


def _has_text(text: str | None) -> bool:
    return bool(text and not text.isspace())


def _what_is_wrong(exc: ValidationError) -> str:
    """Why a body is not a chat completion: not JSON, or its first failing field; never the
    body itself (a proxy's error page, a truncated answer: it may hold anything)."""
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    first = errors[0]
    if first["type"] == "json_invalid":
        return f"not JSON ({first['msg'].removeprefix('Invalid JSON: ')})"
    where = ".".join(map(str, first["loc"])) or "the body"
    more = f" (and {len(errors) - 1} more error(s))" if len(errors) > 1 else ""
    return f"not a chat completion: {where}: {first['msg']}{more}"


def _call(call: _ToolCall) -> ToolCall:
    arguments = call.function.arguments
    if arguments is None:
        arguments = "{}"
    elif not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return ToolCall(call.id or "", call.function.name, arguments)


def _message(message: ModelMessage, *, vision: bool = False) -> dict[str, Any]:
    # only an assistant message may have null content (when it carries tool calls)
    content: str | None | list[dict[str, Any]]
    content = message.text if message.role == "assistant" else message.text or ""
    if vision and message.images and message.role == "user":
        content = [{"type": "text", "text": message.text or ""}]
        content += [_image(image) for image in message.images]
    out: dict[str, Any] = {"role": message.role, "content": content}
    if message.role == "assistant" and message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    if message.role == "tool":
        out["content"] = message.text or EMPTY_RESULT
        out["tool_call_id"] = message.tool_call_id
    return out


def _image(image: ImagePart) -> dict[str, Any]:
    data = base64.b64encode(image.data).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:{image.content_type};base64,{data}"}}


def _tool(spec: ToolSpec) -> dict[str, Any]:
    function = {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
    return {"type": "function", "function": function}
