"""The servers under test, each run in its own process: ``python -m bench.compare.servers``.

- **bare**: an aiohttp handler that reads the body and answers 200 (no dedup, no handler);
- **ptb**: python-telegram-bot's ``Application.run_webhook`` (its tornado server) with a no-op
  ``TypeHandler``; its Bot talks to a fake Bot API on loopback, so it starts offline;
- **chatflow**: chatflow-agent's FastAPI WhatsApp webhook (``WhatsAppChannel``, served by its own
  ``run``: uvicorn) with a ``Runner`` on its ``SQLiteSessionStore`` and a scripted engine. No
  access token, so no reply is sent: the turn is the handler;
- **gateway**: this gateway's application, ack path only (``build_app(..., ingest_only=True)``):
  verify, dedup and commit (SQLite, WAL, synchronous=FULL, group commit) before the 200;
- **served**: the whole gateway as ``gateway serve`` runs it (``build_app``: intake,
  dispatcher, the demo agents of config.example.toml, the sender to the fake platform APIs,
  its default rate limits and backlog bounds), so its turns share the core with its acks.

On SIGUSR1 the peers write what reached their handler (one number per update, duplicates
included) as JSON to ``--stats``; the gateway's handler input is its ``deliveries`` table.
"""

from __future__ import annotations

import argparse
import json
import signal
import tomllib
from pathlib import Path
from types import FrameType
from typing import Any

from bench.compare import stream
from bench.e2e import pin

ROOT = Path(__file__).resolve().parents[2]
BOT_TOKEN = "123456:bench-token"
SERVER_CPU = 0


def dump_on_signal(path: Path, handled: list[int]) -> None:
    """SIGUSR1 writes ``handled`` to ``path`` (written whole, then renamed into place)."""

    def dump(signum: int, frame: FrameType | None) -> None:
        partial = path.with_suffix(".part")
        partial.write_text(json.dumps(handled), encoding="utf-8")
        partial.rename(path)

    signal.signal(signal.SIGUSR1, dump)


def serve_bare(port: int) -> None:
    from aiohttp import web

    async def bare(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b'{"ok":true}', content_type="application/json")

    app = web.Application()
    app.router.add_post(stream.TELEGRAM_PATH, bare)
    app.router.add_post(stream.WHATSAPP_PATH, bare)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def serve_ptb(port: int, fake_api: str, stats: Path) -> None:
    from telegram import Update
    from telegram.ext import ApplicationBuilder, ContextTypes, TypeHandler

    handled: list[int] = []

    async def noop(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        handled.append(update.update_id)

    application = ApplicationBuilder().token(BOT_TOKEN).base_url(f"{fake_api}/bot").build()
    application.add_handler(TypeHandler(Update, noop))
    dump_on_signal(stats, handled)
    application.run_webhook(
        listen="127.0.0.1",
        port=port,
        url_path=stream.TELEGRAM_PATH.lstrip("/"),
        secret_token=stream.TELEGRAM_SECRET,
        webhook_url=f"http://127.0.0.1:{port}{stream.TELEGRAM_PATH}",
    )


def chatflow_channel(
    db: Path, handled: list[int], reply_to: str | None = None, model: str | None = None
) -> Any:
    """chatflow-agent's WhatsApp channel on its SQLite store, answering from a script.

    ``reply_to``: a fake Graph API base URL to send the replies to (see ``bench.compare.
    chatflow``); without one, no access token is set and chatflow sends nothing. ``model``:
    an OpenAI-compatible server's base URL, for its ``OpenAIEngine`` instead of the script.
    """
    from chatflow_agent import Agent, OpenAIEngine, Runner, SQLiteSessionStore, WhatsAppChannel
    from fastapi.routing import APIRoute

    from bench.compare.chatflow import ScriptedEngine, route_sends

    engine = OpenAIEngine(api_key="bench", base_url=model) if model else ScriptedEngine(handled)
    agent = Agent(name="echo", instructions="Echo the order number.", engine=engine)
    runner = Runner(agent, session_store=SQLiteSessionStore(db), engine=engine)
    channel = WhatsAppChannel(
        verify_token="bench",
        app_secret=stream.WHATSAPP_SECRET,
        access_token="bench-token" if reply_to else None,
        phone_number_id=stream.PHONE_NUMBER_ID if reply_to else None,
    )
    if reply_to:
        route_sends(channel, reply_to)
    channel.attach(runner)
    # The same deliveries go to every side: give its POST /webhook handler our path too.
    webhook = next(
        r for r in channel.app.routes if isinstance(r, APIRoute) and "POST" in (r.methods or ())
    )
    channel.app.add_api_route(stream.WHATSAPP_PATH, webhook.endpoint, methods=["POST"])
    return channel


def serve_chatflow(port: int, directory: Path, stats: Path, args: argparse.Namespace) -> None:
    handled: list[int] = []
    channel = chatflow_channel(
        directory / "chatflow.db", handled, args.reply_to or None, args.model or None
    )
    dump_on_signal(stats, handled)
    # like the others, no access log; h11, the HTTP parser its [whatsapp] extra installs
    channel.run(host="127.0.0.1", port=port, log_level="warning", access_log=False)


def gateway_settings(directory: Path, fake_api: str, ingest_only: bool = True) -> Any:
    """config.example.toml with a SQLite file in ``directory`` and both channels configured;
    for the ack path alone the backlog bounds are lifted (nothing drains the backlog)."""
    from webhook_bot_gateway.gateway.config import parse_settings

    raw = tomllib.loads((ROOT / "config.example.toml").read_text(encoding="utf-8"))
    raw["store"] = {"url": f"sqlite:///{directory / 'gateway.db'}"}
    raw["sandbox"] = {"enabled": False}
    raw["media"] = {**raw["media"], "root": str(directory / "media")}
    if ingest_only:
        raw["ingest"] = {**raw["ingest"], "backlog_ready": 10**9 - 1, "backlog_refuse": 10**9}
    bot = {"name": "bench", "token": BOT_TOKEN, "secret_token": stream.TELEGRAM_SECRET}
    raw["telegram"] = {"api_base_url": fake_api, "bots": [bot]}
    number = {"phone_number_id": stream.PHONE_NUMBER_ID, "access_token": "bench-token"}
    raw["whatsapp"] = {
        "graph_base_url": fake_api,
        "app_secret": stream.WHATSAPP_SECRET,
        "verify_token": "bench",
        "numbers": [number],
    }
    return parse_settings(raw, {"GATEWAY_ADMIN_TOKEN": "bench-admin-token"})


def serve_gateway(port: int, directory: Path, fake_api: str, ingest_only: bool) -> None:
    from aiohttp import web

    from webhook_bot_gateway.gateway.app import build_app

    settings = gateway_settings(directory, fake_api, ingest_only)
    app = build_app(settings, ingest_only=ingest_only)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.compare.servers", description=__doc__)
    parser.add_argument("side", choices=["bare", "ptb", "chatflow", "gateway", "served"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", type=Path, required=True, help="files of the side")
    parser.add_argument("--fake-api", default="", help="the fake platform APIs' base URL")
    parser.add_argument("--reply-to", default="", help="chatflow: send replies to this fake")
    parser.add_argument("--model", default="", help="chatflow: an OpenAI-compatible base URL")
    parser.add_argument("--stats", type=Path, help="where SIGUSR1 writes what was handled")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    pin(SERVER_CPU)
    stats = args.stats or args.dir / "handled.json"
    if args.side == "bare":
        serve_bare(args.port)
    elif args.side == "ptb":
        serve_ptb(args.port, args.fake_api, stats)
    elif args.side == "chatflow":
        serve_chatflow(args.port, args.dir, stats, args)
    else:
        serve_gateway(args.port, args.dir, args.fake_api, ingest_only=args.side == "gateway")


if __name__ == "__main__":
    main()
