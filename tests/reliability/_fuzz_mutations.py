"""Mutations of valid requests that must be refused, drawn from a seeded ``random.Random``.

A valid request is described by a ``Template``: where it goes, its headers and body, and the
header that carries its credential (a signature, a secret token, a bearer token). A mutation
changes the credential (its bytes, its place, its count), or the signed body, or the path's
bot name, and the result is kept only when ``Template.authentic`` says the request no longer
proves knowledge of the secret: a change that leaves it authentic (the letter case of a
signature's hex digits, blanks around a header value, ``bearer`` for ``Bearer``) would be
rightly accepted, so it is drawn again.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from urllib.parse import quote

from ._fuzz_http import Expect, Probe

TOKEN_CHARS = (string.ascii_letters + string.digits + "-_.~+/=:").encode()
# Letters a header value may hold that are not ASCII: look-alikes, blanks that str.strip()
# removes (NBSP, NEL, EM SPACE), invisible ones and one outside the BMP.
NON_ASCII = ("\u00e9", "\u0435", "\u00a0", "\u0085", "\u2003", "\ufeff", "\u200b", "\U0001f511")
# Byte strings that are not UTF-8: stray continuation and lead bytes, an overlong slash, an
# encoded surrogate, a code point past U+10FFFF.
INVALID_UTF8 = (b"\xff", b"\xfe", b"\x80", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf5\x80\x80")
MAX_DRAWS = 50  # tries to draw a mutation that is not authentic before the op is given up

ValueOp = Callable[[random.Random, bytes], bytes]
Oracle = Callable[[Sequence[bytes], bytes], bool]  # credential values in order, body


@dataclass(frozen=True)
class Template:
    """A valid request and where its credential is.

    ``authentic(values, body)`` says whether a request with these credential header values
    and this body still proves the secret (the spec of the route, written independently of the
    gateway's code).
    """

    route: str
    method: str
    path: str
    headers: tuple[tuple[str, bytes], ...]  # every header but the credential
    body: bytes
    credential: str  # the header's name
    prefix: bytes  # b"sha256=", b"Bearer " or b""
    secret: bytes  # the part after the prefix
    authentic: Oracle
    refused: Expect  # the answer to a request without a valid credential
    query: str = ""

    @property
    def value(self) -> bytes:
        return self.prefix + self.secret

    def probe(
        self,
        kind: str,
        values: Sequence[bytes],
        *,
        body: bytes | None = None,
        path: str | None = None,
        query: str | None = None,
        name: str | None = None,
        expect: Expect | None = None,
    ) -> Probe:
        """A request with ``values`` as its credential headers (under ``name``)."""
        credential = tuple((name or self.credential, value) for value in values)
        query = self.query if query is None else query
        target = (path or self.path) + (f"?{query}" if query else "")
        return Probe(
            route=self.route,
            kind=kind,
            method=self.method,
            target=target,
            headers=self.headers + credential,
            body=self.body if body is None else body,
            expect=expect or self.refused,
        )

    def valid(self, expect: Expect) -> Probe:
        """The request unchanged, and what it gets."""
        return replace(self.probe("valid", [self.value], expect=expect), mutated=False)


# -- changes to one value ------------------------------------------------------------------


def _position(rng: random.Random, value: bytes, *, end: bool = False) -> int:
    return rng.randrange(len(value) + (1 if end else 0)) if value or end else 0


def swap_one_case(rng: random.Random, value: bytes) -> bytes:
    letters = [i for i, byte in enumerate(value) if chr(byte).isalpha() and byte < 128]
    if not letters:
        return value
    i = rng.choice(letters)
    return value[:i] + value[i : i + 1].swapcase() + value[i + 1 :]


def swap_all_case(rng: random.Random, value: bytes) -> bytes:
    return value.upper() if rng.random() < 0.5 else value.swapcase()


def truncate(rng: random.Random, value: bytes) -> bytes:
    return value[: rng.randrange(1, len(value))] if len(value) > 1 else b""


def extend(rng: random.Random, value: bytes) -> bytes:
    return value + bytes(rng.choice(TOKEN_CHARS) for _ in range(rng.randint(1, 8)))


def drop_prefix(rng: random.Random, value: bytes) -> bytes:
    return value[rng.randrange(1, len(value)) :] if len(value) > 1 else b""


def replace_char(rng: random.Random, value: bytes) -> bytes:
    i = _position(rng, value)
    return value[:i] + bytes([rng.choice(TOKEN_CHARS)]) + value[i + 1 :]


def insert_char(rng: random.Random, value: bytes) -> bytes:
    i = _position(rng, value, end=True)
    return value[:i] + bytes([rng.choice(TOKEN_CHARS)]) + value[i:]


def delete_char(rng: random.Random, value: bytes) -> bytes:
    i = _position(rng, value)
    return value[:i] + value[i + 1 :]


def insert_blank(rng: random.Random, value: bytes) -> bytes:
    i = rng.randrange(1, len(value)) if len(value) > 1 else 0
    return value[:i] + rng.choice((b" ", b"\t", b"  ")) + value[i:]


def non_ascii(rng: random.Random, value: bytes) -> bytes:
    i = _position(rng, value, end=True)
    cut = i + rng.randint(0, 1)  # insert, or replace the byte at i
    return value[:i] + rng.choice(NON_ASCII).encode() + value[cut:]


def invalid_utf8(rng: random.Random, value: bytes) -> bytes:
    i = _position(rng, value, end=True)
    cut = i + rng.randint(0, 1)
    return value[:i] + rng.choice(INVALID_UTF8) + value[cut:]


def percent_encode_char(rng: random.Random, value: bytes) -> bytes:
    i = _position(rng, value)
    return value[:i] + f"%{value[i]:02X}".encode() + value[i + 1 :] if value else b"%00"


def unicode_blank(rng: random.Random, value: bytes) -> bytes:
    """A blank that is not HTTP's (which only strips space and tab) before or after it."""
    blank = rng.choice(("\u00a0", "\u0085", "\u2003", "\u3000", "\u180e", "\u2028")).encode()
    return blank + value if rng.random() < 0.5 else value + blank


def doubled(rng: random.Random, value: bytes) -> bytes:
    return value + value


def comma_list(rng: random.Random, value: bytes) -> bytes:
    """What a proxy folding two copies of the header into one would make of them."""
    return value + rng.choice((b", ", b",")) + value


def empty(rng: random.Random, value: bytes) -> bytes:
    return b""


VALUE_OPS: dict[str, ValueOp] = {
    "one letter's case swapped": swap_one_case,
    "letter case of all swapped": swap_all_case,
    "truncated": truncate,
    "extended": extend,
    "first characters removed": drop_prefix,
    "a character replaced": replace_char,
    "a character inserted": insert_char,
    "a character deleted": delete_char,
    "a blank inside": insert_blank,
    "non-ASCII character": non_ascii,
    "invalid UTF-8 bytes": invalid_utf8,
    "a Unicode blank around it": unicode_blank,
    "a character percent-encoded": percent_encode_char,
    "doubled": doubled,
    "two copies comma-joined": comma_list,
    "empty": empty,
}


def mutated_value(rng: random.Random, template: Template) -> tuple[str, bytes]:
    """One op applied to the whole value or to the secret after the prefix, not authentic."""
    for _ in range(MAX_DRAWS):
        name, op = rng.choice(list(VALUE_OPS.items()))
        whole = rng.random() < 0.5 or not template.prefix
        value = op(rng, template.value) if whole else template.prefix + op(rng, template.secret)
        if not template.authentic([value], template.body):
            return (name if whole else f"secret {name}"), value
    raise AssertionError(f"no non-authentic mutation of {template.route} in {MAX_DRAWS} draws")


# -- mutations of a whole request ------------------------------------------------------------


Mutation = Callable[[random.Random, Template], Probe]


def value_changed(rng: random.Random, template: Template) -> Probe:
    kind, value = mutated_value(rng, template)
    return template.probe(f"credential: {kind}", [value])


def missing(rng: random.Random, template: Template) -> Probe:
    return template.probe("credential: missing", [])


def repeated_wrong(rng: random.Random, template: Template) -> Probe:
    values = [mutated_value(rng, template)[1] for _ in range(rng.randint(2, 3))]
    return template.probe("credential: repeated header, every copy wrong", values)


def split(rng: random.Random, template: Template) -> Probe:
    value = template.value
    cut = rng.randrange(1, len(value))
    return template.probe("credential: split over two headers", [value[:cut], value[cut:]])


def in_query(rng: random.Random, template: Template) -> Probe:
    name = rng.choice(
        (template.credential, template.credential.lower(), "secret", "token", "signature")
    )
    param = f"{quote(name, safe='')}={quote(template.value, safe='')}"
    query = f"{template.query}&{param}" if template.query else param
    return template.probe("credential: in the query string instead", [], query=query)


def other_secret(others: Sequence[bytes]) -> Mutation:
    """The credential made with one of ``others`` (other secrets of this gateway)."""

    def mutate(rng: random.Random, template: Template) -> Probe:
        value = template.prefix + rng.choice(others)
        assert not template.authentic([value], template.body)
        return template.probe("credential: another secret", [value])

    return mutate


def other_header(names: Sequence[str]) -> Mutation:
    """The right value under another header's name."""

    def mutate(rng: random.Random, template: Template) -> Probe:
        name = rng.choice(names)
        return template.probe(f"credential: under {name}", [template.value], name=name)

    return mutate


COMMON: tuple[Mutation, ...] = (value_changed, value_changed, value_changed, missing)
COMMON += (repeated_wrong, split, in_query)


# -- WhatsApp: the body is signed -------------------------------------------------------------


def hub_signature(key: bytes, body: bytes) -> bytes:
    return b"sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest().encode()


def signature_oracle(app_secret: bytes) -> Oracle:
    """Meta's header: ``sha256=`` and the hex HMAC-SHA256 of the exact body (hex in any case)."""
    pattern = re.compile(rb"[ \t]*sha256=([0-9a-fA-F]{64})[ \t]*", re.IGNORECASE)

    def authentic(values: Sequence[bytes], body: bytes) -> bool:
        expected = hmac.new(app_secret, body, hashlib.sha256).hexdigest().encode()
        matches = [pattern.fullmatch(value) for value in values]
        return bool(values) and all(m and m.group(1).lower() == expected for m in matches)

    return authentic


def body_changed(rng: random.Random, template: Template) -> Probe:
    """The body changed after it was signed."""
    body = template.body
    ops: dict[str, Callable[[], bytes]] = {
        "a bit flipped": lambda: _flip_bit(rng, body),
        "a byte inserted": lambda: insert_char(rng, body),
        "a byte deleted": lambda: delete_char(rng, body),
        "truncated": lambda: truncate(rng, body),
        "a newline appended": lambda: body + b"\n",
        "a blank prepended": lambda: b" " + body,
        "empty": lambda: b"",
    }
    name, op = rng.choice(list(ops.items()))
    changed = op()
    assert not template.authentic([template.value], changed)
    return template.probe(f"body: {name} after signing", [template.value], body=changed)


def _flip_bit(rng: random.Random, body: bytes) -> bytes:
    i = rng.randrange(len(body))
    return body[:i] + bytes([body[i] ^ (1 << rng.randrange(8))]) + body[i + 1 :]


def signed_wrongly(secret: bytes, keys: Sequence[bytes]) -> Mutation:
    """The right body signed another way: another key (``keys``: this gateway's other secrets),
    another algorithm, another shape; ``secret`` is the app secret."""

    def mutate(rng: random.Random, template: Template) -> Probe:
        body = template.body
        ways: dict[str, Callable[[], bytes]] = {
            "another secret's HMAC": lambda: hub_signature(rng.choice(keys), body),
            "HMAC with an empty key": lambda: hub_signature(b"", body),
            "HMAC with a changed secret": lambda: hub_signature(_changed(rng, secret), body),
            "HMAC-SHA1": lambda: b"sha256=" + hmac.new(secret, body, "sha1").hexdigest().encode(),
            "HMAC-SHA512 cut to 64 digits": lambda: (
                b"sha256=" + hmac.new(secret, body, "sha512").hexdigest()[:64].encode()
            ),
            "plain SHA-256 of the body": lambda: (
                b"sha256=" + hashlib.sha256(body).hexdigest().encode()
            ),
            "SHA-256 of secret and body": lambda: (
                b"sha256=" + hashlib.sha256(secret + body).hexdigest().encode()
            ),
            "key and message swapped": lambda: hub_signature(body, secret),
            "another algorithm's label": lambda: (
                rng.choice((b"sha1=", b"sha512=", b"hmac=", b"sha256:", b"")) + template.secret
            ),
            "base64 instead of hex": lambda: (
                b"sha256=" + base64.b64encode(hmac.new(secret, body, "sha256").digest())
            ),
        }
        name, way = rng.choice(list(ways.items()))
        value = way()
        assert not template.authentic([value], body)
        return template.probe(f"signature: {name}", [value])

    return mutate


def _changed(rng: random.Random, secret: bytes) -> bytes:
    for _ in range(MAX_DRAWS):
        name, op = rng.choice(list(VALUE_OPS.items()))
        changed = op(rng, secret)
        if changed != secret:
            return changed
    raise AssertionError("the secret could not be changed")


def replayed(others: Callable[[random.Random], tuple[bytes, bytes]]) -> Mutation:
    """The signature of another valid delivery, on this body."""

    def mutate(rng: random.Random, template: Template) -> Probe:
        other_body, other_value = others(rng)
        assert other_body != template.body
        return template.probe("signature: another delivery's, replayed", [other_value])

    return mutate


# -- Telegram: the secret token names the bot -------------------------------------------------


def equal_oracle(secret: bytes) -> Oracle:
    """The header equals the secret (HTTP drops blanks around a header value)."""

    def authentic(values: Sequence[bytes], body: bytes) -> bool:
        return bool(values) and all(value.strip(b" \t") == secret for value in values)

    return authentic


def cross_path(path: str, kind: str, expect: Expect | None = None) -> Mutation:
    """The right credential sent to ``path`` (another bot, or a bot nobody configured)."""

    def mutate(rng: random.Random, template: Template) -> Probe:
        return template.probe(kind, [template.value], path=path, expect=expect)

    return mutate


def unknown_bot(paths: Sequence[str]) -> Mutation:
    def mutate(rng: random.Random, template: Template) -> Probe:
        path = rng.choice(paths)
        return template.probe(
            "path: a bot nobody configured",
            [template.value],
            path=path,
            expect=Expect(404, "unknown_bot"),
        )

    return mutate


# -- the admin API: a bearer token ------------------------------------------------------------


def bearer_oracle(token: bytes) -> Oracle:
    """``Bearer <token>`` (the scheme in any case, RFC 9110), blanks around the token allowed."""
    pattern = re.compile(rb"[ \t]*bearer[ \t]+(.*?)[ \t]*", re.IGNORECASE | re.DOTALL)

    def authentic(values: Sequence[bytes], body: bytes) -> bool:
        matches = [pattern.fullmatch(value) for value in values]
        return bool(values) and all(m and m.group(1) == token for m in matches)

    return authentic


def other_scheme(rng: random.Random, template: Template) -> Probe:
    token = template.secret
    schemes = {
        "Basic": b"Basic " + base64.b64encode(rng.choice((b"admin:", b"", b":")) + token),
        "Token": b"Token " + token,
        "no scheme": token,
        "Bearer without a blank": b"Bearer" + token,
        "Bearer= ": b"Bearer=" + token,
        "Bearer, no token": b"Bearer",
        "Bearer and a blank": b"Bearer ",
    }
    name, value = rng.choice(list(schemes.items()))
    assert not template.authentic([value], template.body)
    return template.probe(f"scheme: {name}", [value])


def token_elsewhere(rng: random.Random, template: Template) -> Probe:
    token = template.secret
    places = {
        "in a cookie": ("Cookie", b"token=" + token),
        "in X-Admin-Token": ("X-Admin-Token", token),
        "in X-Api-Key": ("X-Api-Key", token),
        "in Proxy-Authorization": ("Proxy-Authorization", b"Bearer " + token),
    }
    name, (header, value) = rng.choice(list(places.items()))
    return template.probe(f"credential: {name}", [value], name=header)


def path_variant(paths: Sequence[str]) -> Mutation:
    """Another spelling of an admin path (still under /api/), with a wrong token."""

    def mutate(rng: random.Random, template: Template) -> Probe:
        kind, value = mutated_value(rng, template)
        path = rng.choice(paths)
        return template.probe(f"path variant, credential: {kind}", [value], path=path)

    return mutate


# -- the WhatsApp subscription handshake: the verify token is a query parameter ---------------


def handshake(rng: random.Random, token: bytes, others: Sequence[bytes], challenge: str) -> Probe:
    """A subscription check that must fail: the token, the mode or the parameters changed."""
    kind, params, headers = rng.choice(HANDSHAKE_MUTATIONS)(rng, token, others)
    query = "&".join(f"{quote(k, safe='.')}={quote(v, safe='')}" for k, v in params)
    query += f"&hub.challenge={challenge}"
    return Probe(
        route="GET /webhooks/whatsapp (handshake)",
        kind=kind,
        method="GET",
        target=f"/webhooks/whatsapp?{query}",
        headers=headers,
        body=b"",
        expect=Expect(403, "bad_verify_token"),
        secret_marker=challenge,
    )


def valid_handshake(token: bytes, challenge: str) -> Probe:
    target = f"/webhooks/whatsapp?hub.mode=subscribe&hub.verify_token={quote(token, safe='')}"
    return Probe(
        route="GET /webhooks/whatsapp (handshake)",
        kind="valid",
        method="GET",
        target=f"{target}&hub.challenge={challenge}",
        headers=(),
        body=b"",
        expect=Expect(200),
        secret_marker=challenge,
        mutated=False,
    )


Params = list[tuple[str, bytes]]
Headers = tuple[tuple[str, bytes], ...]
HandshakeMutation = Callable[[random.Random, bytes, Sequence[bytes]], tuple[str, Params, Headers]]
SUBSCRIBE = ("hub.mode", b"subscribe")


def _token_changed(rng: random.Random, token: bytes) -> tuple[str, bytes]:
    for _ in range(MAX_DRAWS):
        name, op = rng.choice(list(VALUE_OPS.items()))
        value = op(rng, token)
        if value != token:  # a query value is compared as it decodes; quote() round-trips
            return name, value
    raise AssertionError("the verify token could not be changed")


def token_changed(
    rng: random.Random, token: bytes, others: Sequence[bytes]
) -> tuple[str, Params, Headers]:
    name, value = _token_changed(rng, token)
    return f"verify token: {name}", [SUBSCRIBE, ("hub.verify_token", value)], ()


def token_other(
    rng: random.Random, token: bytes, others: Sequence[bytes]
) -> tuple[str, Params, Headers]:
    return "verify token: another secret", [SUBSCRIBE, ("hub.verify_token", rng.choice(others))], ()


def token_missing(
    rng: random.Random, token: bytes, others: Sequence[bytes]
) -> tuple[str, Params, Headers]:
    return "verify token: missing", [SUBSCRIBE], ()


def token_repeated(
    rng: random.Random, token: bytes, others: Sequence[bytes]
) -> tuple[str, Params, Headers]:
    params = [SUBSCRIBE] + [("hub.verify_token", _token_changed(rng, token)[1]) for _ in range(2)]
    return "verify token: repeated, every copy wrong", params, ()


def token_renamed(
    rng: random.Random, token: bytes, others: Sequence[bytes]
) -> tuple[str, Params, Headers]:
    name = rng.choice(
        (
            "hub.verify-token",
            "hub_verify_token",
            "Hub.verify_token",
            "verify_token",
            "hub.verify_token ",
        )
    )
    return f"verify token: parameter named {name!r}", [SUBSCRIBE, (name, token)], ()


def token_in_header(
    rng: random.Random, token: bytes, others: Sequence[bytes]
) -> tuple[str, Params, Headers]:
    header = rng.choice((("X-Hub-Verify-Token", token), ("Authorization", b"Bearer " + token)))
    return f"verify token: in {header[0]} instead", [SUBSCRIBE], (header,)


def mode_changed(
    rng: random.Random, token: bytes, others: Sequence[bytes]
) -> tuple[str, Params, Headers]:
    mode = rng.choice(
        (b"Subscribe", b"SUBSCRIBE", b"unsubscribe", b"", b"subscribe ", b"subscribe\x00", None)
    )
    params: Params = [("hub.verify_token", token)]
    if mode is not None:
        params.insert(0, ("hub.mode", mode))
    return f"mode: {mode!r}", params, ()


HANDSHAKE_MUTATIONS: tuple[HandshakeMutation, ...] = (
    token_changed,
    token_changed,
    token_changed,
    token_other,
    token_missing,
    token_repeated,
    token_renamed,
    token_in_header,
    mode_changed,
)


# -- the sandbox's fake Bot API: the bot token is a path segment ------------------------------


def path_token(
    rng: random.Random,
    template: Template,
    path: Callable[[str], str],
    token: bytes,
    others: Sequence[bytes],
) -> Probe:
    """``template`` (with no credential header) sent to ``path(segment)``, the token changed.

    A segment holding ``/`` or naming ``.``/``..`` would not reach the route, so it is drawn
    again; the token is percent-encoded into the path, which the server decodes back.
    """
    if rng.random() < 0.1:
        header, value = rng.choice((("Authorization", b"Bearer " + token), ("X-Bot-Token", token)))
        kind = f"token: in {header}, a wrong one in the path"
        return template.probe(kind, [value], path=path("0"), name=header)
    for _ in range(MAX_DRAWS):
        if rng.random() < 0.15:
            kind, value = "another secret", rng.choice(others)
        else:
            kind, op = rng.choice(list(VALUE_OPS.items()))
            value = op(rng, token)
        if value != token and value not in (b"", b".", b"..") and b"/" not in value:
            return template.probe(f"token: {kind}", [], path=path(quote(value, safe=":")))
    raise AssertionError("no usable token mutation")


def draw(rng: random.Random, template: Template, mutations: Sequence[Mutation]) -> Probe:
    """One mutated request of ``template``."""
    return rng.choice(mutations)(rng, template)
