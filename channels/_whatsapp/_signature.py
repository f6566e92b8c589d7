"""Webhook authentication: the POST signature and the GET subscription handshake."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping

from .._errors import BadSignature, BadVerifyToken

CHANNEL = "whatsapp"
SIGNATURE_HEADER = "X-Hub-Signature-256"
_SIGNATURE = re.compile(r"sha256=([0-9a-fA-F]{64})")
_CHALLENGE = re.compile(r"[A-Za-z0-9_.\-]{1,256}")


def check_signature(app_secret: bytes, headers: Mapping[str, str], body: bytes) -> None:
    """Raise BadSignature unless the header is HMAC-SHA256(app_secret, body) as Meta sends it."""
    if not app_secret:
        raise BadSignature(CHANNEL, "whatsapp.app_secret is not configured")
    sent = _header(headers, SIGNATURE_HEADER)
    if sent is None:
        raise BadSignature(CHANNEL, f"missing {SIGNATURE_HEADER}")
    match = _SIGNATURE.fullmatch(sent)
    if match is None:
        raise BadSignature(CHANNEL, f"malformed {SIGNATURE_HEADER}")
    expected = hmac.new(app_secret, body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, match.group(1).lower()):
        raise BadSignature(CHANNEL, f"{SIGNATURE_HEADER} does not match the body")


def check_subscription(verify_token: bytes, query: Mapping[str, str]) -> str:
    """Return hub.challenge for a subscribe request with the right token; else BadVerifyToken."""
    if not verify_token:
        raise BadVerifyToken(CHANNEL, "whatsapp.verify_token is not configured")
    if query.get("hub.mode") != "subscribe":
        raise BadVerifyToken(CHANNEL, "hub.mode is not subscribe")
    sent = query.get("hub.verify_token", "").encode("utf-8", "surrogatepass")
    if not hmac.compare_digest(sent, verify_token):
        raise BadVerifyToken(CHANNEL, "hub.verify_token does not match")
    challenge = query.get("hub.challenge", "")
    if _CHALLENGE.fullmatch(challenge) is None:
        raise BadVerifyToken(CHANNEL, "hub.challenge is missing or malformed")
    return challenge


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    lowered = name.lower()  # plain dicts are not case-insensitive like aiohttp's headers
    return next((v for k, v in headers.items() if k.lower() == lowered), None)
