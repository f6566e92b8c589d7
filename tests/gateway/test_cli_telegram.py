"""`gateway telegram set-webhook` as a real process against a fake Bot API on loopback."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from tests.channels.telegram_fakes import FakeBotApi, Recorded
from tests.e2e.gateway_proc import free_port
from webhook_bot_gateway.channels.telegram import ALLOWED_UPDATES

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "4242:SECRET-TOKEN-OF-THE-BOT"
SECRET = "webhook-secret-1"


def write_config(tmp_path: Path, api_base_url: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f'[telegram]\napi_base_url = "{api_base_url}"\n'
        f'[[telegram.bots]]\nname = "support"\ntoken = "{TOKEN}"\nsecret_token = "{SECRET}"\n',
        encoding="utf-8",
    )
    return path


async def run_gateway(*args: str) -> tuple[int, str]:
    code, output, _ = await run_gateway_apart(*args, stderr=asyncio.subprocess.STDOUT)
    return code, output


async def run_gateway_apart(
    *args: str, stderr: int = asyncio.subprocess.PIPE
) -> tuple[int, str, str]:
    """Its exit status, stdout and stderr (merged into stdout with ``stderr=STDOUT``)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "webhook_bot_gateway",
        *args,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
    )
    output, errors = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, output.decode(), (errors or b"").decode()


async def test_set_webhook_sends_url_secret_and_allowed_updates(
    aiohttp_server: AiohttpServer, tmp_path: Path
) -> None:
    fake = FakeBotApi()
    server = await aiohttp_server(fake.app())
    config = write_config(tmp_path, str(server.make_url("")).rstrip("/"))
    url = "https://bots.example.com/webhooks/telegram/support"
    code, output = await run_gateway(
        "telegram", "set-webhook", "--bot", "support", "--url", url, "--config", str(config)
    )
    assert code == 0, output
    assert fake.methods() == ["setWebhook"]
    call = fake.calls[0]
    assert call.token == TOKEN
    assert call.fields["url"] == url
    assert call.fields["secret_token"] == SECRET
    assert call.json_field("allowed_updates") == list(ALLOWED_UPDATES)
    assert TOKEN not in output
    assert SECRET not in output


async def test_set_webhook_failure_exits_1_without_the_token(
    aiohttp_server: AiohttpServer, tmp_path: Path
) -> None:
    from tests.channels.telegram_fakes import error

    fake = FakeBotApi()
    refusal = "Bad Request: bad webhook: Failed to resolve host: Name or service not known"
    fake.script("setWebhook", error(400, refusal))
    server = await aiohttp_server(fake.app())
    config = write_config(tmp_path, str(server.make_url("")).rstrip("/"))
    url = "https://nowhere.invalid/webhooks/telegram/support"
    code, output = await run_gateway(
        "telegram", "set-webhook", "--bot", "support", "--url", url, "--config", str(config)
    )
    assert code == 1
    assert "failed to resolve host" in output.lower()
    assert "Traceback" not in output
    assert TOKEN not in output


async def set_webhook_of_support(
    server: AiohttpServer, tmp_path: Path, url: str
) -> tuple[int, str, str]:
    config = write_config(tmp_path, str(server.make_url("")).rstrip("/"))
    return await run_gateway_apart(
        "telegram", "set-webhook", "--bot", "support", "--url", url, "--config", str(config)
    )


EXAMPLE = "https://bots.example.com/webhooks/telegram/support"
NOT_ABSOLUTE = f"--url must be an absolute https URL, such as {EXAMPLE}"
PLAIN_HTTP = f"--url must be https: Telegram calls no plain-http webhook ({EXAMPLE})"


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("notaurl", NOT_ABSOLUTE),
        ("/webhooks/telegram/support", NOT_ABSOLUTE),
        ("https:///webhooks/telegram/support", NOT_ABSOLUTE),
        ("ftp://example.com/webhooks/telegram/support", NOT_ABSOLUTE),
        ("http://example.com/x", PLAIN_HTTP),
        ("HTTP://127.0.0.1:8080/webhooks/telegram/support", PLAIN_HTTP),
        (
            "https://example.com:8080/webhooks/telegram/support",
            "--url's port must be 443, 80, 88 or 8443 (Telegram calls no other), not 8080",
        ),
        (
            "https://example.com:99999/webhooks/telegram/support",
            "--url's port is not a number from 0 to 65535",
        ),
    ],
)
async def test_a_url_telegram_never_calls_is_refused_before_any_call(
    aiohttp_server: AiohttpServer, tmp_path: Path, url: str, error: str
) -> None:
    """The fake (as the sandbox's) took any URL: "webhook ... set to notaurl" and exit 0."""
    fake = FakeBotApi()
    code, out, err = await set_webhook_of_support(await aiohttp_server(fake.app()), tmp_path, url)
    assert (code, out, err) == (1, "", f"error: {error}\n")
    assert fake.methods() == []


@pytest.mark.parametrize("port", ["", ":443", ":80", ":88", ":8443"])
async def test_the_ports_telegram_calls_are_accepted(
    aiohttp_server: AiohttpServer, tmp_path: Path, port: str
) -> None:
    fake = FakeBotApi()
    url = f"https://bots.example.com{port}/webhooks/telegram/support"
    code, out, err = await set_webhook_of_support(await aiohttp_server(fake.app()), tmp_path, url)
    assert (code, out, err) == (0, f"webhook of bot support set to {url}\n", "")
    assert fake.calls[0].fields["url"] == url


async def test_a_path_that_is_not_the_bots_route_is_a_warning(
    aiohttp_server: AiohttpServer, tmp_path: Path
) -> None:
    """A proxy in front may rewrite the path: the webhook is set, with a warning on stderr."""
    fake = FakeBotApi()
    url = "https://bots.example.com/tg/support"
    code, out, err = await set_webhook_of_support(await aiohttp_server(fake.app()), tmp_path, url)
    assert (code, out) == (0, f"webhook of bot support set to {url}\n")
    assert err == (
        "warning: --url does not end with /webhooks/telegram/support, where this gateway takes"
        " bot support's updates; Telegram will post to the URL as given (fine if a proxy in"
        " front rewrites the path)\n"
    )
    assert fake.calls[0].fields["url"] == url


async def test_the_url_is_printed_without_its_password_or_a_token(
    aiohttp_server: AiohttpServer, tmp_path: Path
) -> None:
    fake = FakeBotApi()
    url = f"https://hook:basic-pass-1@bots.example.com/{TOKEN}/webhooks/telegram/support"
    code, out, err = await set_webhook_of_support(await aiohttp_server(fake.app()), tmp_path, url)
    assert code == 0, err
    assert fake.calls[0].fields["url"] == url  # sent as given
    assert out.startswith("webhook of bot support set to https://hook:***@bots.example.com/")
    assert "basic-pass-1" not in out + err
    assert TOKEN not in out + err


async def test_an_answer_that_is_not_json_is_the_one_error_line(
    aiohttp_server: AiohttpServer, tmp_path: Path
) -> None:
    """A proxy's 502 page: PTB logged its own ERROR, with a traceback, before the error line."""
    page = "<html><body><h1>502 Bad Gateway</h1></body></html>"

    async def bad_gateway(request: web.Request, call: Recorded) -> web.StreamResponse:
        return web.Response(status=502, text=page, content_type="text/html")

    fake = FakeBotApi()
    fake.script("setWebhook", bad_gateway)
    code, out, err = await set_webhook_of_support(
        await aiohttp_server(fake.app()), tmp_path, EXAMPLE
    )
    assert (code, out) == (1, "")
    assert err == (
        "error: telegram: NetworkError: Bad Gateway (502). Parsing the server response"
        f" b'{page}' failed\n"
    )


async def test_the_sandbox_not_served_is_named_with_what_to_do(tmp_path: Path) -> None:
    """With the sandbox, the Bot API is `gateway serve` itself: the error said only that it
    could not connect to "the Bot API", which a newcomer takes for Telegram."""
    port = free_port()  # nobody listens there: the gateway is not started
    config = tmp_path / "config.toml"
    config.write_text(
        f"[server]\nport = {port}\n[sandbox]\nenabled = true\n"
        '[telegram]\napi_base_url = "/sandbox/telegram"\n'
        f'[[telegram.bots]]\nname = "support"\ntoken = "{TOKEN}"\nsecret_token = "{SECRET}"\n',
        encoding="utf-8",
    )
    url = "https://bots.example.com/webhooks/telegram/support"
    code, out, err = await run_gateway_apart(
        "telegram", "set-webhook", "--bot", "support", "--url", url, "--config", str(config)
    )
    assert (code, out) == (1, "")
    assert err == (
        "error: telegram: NetworkError: cannot connect to the Bot API (ClientConnectorError):"
        " not sent (ConnectError); telegram.api_base_url is this gateway's own sandbox"
        f" (http://127.0.0.1:{port}/sandbox/telegram), which answers only while `gateway serve`"
        " runs with this config: start it first\n"
    )


async def test_an_unreachable_bot_api_of_its_own_is_not_said_to_be_the_sandbox(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, f"http://127.0.0.1:{free_port()}")
    url = "https://bots.example.com/webhooks/telegram/support"
    code, _, err = await run_gateway_apart(
        "telegram", "set-webhook", "--bot", "support", "--url", url, "--config", str(config)
    )
    assert code == 1
    assert err == (
        "error: telegram: NetworkError: cannot connect to the Bot API (ClientConnectorError):"
        " not sent (ConnectError)\n"
    )
