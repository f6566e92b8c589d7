"""TelegramAdapter: verifies, parses and answers the webhooks of the configured bots."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Self, TypeVar
from urllib.parse import quote

import aiohttp
from telegram import Bot
from telegram.constants import ChatAction

from .._config import TelegramConfig
from .._errors import (
    BadSecretToken,
    ChannelError,
    FatalSendError,
    PermanentSendError,
    RetryableSendError,
    UnknownAccount,
)
from .._media import MediaSource, origin
from .._model import OutboundMessage, ParseResult, SendResult
from .._parts import Part, send_parts
from ._audience import Audience, BotIdentity, id_of_token
from ._bots import BotHandle, build_bot
from ._call import CHANNEL, call_api
from ._identify import Sleep, identified, retry, unidentified
from ._keys import update_keys
from ._parse import parse_update
from ._ptb_log import drop_parse_errors, keep_parse_errors
from ._redact import TokenRedactor
from ._send import Call, plan

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
T = TypeVar("T")


def _utc_now() -> datetime:
    return datetime.now(UTC)


class TelegramAdapter:
    """The Telegram channel; ``account`` is a bot's configured name, as in its webhook URL."""

    name = CHANNEL

    def __init__(
        self,
        config: TelegramConfig,
        *,
        clock: Callable[[], datetime] = _utc_now,
        session: aiohttp.ClientSession | None = None,
        identities: Mapping[str, BotIdentity] | None = None,
    ) -> None:
        """``identities``: bots whose username is known already; the others ask ``getMe``
        in ``identify()``."""
        self._clock = clock
        secrets = (s.get_secret_value() for b in config.bots for s in (b.token, b.secret_token))
        self._redactor = TokenRedactor(secrets)
        self._redactor.install()  # before the Bots exist: PTB logs its URL on construction
        drop_parse_errors()
        self._bots: dict[str, BotHandle] = {
            b.name: build_bot(b, config.api_base_url, config.request_timeout, session)
            for b in config.bots
        }
        known = identities or {}
        self._audiences: dict[str, Audience] = {
            b.name: Audience(
                known.get(b.name) or BotIdentity(id_of_token(b.token.get_secret_value())),
                groups=b.groups,
                edited=b.edited_messages,
            )
            for b in config.bots
        }
        self._unknown = {n for n, a in self._audiences.items() if a.identity.username is None}
        self._all_known = asyncio.Event()  # set once no bot's username is unknown
        if not self._unknown:
            self._all_known.set()
        self._origin = origin(config.api_base_url)
        self._closed = False

    @classmethod
    def from_config(
        cls, config: TelegramConfig, session: aiohttp.ClientSession | None = None
    ) -> TelegramAdapter:
        """The registry's factory: PTB sends through ``session``, the gateway's shared one."""
        return cls(config, session=session)

    @property
    def accounts(self) -> frozenset[str]:
        """The configured bot names."""
        return frozenset(self._bots)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Open the bots' own HTTP sessions if no shared one was given; no request is made."""
        for handle in self._bots.values():
            await handle.request.initialize()

    async def identify(self, *, again_later: bool = False) -> frozenset[str]:
        """Learn the username of each bot not known yet with ``getMe``; returns the bots still
        unknown. A failure is logged as a warning (``again_later``: saying that it will be asked
        again, see ``keep_identifying``) and leaves the username unknown."""
        failures = await self._identify_unknown()
        for bot, reason in failures.items():
            unidentified(bot, reason, again=again_later)
        return frozenset(failures)

    async def keep_identifying(self, sleep: Sleep | None = None) -> None:
        """After a failed ``identify()``: ``getMe`` again for the bots still unknown, after
        pauses of 1, 2, 4, 8 and 16 s, then every 30 s, until each is known or the adapter is
        closed. The gateway runs it as a background task; ``sleep`` is for tests."""
        await retry(self._identify_unknown, sleep)

    async def _identify_unknown(self) -> dict[str, str]:
        """One ``getMe`` per bot still unknown: the failures' reasons by bot."""
        failures: dict[str, str] = {}
        for name in [n for n in self._bots if n in self._unknown]:
            if self._closed:
                return {}  # nobody to answer any more
            reason = await self._identify(self._bots[name])
            if reason is not None:
                failures[name] = reason
        return failures

    async def _identify(self, handle: BotHandle) -> str | None:
        try:
            me = await self._call(handle, lambda bot: bot.get_me())
        except ChannelError as exc:
            return exc.reason
        except (TypeError, ValueError, KeyError) as exc:  # PTB could not read it as a User
            return f"its answer is not a User ({type(exc).__name__})"
        identity = BotIdentity(me.id, me.username)
        self._audiences[handle.name] = self._audiences[handle.name].knowing(identity)
        self._unknown.discard(handle.name)
        if not self._unknown:
            self._all_known.set()
        identified(handle.name, me.username)
        return None

    async def identified(self) -> None:
        """Until every bot's username is known (each ``getMe`` answered)."""
        await self._all_known.wait()

    def identity(self, account: str) -> BotIdentity:
        """What the bot ``account`` knows of itself (its username once getMe answered)."""
        return self._audiences[self._handle(account).name].identity

    async def aclose(self) -> None:
        """Close the bots' own HTTP sessions (never a shared one); idempotent."""
        self._closed = True
        for handle in self._bots.values():
            await handle.request.shutdown()
        self._redactor.uninstall()
        keep_parse_errors()

    def verify(self, headers: Mapping[str, str], body: bytes, account: str | None = None) -> None:
        """Check the bot's secret header in constant time; the body plays no part."""
        handle = self._handle(account)
        sent = _header(headers, SECRET_HEADER)
        if sent is None or not hmac.compare_digest(sent.encode(errors="replace"), handle.secret):
            raise BadSecretToken(CHANNEL, "missing or wrong secret token")

    def parse(self, body: bytes, account: str | None = None) -> ParseResult:
        """Parse one Update; raises ChannelError and nothing else."""
        handle = self._handle(account)
        return parse_update(
            body, handle.name, handle.bot, self._clock, self._audiences[handle.name]
        )

    def delivery_keys(self, body: bytes, account: str | None = None) -> list[str]:
        """The dedup key ``parse`` would give (none for ignored updates), without PTB objects."""
        return update_keys(body, self._handle(account).name)

    async def send(self, message: OutboundMessage) -> SendResult:
        """Send one reply, split over several messages where it is too long."""
        handle = self._sender(message.account)

        def part(call: Call) -> Part:
            async def send() -> str:
                return str((await self._call(handle, call)).message_id)

            return send

        return await send_parts(
            [part(c) for c in plan(message)], message.skip_parts, message.max_parts
        )

    async def send_typing(
        self,
        account: str,
        chat_id: str,
        message_id: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        """Show "typing…" in the chat (in its forum topic, if any) for about five seconds."""
        topic = int(thread_id) if thread_id is not None and thread_id.isdecimal() else None
        await self._call(
            self._sender(account),
            lambda bot: bot.send_chat_action(chat_id, ChatAction.TYPING, message_thread_id=topic),
        )

    async def answer_callback(
        self, account: str, callback_query_id: str, text: str | None = None
    ) -> None:
        """Stop the button's spinner (and optionally show ``text``)."""
        await self._call(
            self._sender(account),
            lambda bot: bot.answer_callback_query(callback_query_id, text=text),
        )

    async def download_media(self, account: str, media_id: str) -> bytes:
        """Fetch an inbound file through getFile (Telegram serves at most 20 MB)."""
        handle = self._sender(account)
        file = await self._call(handle, lambda bot: bot.get_file(media_id))
        if not (file.file_path or "").startswith(handle.bot.base_file_url):
            # PTB reads a local path as a file; only ever fetch from the API server.
            raise PermanentSendError(CHANNEL, "getFile returned no downloadable file_path")
        data = await self._call(handle, lambda bot: file.download_as_bytearray())
        return bytes(data)

    async def media_source(self, account: str, media_id: str) -> MediaSource:
        """getFile, then the file's URL on the API server (it holds the bot token)."""
        handle = self._sender(account)
        file = await self._call(handle, lambda bot: bot.get_file(media_id))
        # PTB has already prefixed a remote file_path with base_file_url ({base}/file/bot{token});
        # anything else (a local path) is refused, as in download_media.
        prefix = f"{handle.bot.base_file_url}/"
        remote = file.file_path or ""
        relative = remote[len(prefix) :] if remote.startswith(prefix) else ""
        segments = relative.split("/")
        if not relative or any(part in {"", ".", ".."} for part in segments):
            raise PermanentSendError(CHANNEL, "getFile returned no downloadable file_path")
        return MediaSource(
            url=prefix + quote(relative),  # as PTB's File._get_encoded_url, but "?" and "#" too
            headers={},
            trusted_origin=self._origin,
            file_name=segments[-1],
            size=file.file_size,
        )

    def _handle(self, account: str | None) -> BotHandle:
        handle = self._bots.get(account) if account is not None else None
        if handle is None:
            raise UnknownAccount(CHANNEL, f"unknown bot {account!r}")
        return handle

    def _sender(self, account: str) -> BotHandle:
        if self._closed:
            raise RetryableSendError(CHANNEL, "adapter is closed")
        handle = self._bots.get(account)
        if handle is None:
            raise FatalSendError(CHANNEL, f"unknown bot {account!r}")
        return handle

    async def _call(self, handle: BotHandle, call: Callable[[Bot], Awaitable[T]]) -> T:
        return await call_api(handle.bot, call, (handle.token,))


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    lowered = name.lower()
    return next((v for k, v in headers.items() if k.lower() == lowered), None)
