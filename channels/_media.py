"""Where an inbound media item can be downloaded from, as a platform API describes it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class MediaSource:
    """A download location for one inbound media item; the gateway fetches it.

    ``url`` may carry a secret (Telegram puts the bot token in its path): never log it and never
    put it in an exception message. ``headers`` may carry one too (WhatsApp's bearer token) and
    go only to the URL's own origin. ``trusted_origin`` is ``scheme://host[:port]`` of the
    configured platform API, which the fetcher exempts from its public-internet rules.
    """

    url: str
    headers: Mapping[str, str]
    trusted_origin: str
    content_type: str | None = None
    file_name: str | None = None
    size: int | None = None

    def __repr__(self) -> str:
        # The dataclass repr would print the URL and the headers, and so the tokens.
        return f"MediaSource(trusted_origin={self.trusted_origin!r}, size={self.size!r})"


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, lower-cased, without user info or a default port."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    if port is None or (scheme, port) in {("http", 80), ("https", 443)}:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"
