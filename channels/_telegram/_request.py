"""PTB's BaseRequest on aiohttp: Bot API calls through the gateway's shared ClientSession.

PTB keeps its types, its limits and its mapping of status codes to exceptions (``BaseRequest.post``
and ``retrieve`` call ``do_request``); this module only moves bytes. aiohttp's exceptions name the
URL, and so the bot token: they are never chained. A failure is raised instead from a ``WireError``
that says what happened on the wire, and whether the request may have reached Telegram.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import ClassVar

import aiohttp
from telegram._utils.defaultvalue import DefaultValue
from telegram._utils.types import ODVInput
from telegram.error import NetworkError, TelegramError, TimedOut
from telegram.request import BaseRequest, RequestData

log = logging.getLogger("channels.telegram.http")
_TOKEN_IN_PATH = re.compile(r"/bot[^/]*")
_FORM = {"Content-Type": "application/x-www-form-urlencoded"}


class WireError(Exception):
    """What failed on the wire, without the URL: the cause of PTB's TimedOut or NetworkError."""

    may_have_arrived: ClassVar[bool] = True


class ConnectTimeout(WireError):
    """No connection (from the pool or a new one) within the connect and pool timeouts."""

    may_have_arrived = False


class ConnectError(WireError):
    """The connection could not be made (refused, DNS, TLS): nothing was sent."""

    may_have_arrived = False


class ReadTimeout(WireError):
    """The request was written and no answer came within the read timeout."""


class WriteTimeout(WireError):
    """The request did not finish (written and answered) within the sum of all timeouts."""


class ConnectionLost(WireError):
    """The connection broke after the request started going out: Telegram may have it."""


class AiohttpRequest(BaseRequest):
    """Bot API requests on an aiohttp session: the shared one if given, else one of its own."""

    def __init__(
        self,
        session: aiohttp.ClientSession | None = None,
        *,
        timeout: float | None = 5.0,
        media_write_timeout: float | None = 20.0,
    ) -> None:
        self._session = session
        self._owns_session = session is None
        self._timeout = timeout
        self._media_write_timeout = media_write_timeout

    @property
    def read_timeout(self) -> float | None:
        """The default read timeout, seconds."""
        return self._timeout

    async def initialize(self) -> None:
        """Open this request's own session, unless it uses a shared one."""
        if self._owns_session and (self._session is None or self._session.closed):
            self._session = aiohttp.ClientSession()

    async def shutdown(self) -> None:
        """Close this request's own session; a shared one belongs to its creator."""
        session = self._session
        if self._owns_session and session is not None:
            self._session = None
            await session.close()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        """One HTTP exchange: ``(status, body)``; TimedOut or NetworkError on a transport fault."""
        session = self._live_session()
        body, headers = _encode(request_data)
        upload = isinstance(body, aiohttp.FormData)
        timeout = _client_timeout(
            _pick(connect_timeout, self._timeout),
            _pick(pool_timeout, self._timeout),
            _pick(write_timeout, self._media_write_timeout if upload else self._timeout),
            _pick(read_timeout, self._timeout),
        )
        try:
            async with session.request(
                method, url, data=body, headers=headers, timeout=timeout, allow_redirects=False
            ) as response:
                status, payload = response.status, await response.read()
        except (aiohttp.ClientError, OSError) as exc:  # TimeoutError is an OSError
            failure = _failure(exc, timeout)
        else:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("HTTP Request: %s %s %d", method, redact_url(url), status)
            return status, payload
        # Raised outside the except block: nothing links it to aiohttp's exception (and its URL).
        raise failure[0] from failure[1]

    def _live_session(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            raise NetworkError("the HTTP session is closed or was never opened")
        return session


def _pick(given: ODVInput[float], default: float | None) -> float | None:
    return default if isinstance(given, DefaultValue) else given


def redact_url(url: str) -> str:
    """The URL with the token segment (``/bot<token>``) replaced, for logs."""
    return _TOKEN_IN_PATH.sub("/bot<redacted>", url, count=1)


def _encode(
    request_data: RequestData | None,
) -> tuple[bytes | aiohttp.FormData | None, dict[str, str]]:
    headers = {"User-Agent": BaseRequest.USER_AGENT}
    if request_data is None:
        return None, headers
    files = request_data.multipart_data
    if files:
        form = aiohttp.FormData(default_to_multipart=True)
        for name, value in request_data.json_parameters.items():
            form.add_field(name, value)
        for name, (file_name, content, mime_type) in files.items():
            form.add_field(name, content, filename=file_name, content_type=mime_type)
        return form, headers
    if not request_data.parameters:
        return None, headers
    # Form fields, nested objects as JSON strings: what HTTPXRequest sends.
    return request_data.url_encoded_parameters().encode(), {**headers, **_FORM}


@lru_cache(maxsize=64)
def _client_timeout(
    connect: float | None, pool: float | None, write: float | None, read: float | None
) -> aiohttp.ClientTimeout:
    parts = (connect, pool, write, read)
    total = None if None in parts else sum(p for p in parts if p is not None)
    # aiohttp's ``connect`` covers waiting for a pooled connection and making a new one.
    acquire = None if connect is None or pool is None else connect + pool
    # sock_read starts once the body is written; total bounds a slow upload or a slow drip.
    return aiohttp.ClientTimeout(total=total, connect=acquire, sock_connect=connect, sock_read=read)


def _failure(exc: BaseException, timeout: aiohttp.ClientTimeout) -> tuple[TelegramError, WireError]:
    kind = type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return TimedOut(f"no connection within {timeout.connect} s: not sent"), ConnectTimeout()
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.InvalidURL):
        return NetworkError(f"cannot connect to the Bot API ({kind}): not sent"), ConnectError()
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return TimedOut(f"no answer within {timeout.sock_read} s of the request"), ReadTimeout()
    if isinstance(exc, TimeoutError):
        return TimedOut(f"not answered within {timeout.total} s in all"), WriteTimeout()
    return NetworkError(f"connection lost after sending ({kind})"), ConnectionLost()
