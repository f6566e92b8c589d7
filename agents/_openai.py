"""The ``openai`` backend: OpenAI-compatible ``/chat/completions`` over aiohttp.

Works with OpenAI, Azure-style gateways, vLLM, llama.cpp server and Ollama. Retries 429,
5xx and network errors with exponential backoff (no jitter, so tests can assert the
delays), honouring a numeric ``Retry-After`` up to ``max_backoff``; a longer one, or a wait
that would outlast the running turn, gives up at once. The API key never reaches a log line.

At most ``max_concurrency`` requests of one model are in flight (a semaphore: providers
rate-limit per model); the rest wait for a slot, outside the request's ``timeout``. The backend's
own HTTP session pools ``max_connections`` keep-alive connections; an injected session keeps
its own connector.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence

import aiohttp

from ._config import OpenAIModelConfig
from ._deadline import time_left
from ._errors import ModelBackendError
from ._model import ModelMessage, ModelResponse, ToolSpec
from ._openai_wire import EmptyAnswer, parse_completion, request_body

logger = logging.getLogger("agents.openai")

Sleep = Callable[[float], Awaitable[None]]
_RETRY_STATUSES = frozenset({408, 409, 429})


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
    ) -> None:
        self.name = name
        self._config = config
        self._api_key = api_key
        self._session = session
        self._owns_session = session is None
        self._sleep = sleep
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
                    raise ModelBackendError(
                        self.name, message, retry_after=exc.retry_after
                    ) from None
                delay = self._delay(attempt, exc.retry_after)
                self._check_wait(attempt, exc, delay)
                logger.warning("model %s: %s; retry in %.3gs", self.name, exc, delay)
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
                f"{exc} asked to wait {exc.retry_after:g}s (Retry-After), more than"
                f" max_backoff ({limit:g}s): {tries}"
            )
            raise ModelBackendError(self.name, message, retry_after=exc.retry_after)
        left = time_left()
        if left is not None and delay >= left:
            message = (
                f"{exc}; the next try would wait {delay:g}s, and the turn has {max(left, 0):.3g}s"
                f" left: {tries}"
            )
            raise ModelBackendError(self.name, message, retry_after=exc.retry_after)

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
                payload = await response.read()
                self._check(response, payload)
                content_type = response.content_type  # the media type, without parameters
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _Retryable(f"{type(exc).__name__} {exc}".strip()) from None
        try:
            return parse_completion(payload)
        except EmptyAnswer as exc:  # a failed call: the turn fails, and is retried
            raise ModelBackendError(self.name, str(exc)) from None
        except ValueError as exc:
            what = f"{exc} (content-type {content_type[:100]!r}, {len(payload)} bytes)"
            raise ModelBackendError(self.name, what) from None

    def _check(self, response: aiohttp.ClientResponse, payload: bytes) -> None:
        status = response.status
        if status in _RETRY_STATUSES or status >= 500:
            retry_after = _seconds(response.headers.get("Retry-After"))
            raise _Retryable(f"HTTP {status}", retry_after)
        if status >= 400:
            raise ModelBackendError(self.name, f"HTTP {status}: {_error_text(payload)}", status)

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


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def _error_text(payload: bytes) -> str:
    try:
        error = json.loads(payload)["error"]
        return str(error.get("message", error) if isinstance(error, dict) else error)[:300]
    except (ValueError, KeyError, TypeError):
        return payload[:300].decode("utf-8", "replace")
