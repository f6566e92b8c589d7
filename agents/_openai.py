"""The ``openai`` backend: OpenAI-compatible ``/chat/completions`` over aiohttp.

Works with OpenAI, Azure-style gateways, vLLM, llama.cpp server and Ollama. Retries 429,
5xx and network errors with exponential backoff (no jitter, so tests can assert the
delays), honouring the server's ``Retry-After`` (seconds or a date; ``retry-after-ms`` first)
up to ``max_backoff``; a longer one, or a wait that would outlast the running turn, gives up at
once. The API key never reaches a log line or
an error: every ``ModelBackendError`` is made by ``_error``, which takes the key out of its
text, and a refusal's body is never repeated, but for a JSON error's message, code and type
(what tells the operator what is wrong), without the key and bounded (see ``_refusal``).

At most ``max_concurrency`` requests of one model are in flight (a semaphore: providers
rate-limit per model); the rest wait for a slot, outside the request's ``timeout``. The backend's
own HTTP session pools ``max_connections`` keep-alive connections; an injected session keeps
its own connector.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, quote_plus

import aiohttp

from ._config import OpenAIModelConfig
from ._deadline import time_left
from ._errors import ContextTooLong, EmptyModelAnswer, ModelBackendError
from ._model import ModelMessage, ModelResponse, ToolSpec
from ._openai_wire import EmptyAnswer, UnusableAnswer, parse_completion, request_body

logger = logging.getLogger("agents.openai")

Sleep = Callable[[float], Awaitable[None]]
_RETRY_STATUSES = frozenset({408, 409, 429})
REDACTED = "<redacted>"  # as the gateway's log filter writes a secret
# A shorter key is not taken out of errors (nor out of log lines, by the gateway's filter): it
# would garble every message and protect nothing.
MIN_KEY_CHARS = 4
MAX_SAID = 300  # characters of a JSON error's message kept in the error
MAX_WORD = 60  # ... of its code and of its type
MAX_NETWORK = 200  # ... of a network error's own text (aiohttp's parser may quote the server)
# Bytes of an answer read at most: a completion is a few KiB (a 128k-token one under 1 MiB); a
# broken server or proxy streaming for the whole timeout must not fill the process's memory.
MAX_ANSWER_BYTES = 8 * 1024 * 1024


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class OpenAIModel:
    """A ``ModelBackend`` talking to one model of an OpenAI-compatible server."""

    def __init__(
        self,
        name: str,
        config: OpenAIModelConfig,
        *,
        api_key: str | None = None,
        session: aiohttp.ClientSession | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self._config = config
        self._api_key = api_key
        self._session = session
        self._owns_session = session is None
        self._sleep = sleep
        self._clock = clock  # Unix seconds, for a Retry-After given as a date
        self._url = config.base_url.rstrip("/") + "/chat/completions"
        self._slots = asyncio.Semaphore(config.concurrency)

    def __repr__(self) -> str:  # the key stays out of reprs, hence out of tracebacks and logs
        return f"OpenAIModel(name={self.name!r}, model={self._config.model!r}, url={self._url!r})"

    async def complete(
        self, messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        """POST the context; retry transient failures; parse the first choice."""
        wire = request_body(self._config.model, messages, tools, vision=self._config.vision)
        body = json.dumps(wire)
        for attempt in range(self._config.max_retries + 1):
            try:
                async with self._slots:  # held for one try, not across the backoff
                    return await self._post(body)
            except _Retryable as exc:
                if attempt == self._config.max_retries:
                    message = f"gave up after {attempt + 1} tries: {exc}"
                    raise self._error(message, retry_after=exc.retry_after) from None
                delay = self._delay(attempt, exc.retry_after)
                self._check_wait(attempt, exc, delay)
                reason = self._without_key(str(exc))
                logger.warning("model %s: %s; retry in %.3gs", self.name, reason, delay)
                await self._sleep(delay)
        raise AssertionError("unreachable")

    def _check_wait(self, attempt: int, exc: _Retryable, delay: float) -> None:
        """Give up at once rather than wait longer than ``max_backoff`` for a server's
        ``Retry-After``, or past the turn's deadline: the wait would use up the turn, which
        then times out anyway (the dispatcher retries the turn later, as after any error)."""
        tries = f"gave up after {attempt + 1} tries"
        limit = self._config.max_backoff
        if exc.retry_after is not None and exc.retry_after > limit:
            message = (
                f"{exc}; it asked to wait {exc.retry_after:g}s (Retry-After), more than"
                f" max_backoff ({limit:g}s): {tries}"
            )
            raise self._error(message, retry_after=exc.retry_after)
        left = time_left()
        if left is not None and delay >= left:
            message = (
                f"{exc}; the next try would wait {delay:g}s, and the turn has {max(left, 0):.3g}s"
                f" left: {tries}"
            )
            raise self._error(message, retry_after=exc.retry_after)

    def _error(
        self,
        message: str,
        status: int | None = None,
        *,
        retry_after: float | None = None,
        kind: type[ModelBackendError] = ModelBackendError,
    ) -> ModelBackendError:
        """The one maker of this backend's errors: whatever went into ``message`` (a server's
        words, a network error's text), the key does not come out."""
        return kind(self.name, self._without_key(message), status, retry_after=retry_after)

    def _without_key(self, text: str) -> str:
        return without_secret(text, self._api_key)

    async def aclose(self) -> None:
        """Close the HTTP session if this backend opened it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def _post(self, body: str) -> ModelResponse:
        session = self._client()
        timeout = aiohttp.ClientTimeout(total=self._config.timeout)
        try:
            async with session.post(
                self._url, data=body, headers=self._headers(), timeout=timeout
            ) as response:
                payload = await _read_capped(response, MAX_ANSWER_BYTES)
                self._check(response, payload)
                status, content_type = response.status, response.content_type  # no parameters
        except (aiohttp.ClientError, TimeoutError) as exc:
            said = _one_line(self._without_key(str(exc)), MAX_NETWORK)
            raise _Retryable(f"{type(exc).__name__} {said}".strip()) from None
        try:
            return parse_completion(payload, self._without_key)
        except EmptyAnswer as exc:  # a failed call, unless its agent replied (see the loop)
            raise self._error(str(exc), kind=EmptyModelAnswer) from None
        except UnusableAnswer as exc:  # a failed call: the turn fails, and is retried
            raise self._error(str(exc)) from None
        except ValueError as exc:
            self._check_error_body(status, content_type, payload)
            what = _described(content_type, payload, self._without_key)
            raise self._error(f"{exc} ({what})") from None

    def _check_error_body(self, status: int, content_type: str, payload: bytes) -> None:
        """A 2xx whose body is an error (OpenRouter's, when the model failed after it began):
        its words, retried or not as the status its ``code`` names says (a code that names
        none: retried, as a server's failure)."""
        error = _json_error(payload)
        if error is None:
            return
        code = error.get("code")
        named = code if isinstance(code, int) and 400 <= code <= 599 else 500
        said = _refusal(status, content_type, payload, self._without_key)
        if named in _RETRY_STATUSES or named >= 500:
            raise _Retryable(said)
        raise self._error(said, named)

    def _check(self, response: aiohttp.ClientResponse, payload: bytes) -> None:
        status = response.status
        if status < 400:
            return
        said = _refusal(status, response.content_type, payload, self._without_key)
        if status in _RETRY_STATUSES or status >= 500:
            raise _Retryable(said, _asked_wait(response.headers, self._clock()))
        kind = ContextTooLong if _context_overflow(status, payload) else ModelBackendError
        raise self._error(said, status, kind=kind)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        return float(min(self._config.backoff * 2**attempt, self._config.max_backoff))

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._config.max_connections)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session


def _asked_wait(headers: Mapping[str, str], now: float) -> float | None:
    """The seconds a server asked to wait: Azure's (and OpenAI SDK's) ``retry-after-ms``,
    else ``Retry-After`` in seconds or as an HTTP date; None when it asked nothing we read."""
    millis = _number(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = headers.get("Retry-After")
    if value is None:
        return _exhausted_limit_reset(headers)
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None  # neither: our own backoff
    if when.tzinfo is None:  # an HTTP date is GMT; one without a zone is read so
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


_DURATION = re.compile(
    r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?"
)


def _exhausted_limit_reset(headers: Mapping[str, str]) -> float | None:
    """OpenAI's own word on a 429 without Retry-After: when a limit whose remaining count is 0
    resets (``x-ratelimit-remaining-requests: 0`` with ``x-ratelimit-reset-requests: 6m0s``;
    the same for tokens); the later of those, None when none is spent."""
    waits = []
    for limit in ("requests", "tokens"):
        if _number(headers.get(f"x-ratelimit-remaining-{limit}")) == 0:
            wait = _duration(headers.get(f"x-ratelimit-reset-{limit}"))
            if wait is not None:
                waits.append(wait)
    return max(waits) if waits else None


def _duration(value: str | None) -> float | None:
    """Seconds of a duration as OpenAI writes it (``1s``, ``6m0s``, ``20ms``, ``1h2m3.5s``)."""
    if not value:
        return None
    found = _DURATION.fullmatch(value.strip())
    if found is None or not any(found.groups()):
        return None
    hours, minutes, seconds, millis = (float(part or 0) for part in found.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000


def _number(value: str | None) -> float | None:
    """A header's non-negative number of seconds (or milliseconds), else None."""
    try:
        number = float(value) if value is not None else None
    except ValueError:
        return None
    return max(0.0, number) if number is not None and math.isfinite(number) else None


def without_secret(text: str, secret: str | None) -> str:
    """``text`` with ``secret`` replaced by ``<redacted>``: as written, percent-, form- or
    JSON-encoded, in any letter case (a server may quote a header capitalized). A masked form
    (``sk-SECR****KEY``, OpenAI's) is left: it is not the key."""
    if not secret or len(secret) < MIN_KEY_CHARS:
        return text
    forms = {secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1]}
    pattern = "|".join(map(re.escape, sorted(forms, key=len, reverse=True)))
    return re.sub(pattern, REDACTED, text, flags=re.IGNORECASE)


class AnswerTooLarge(aiohttp.ClientPayloadError):
    """An answer longer than MAX_ANSWER_BYTES: a network-level failure, retried as one."""


async def _read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body, or AnswerTooLarge once it passes ``limit`` bytes (announced or read)."""
    if response.content_length is not None and response.content_length > limit:
        announced = response.content_length
        raise AnswerTooLarge(f"the answer announces {announced} bytes; at most {limit}")
    chunks, size = [], 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise AnswerTooLarge(f"the answer passed {limit} bytes; cut there")
        chunks.append(chunk)
    return b"".join(chunks)


def _refusal(status: int, content_type: str, payload: bytes, clean: Callable[[str], str]) -> str:
    """What an error answer (4xx, 5xx) said, for its error and a retry's log line (the operator
    reads why: an exhausted quota is a 429 too): the status, and the message, code and type of a
    JSON error (``{"error": {"message": ...}}``, ``{"error": "..."}``, or vLLM's ``{"object":
    "error", "message": ...}``), each cleaned (the key taken out) before it is cut short; of any
    other body its media type and length only, never the body (a proxy's error page may quote
    the request, key and all)."""
    error = _json_error(payload)
    said = error.get("message") if error is not None else None
    if error is None or not isinstance(said, str) or not said.strip():
        return f"HTTP {status} ({_described(content_type, payload, clean)})"
    text = f"HTTP {status}: model said: {_one_line(clean(said), MAX_SAID)}"
    words = [
        f"{name} {_one_line(clean(str(value)), MAX_WORD)}"
        for name in ("code", "type")
        if isinstance(value := error.get(name), str | int)
        and not isinstance(value, bool)
        and str(value).strip()
    ]
    return f"{text} ({', '.join(words)})" if words else text


# How servers say a prompt is longer than the model's context: OpenAI's and Azure's code; the
# words of vLLM ("This model's maximum context length is 8192 tokens"), llama.cpp ("the request
# exceeds the available context size"), LM Studio and gateways in front of Anthropic models
# ("prompt is too long").
_OVERFLOW_CODES = frozenset({"context_length_exceeded"})
_OVERFLOW_WORDS = re.compile(
    r"maximum context length|context (?:length|size|window)|prompt is too long|too many tokens",
    re.IGNORECASE,
)


def _context_overflow(status: int, payload: bytes) -> bool:
    """Whether a 400 or 413 answer says the prompt does not fit the model's context."""
    error = _json_error(payload) if status in (400, 413) else None
    if error is None:
        return False
    if error.get("code") in _OVERFLOW_CODES:
        return True
    message = error.get("message")
    return isinstance(message, str) and _OVERFLOW_WORDS.search(message) is not None


def _json_error(payload: bytes) -> dict[str, Any] | None:
    """The error object of a JSON error body; None for any other body."""
    try:
        body = json.loads(payload)
    except ValueError:  # not JSON, or not UTF-8
        return None
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict):
        return error
    if isinstance(error, str):  # {"error": "model not found"} (Ollama's native form)
        return {"message": error}
    return body if body.get("object") == "error" else None  # vLLM's


def _described(content_type: str, payload: bytes, clean: Callable[[str], str]) -> str:
    """A body by its media type (as the server named it, cleaned) and length, never its text."""
    return f"content-type {_one_line(clean(content_type), 100)!r}, {len(payload)} bytes"


def _one_line(text: str, limit: int) -> str:
    """``text`` on one printable line (a log line, a cell), at most ``limit`` characters."""
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
