"""`gateway telegram set-webhook` as a real process against a fake Bot API on loopback."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from pytest_aiohttp import AiohttpServer

from tests.channels.telegram_fakes import FakeBotApi
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
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "webhook_bot_gateway",
        *args,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, output.decode()


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
    fake.script("setWebhook", error(400, "Bad Request: bad webhook: HTTPS url must be provided"))
    server = await aiohttp_server(fake.app())
    config = write_config(tmp_path, str(server.make_url("")).rstrip("/"))
    code, output = await run_gateway(
        "telegram", "set-webhook", "--bot", "support", "--url", "http://x", "--config", str(config)
    )
    assert code == 1
    assert "https url must be provided" in output.lower()
    assert "Traceback" not in output
    assert TOKEN not in output
