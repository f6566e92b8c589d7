"""The Graph API over aiohttp: one place that turns transport faults and error answers into
SendErrors. The access token travels only in the Authorization header, never in a URL or a
message."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from .._errors import RetryableSendError, SendError, UncertainDelivery
from ._graph_errors import parse_retry_after, read_graph_error, send_error

CHANNEL = "whatsapp"
log = logging.getLogger("channels.whatsapp")


class GraphClient:
    def __init__(
        self,
        base_url: str,
        api_version: str,
        timeout: float,
        session: Callable[[], aiohttp.ClientSession],
    ) -> None:
        self._root = f"{base_url.rstrip('/')}/{api_version}"
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session = session

    async def post(
        self, path: str, token: str, payload: dict[str, Any], *, idempotent: bool
    ) -> dict[str, Any]:
        """POST JSON to ``{root}/{path}``; a timeout is an uncertain delivery unless idempotent."""
        url = f"{self._root}/{path}"
        status, body = await self._request("POST", url, token, payload, idempotent)
        return _object(status, body, idempotent)

    async def get_json(self, path: str, token: str) -> dict[str, Any]:
        url = f"{self._root}/{path}"
        status, body = await self._request("GET", url, token, None, True)
        return _object(status, body, True)

    async def get_bytes(self, url: str, token: str) -> bytes:
        _, body = await self._request("GET", url, token, None, True)
        return body

    async def _request(
        self, method: str, url: str, token: str, payload: object, idempotent: bool
    ) -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {token}"}
        try:
            async with self._session().request(
                method, url, json=payload, headers=headers, timeout=self._timeout
            ) as response:
                body = await response.read()
                status, retry_after = response.status, response.headers.get("Retry-After")
        except aiohttp.ConnectionTimeoutError as exc:
            raise RetryableSendError(CHANNEL, "timed out connecting to the Graph API") from exc
        except aiohttp.ClientConnectorError as exc:
            raise RetryableSendError(CHANNEL, f"cannot connect to the Graph API: {exc}") from exc
        except TimeoutError as exc:
            raise _timed_out(idempotent) from exc
        except aiohttp.ClientError as exc:
            raise _broken(exc, idempotent) from exc
        log.debug("graph %s %s -> %s", method, url.split("?", 1)[0], status)
        if status >= 300:
            error = read_graph_error(status, body)
            raise send_error(error, parse_retry_after(retry_after), token)
        return status, body


def _timed_out(idempotent: bool) -> SendError:
    if idempotent:
        return RetryableSendError(CHANNEL, "timed out waiting for the Graph API")
    return UncertainDelivery(
        CHANNEL, "timed out after the request was sent: the message may have gone out"
    )


def _broken(exc: aiohttp.ClientError, idempotent: bool) -> SendError:
    """The connection was made and then broke (disconnected, reset, answer cut short): the
    request may have reached Meta, so a message is uncertain, as after a read timeout."""
    name = type(exc).__name__
    if idempotent or isinstance(exc, aiohttp.InvalidURL):
        return RetryableSendError(CHANNEL, f"network error talking to the Graph API: {name}")
    reason = f"connection lost after the request was sent ({name}): the message may have gone out"
    return UncertainDelivery(CHANNEL, reason)


def _object(status: int, body: bytes, idempotent: bool) -> dict[str, Any]:
    try:
        root = json.loads(body)
    except (ValueError, RecursionError):
        root = None
    if isinstance(root, dict):
        return root
    reason = f"HTTP {status} with a body that is not a JSON object"
    if idempotent:
        raise RetryableSendError(CHANNEL, reason, status=status)
    raise UncertainDelivery(CHANNEL, reason, status=status)
