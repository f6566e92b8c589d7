"""fetch_to_file against real servers on loopback: trusted fakes, and a sink nothing may reach."""

from __future__ import annotations

import asyncio
import logging
import stat
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDictProxy
from pytest_aiohttp import AiohttpServer
from yarl import URL

from webhook_bot_gateway.channels import MediaSource
from webhook_bot_gateway.gateway._media.fetch import (
    CHUNK,
    FetchPolicy,
    MediaRefused,
    fetch_to_file,
    host_allowed,
    is_public_address,
)

SECRET = "123456789:AAH-secret-bot-token_in_the_path"
BEARER = "EAA-secret-bearer-token-0123456789"
BODY = bytes(range(256)) * 1000  # 256,000 bytes: several chunks
ALLOWED = (".fbsbx.com", "graph.facebook.com")
DNS = {
    "rebind.fbsbx.com": ["127.0.0.1"],
    "mixed.fbsbx.com": ["8.8.8.8", "10.0.0.5"],
    "metadata.fbsbx.com": ["169.254.169.254"],
    "cgnat.fbsbx.com": ["100.64.0.1"],
    "mapped.fbsbx.com": ["::ffff:127.0.0.1"],
    "v6local.fbsbx.com": ["fe80::1"],
    "cdn.fbsbx.com": ["157.240.0.35", "2a03:2880:f000::1"],
}


@dataclass
class Seen:
    path: str
    headers: CIMultiDictProxy[str]


@dataclass
class Fake:
    """A server that records every request; a trusted platform fake, or the sink."""

    seen: list[Seen] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    chunks_sent: int = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/file/bot{token}/{name}", self.file)
        app.router.add_get("/redirect", self.redirect)
        app.router.add_get("/hops/{n}", self.hops)
        app.router.add_get("/status/{status}", self.status)
        app.router.add_get("/long", self.long)
        app.router.add_get("/endless", self.endless)
        app.router.add_get("/hang", self.hang)
        app.router.add_get("/hang-body", self.hang_body)
        app.router.add_route("*", "/{tail:.*}", self.anything)
        return app

    def record(self, request: web.Request) -> None:
        self.seen.append(Seen(request.path, request.headers))

    async def file(self, request: web.Request) -> web.StreamResponse:
        self.record(request)
        response = web.StreamResponse(headers={"Content-Type": request.query.get("ct", "")})
        response.content_length = len(BODY)
        await response.prepare(request)
        for start in range(0, len(BODY), 10_000):
            await response.write(BODY[start : start + 10_000])
        return response

    async def redirect(self, request: web.Request) -> web.Response:
        self.record(request)
        status = int(request.query.get("status", "302"))
        return web.Response(status=status, headers={"Location": request.query["to"]})

    async def hops(self, request: web.Request) -> web.Response:
        self.record(request)
        n = int(request.match_info["n"])
        location = f"/hops/{n - 1}" if n else f"/file/bot{SECRET}/x"
        return web.Response(status=307, headers={"Location": location})

    async def status(self, request: web.Request) -> web.Response:
        self.record(request)
        return web.Response(status=int(request.match_info["status"]), text=request.path)

    async def long(self, request: web.Request) -> web.StreamResponse:
        self.record(request)
        response = web.StreamResponse()
        response.content_length = 10_000_000
        await response.prepare(request)
        await response.write(b"x" * 1000)
        await self.release.wait()
        return response

    async def endless(self, request: web.Request) -> web.StreamResponse:
        self.record(request)
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            while not self.release.is_set() and self.chunks_sent < 10_000:
                await response.write(b"y" * 16_384)
                self.chunks_sent += 1
        except ConnectionError:
            pass
        return response

    async def hang(self, request: web.Request) -> web.Response:
        self.record(request)
        await self.release.wait()
        return web.Response(text="too late")

    async def hang_body(self, request: web.Request) -> web.StreamResponse:
        self.record(request)
        response = web.StreamResponse()
        response.content_length = 1000
        await response.prepare(request)
        await response.write(b"z" * 10)
        await self.release.wait()
        return response

    async def anything(self, request: web.Request) -> web.Response:
        self.record(request)
        return web.Response(text="sink")


@dataclass
class Env:
    a: TestServer  # trusted
    b: TestServer  # trusted too, another origin
    sink: TestServer  # not trusted: must never be reached
    fakes: dict[str, Fake]
    folder: Path
    resolved: list[str]

    def url(self, server: TestServer, path: str) -> str:
        return str(server.make_url(path))

    def policy(self, *extra_hosts: str, **overrides: Any) -> FetchPolicy:
        values: dict[str, Any] = {
            "allowed_hosts": ALLOWED + extra_hosts,
            "trusted_origins": frozenset(self.url(s, "/").rstrip("/") for s in (self.a, self.b)),
            "max_bytes": 1_000_000,
            "timeout": 5.0,
        }
        values.update(overrides)
        return FetchPolicy(**values)

    async def resolve(self, host: str) -> list[str]:
        self.resolved.append(host)
        if host not in DNS:
            raise OSError(f"no test DNS entry for {host}")  # never the real DNS
        return DNS[host]


@pytest.fixture(autouse=True)
def no_secret_in_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG)
    yield
    for record in caplog.records:
        if record.name.startswith(("aiohttp.access", "aiohttp.server")):
            continue  # the fake servers' own logs of the paths they served
        text = record.getMessage() + str(record.exc_text or "")
        assert SECRET not in text
        assert BEARER not in text


@pytest.fixture
async def env(aiohttp_server: AiohttpServer, tmp_path: Path) -> AsyncIterator[Env]:
    fakes = {name: Fake() for name in ("a", "b", "sink")}
    servers = [await aiohttp_server(fakes[name].app()) for name in ("a", "b", "sink")]
    folder = tmp_path / "attachments"
    folder.mkdir()
    yield Env(*servers, fakes=fakes, folder=folder, resolved=[])
    for fake in fakes.values():
        fake.release.set()  # let hanging handlers end before the servers close


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def source(url: str, **fields: Any) -> MediaSource:
    values: dict[str, Any] = {
        "url": url,
        "headers": {"Authorization": f"Bearer {BEARER}"},
        "trusted_origin": "https://api.invalid",
    }
    values.update(fields)
    return MediaSource(**values)


async def refused(
    env: Env, session: aiohttp.ClientSession, media: MediaSource, policy: FetchPolicy
) -> MediaRefused:
    before = set(env.folder.iterdir())
    with pytest.raises(MediaRefused) as caught:
        await fetch_to_file(session, media, env.folder / "file.bin", policy, resolver=env.resolve)
    assert set(env.folder.iterdir()) == before  # neither the file nor a part of it
    assert SECRET not in str(caught.value)
    assert BEARER not in str(caught.value)
    assert caught.value.__cause__ is None
    return caught.value


# Downloads that work


async def test_fetch_to_file_streams_a_trusted_download_to_the_file(
    env: Env, session: aiohttp.ClientSession
) -> None:
    dest = env.folder / "photo.png"
    url = env.url(env.a, f"/file/bot{SECRET}/photo.png?ct=image/png")
    result = await fetch_to_file(session, source(url), dest, env.policy(), resolver=env.resolve)

    assert dest.read_bytes() == BODY
    assert (result.size, result.content_type) == (len(BODY), "image/png")
    assert list(env.folder.iterdir()) == [dest]
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600  # a user's file (docs/security.md)
    [seen] = env.fakes["a"].seen
    assert seen.headers["Authorization"] == f"Bearer {BEARER}"
    assert env.resolved == []  # a trusted origin is not resolved by us


async def test_fetch_to_file_prefers_the_announced_type_to_octet_stream(
    env: Env, session: aiohttp.ClientSession
) -> None:
    url = env.url(env.a, f"/file/bot{SECRET}/v.ogg?ct=application/octet-stream")
    media = source(url, content_type="audio/ogg")
    result = await fetch_to_file(session, media, env.folder / "v.ogg", env.policy())
    assert result.content_type == "audio/ogg"


async def test_fetch_to_file_follows_redirects_up_to_the_limit(
    env: Env, session: aiohttp.ClientSession
) -> None:
    dest = env.folder / "x"
    result = await fetch_to_file(session, source(env.url(env.a, "/hops/2")), dest, env.policy())
    assert result.size == len(BODY)
    assert [s.path for s in env.fakes["a"].seen][:3] == ["/hops/2", "/hops/1", "/hops/0"]

    error = await refused(env, session, source(env.url(env.a, "/hops/3")), env.policy())
    assert error.code == "too_many_redirects"


async def test_fetch_to_file_sends_the_headers_only_to_the_first_origin(
    env: Env, session: aiohttp.ClientSession
) -> None:
    to_b = env.url(env.b, f"/file/bot{SECRET}/x")
    to_a = env.url(env.a, f"/file/bot{SECRET}/x")
    for to, server in ((to_b, "b"), (to_a, "a")):
        url = str(env.a.make_url("/redirect").with_query(to=to))
        await fetch_to_file(session, source(url), env.folder / server, env.policy())

    [to_other] = env.fakes["b"].seen
    assert "Authorization" not in to_other.headers
    first, back, same = env.fakes["a"].seen
    for seen in (first, back, same):
        assert seen.headers["Authorization"] == f"Bearer {BEARER}"


@dataclass
class Attempt:
    url: URL
    headers: dict[str, str]


class Stop(Exception):
    """Raised by the trace hook so that nothing connects to the internet."""


async def test_fetch_to_file_connects_to_the_checked_address_with_the_real_host_name(
    env: Env,
) -> None:
    attempts: list[Attempt] = []

    async def on_start(_: object, __: object, params: aiohttp.TraceRequestStartParams) -> None:
        attempts.append(Attempt(params.url, dict(params.headers)))
        if params.url.host != "127.0.0.1":  # the trusted fake is on loopback; nothing else
            raise Stop

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_start)
    cdn = "https://cdn.fbsbx.com:8443/v/t1/x.jpg?oh=abc"
    async with aiohttp.ClientSession(trace_configs=[trace]) as session:
        with pytest.raises(Stop):
            await fetch_to_file(
                session, source(cdn), env.folder / "a", env.policy(), resolver=env.resolve
            )
        redirect = str(env.a.make_url("/redirect").with_query(to=cdn))
        with pytest.raises(Stop):
            await fetch_to_file(
                session, source(redirect), env.folder / "b", env.policy(), resolver=env.resolve
            )

    direct, trusted, via_redirect = attempts
    assert str(direct.url) == "https://157.240.0.35:8443/v/t1/x.jpg?oh=abc"
    assert direct.headers == {"Host": "cdn.fbsbx.com:8443", "Authorization": f"Bearer {BEARER}"}
    assert trusted.url.host == "127.0.0.1"
    assert via_redirect.url == direct.url
    assert via_redirect.headers == {"Host": "cdn.fbsbx.com:8443"}  # another origin: no token
    assert list(env.folder.iterdir()) == []


# Refusals: the sink hears nothing


REFUSALS = [
    ("http://127.0.0.1:{sink}/file/bot{secret}/x", (), "not_https"),
    ("https://127.0.0.1:{sink}/file/bot{secret}/x", (), "host_not_allowed"),
    ("https://127.0.0.1:{sink}/file/bot{secret}/x", ("127.0.0.1",), "private_address"),
    ("https://169.254.169.254/latest/meta-data/{secret}", ("169.254.169.254",), "private_address"),
    ("https://10.0.0.5/file/bot{secret}/x", ("10.0.0.5",), "private_address"),
    ("https://[::1]:{sink}/file/bot{secret}/x", ("::1",), "private_address"),
    ("http://cdn.fbsbx.com:{sink}/{secret}", (), "not_https"),
    ("https://rebind.fbsbx.com:{sink}/{secret}", (), "private_address"),
    ("https://mixed.fbsbx.com:{sink}/{secret}", (), "private_address"),
    ("https://metadata.fbsbx.com/{secret}", (), "private_address"),
    ("https://cgnat.fbsbx.com/{secret}", (), "private_address"),
    ("https://mapped.fbsbx.com:{sink}/{secret}", (), "private_address"),
    ("https://v6local.fbsbx.com/{secret}", (), "private_address"),
    ("https://unknown.fbsbx.com/{secret}", (), "network"),
    ("https://fbsbx.com.evil.example/{secret}", (), "host_not_allowed"),
    ("https://evilfbsbx.com/{secret}", (), "host_not_allowed"),
    ("ftp://cdn.fbsbx.com/{secret}", (), "not_https"),
]


@pytest.mark.parametrize("via_redirect", [False, True], ids=["direct", "redirected"])
@pytest.mark.parametrize(("template", "extra_hosts", "code"), REFUSALS)
async def test_fetch_to_file_refuses_before_sending_anything(
    env: Env,
    session: aiohttp.ClientSession,
    template: str,
    extra_hosts: tuple[str, ...],
    code: str,
    via_redirect: bool,
) -> None:
    url = template.format(sink=env.sink.port, secret=SECRET)
    if via_redirect:
        url = str(env.a.make_url("/redirect").with_query(to=url))
    error = await refused(env, session, source(url), env.policy(*extra_hosts))

    assert error.code == code
    assert env.fakes["sink"].seen == []
    assert len(env.fakes["a"].seen) == int(via_redirect)


async def test_fetch_to_file_refuses_an_error_status(
    env: Env, session: aiohttp.ClientSession
) -> None:
    error = await refused(env, session, source(env.url(env.a, "/status/404")), env.policy())
    assert error.code == "http_status"
    assert "404" in str(error)


async def test_fetch_to_file_refuses_a_redirect_to_a_bad_url(
    env: Env, session: aiohttp.ClientSession
) -> None:
    url = str(env.a.make_url("/redirect").with_query(to=f"https://[{SECRET}/"))
    error = await refused(env, session, source(url), env.policy())
    assert error.code == "bad_url"


# Size


async def test_fetch_to_file_refuses_an_announced_size_before_asking(
    env: Env, session: aiohttp.ClientSession
) -> None:
    media = source(env.url(env.a, f"/file/bot{SECRET}/x"), size=2_000_000)
    assert (await refused(env, session, media, env.policy())).code == "too_large"
    assert env.fakes["a"].seen == []


async def test_fetch_to_file_refuses_a_content_length_over_the_limit_before_the_body(
    env: Env, session: aiohttp.ClientSession
) -> None:
    error = await refused(env, session, source(env.url(env.a, "/long")), env.policy())
    assert (error.code, error.received) == ("too_large", 0)


async def test_fetch_to_file_stops_a_chunked_body_at_the_limit(
    env: Env, session: aiohttp.ClientSession
) -> None:
    policy = env.policy(max_bytes=100_000)
    error = await refused(env, session, source(env.url(env.a, "/endless")), policy)
    assert error.code == "too_large"
    assert 100_000 < error.received <= 100_001 < 100_000 + CHUNK


async def test_fetch_to_file_accepts_a_body_of_exactly_the_limit(
    env: Env, session: aiohttp.ClientSession
) -> None:
    dest = env.folder / "x"
    policy = env.policy(max_bytes=len(BODY))
    result = await fetch_to_file(session, source(env.url(env.a, "/file/bot1/x")), dest, policy)
    assert result.size == dest.stat().st_size == len(BODY)


# Time


@pytest.mark.parametrize("path", ["/hang", "/hang-body"])
async def test_fetch_to_file_times_out_on_a_hanging_server(
    env: Env, session: aiohttp.ClientSession, path: str
) -> None:
    error = await refused(env, session, source(env.url(env.a, path)), env.policy(timeout=0.2))
    assert error.code == "timeout"
    assert error.received == (10 if path == "/hang-body" else 0)


async def test_fetch_to_file_network_error_names_only_the_host(
    env: Env, session: aiohttp.ClientSession
) -> None:
    port = env.sink.port
    await env.sink.close()  # nothing listens there any more
    trusted = f"http://127.0.0.1:{port}"
    policy = env.policy(trusted_origins=frozenset({trusted}))
    error = await refused(env, session, source(f"{trusted}/file/bot{SECRET}/x"), policy)
    assert error.code == "network"
    assert "127.0.0.1" in str(error)


# The rules themselves


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("157.240.0.35", True),
        ("2a03:2880:f000::1", True),
        ("64:ff9b::808:808", True),  # NAT64 of 8.8.8.8
        ("127.0.0.1", False),
        ("10.0.0.5", False),
        ("172.16.0.1", False),
        ("172.31.255.255", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("100.127.255.255", False),
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("239.255.255.250", False),
        ("240.0.0.1", False),
        ("255.255.255.255", False),
        ("::", False),
        ("::1", False),
        ("fc00::1", False),
        ("fd12:3456::1", False),
        ("fe80::1", False),
        ("fe80::1%eth0", False),
        ("ff02::1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:10.0.0.5", False),
        ("64:ff9b::a00:5", False),  # NAT64 of 10.0.0.5
        ("2002:a00:5::1", False),  # 6to4 of 10.0.0.5
        ("not an address", False),
    ],
)
def test_is_public_address(address: str, public: bool) -> None:
    assert is_public_address(address) is public


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("graph.facebook.com", True),
        ("GRAPH.facebook.com.", True),
        ("x.graph.facebook.com", False),
        ("fbsbx.com", True),
        ("lookaside.fbsbx.com", True),
        ("a.b.fbsbx.com", True),
        ("evilfbsbx.com", False),
        ("fbsbx.com.evil.example", False),
        ("facebook.com", False),
    ],
)
def test_host_allowed(host: str, allowed: bool) -> None:
    assert host_allowed(host, ALLOWED) is allowed
