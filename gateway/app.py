"""The aiohttp application: one cleanup context per owned resource, torn down in reverse."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from aiohttp import WSCloseCode, web
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4

from webhook_bot_gateway.channels import ADAPTERS, AdapterFactory
from webhook_bot_gateway.store import Delivery

from ._accounts import gateway_registry
from ._admin._routes import add_admin_routes
from ._admin_token import check_token_file_can_be_made
from ._channels_ctx import channels_ctx
from ._cli._output import OutputError, discard_rest, guarded
from ._console import add_console_routes
from ._console.keys import TICKETS
from ._console.tickets import SECRET_NAME as TICKET_SECRET
from ._demo_credentials import demo_credential_warnings
from ._gc import freeze_startup_objects
from ._http import unmatched
from ._keys import ADAPTERS as CHANNEL_ADAPTERS
from ._keys import (
    BACKLOG,
    FACTORIES,
    FEED,
    HANDED,
    INTAKE_WAKE,
    METRICS,
    PACER,
    PIPELINE_TASKS,
    SENDER_WAKE,
    SETTINGS,
    SOCKETS,
    STOPPING,
    STORE,
    STORE_GAUGES,
    WEB_IDS,
    WRITER,
)
from ._logging import configure_logging
from ._loop import listening_sockets, loop_name, new_event_loop
from ._metrics import BACKLOG as BACKLOG_GAUGE
from ._metrics import BATCH_SIZE, PACED_RATE, Metrics
from ._open_files import raise_open_files_limit, too_few_open_files
from ._pipeline._backlog import Backlog
from ._pipeline._handed import HandedDeliveries
from ._pipeline._lease import Lease
from ._pipeline._pacer import AckPacer
from ._pipeline._wiring import pipeline_ctx
from ._pipeline._writer import GroupCommitWriter
from ._sandbox import add_sandbox_routes, sandbox_warnings
from ._store_gauges import StoreGauges
from ._store_open import open_configured_store
from ._web.attachments import add_attachment_routes
from ._web.feed import EventFeed
from ._web.ids import SECRET_NAME as WEB_SECRET
from ._web.ids import WebIds
from ._web.ws import add_ws_route
from ._webhooks import add_webhook_routes
from .config import Settings, loopback_host, with_admin_token_file, with_bound_port

log = logging.getLogger("gateway")

PROBE_SECONDS = 1.0  # /readyz's write probe (after a refused delivery); longer is "not ready"
# /readyz's read of the backlog: a store whose reads wait behind writes stuck on another
# process's lock answered only after the busy timeout, past a balancer's probe timeout.
READ_SECONDS = 2.0


async def _store_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    store = await open_configured_store(settings)
    lease = Lease(store, settings.store.lease_seconds)
    try:
        await lease.start()
        interrupted = await store.interrupt_running()
        if interrupted:
            log.warning("marked %d session(s) interrupted: their process stopped", len(interrupted))
        app[STORE] = store
        app[WEB_IDS] = WebIds(await store.secret(WEB_SECRET))
        app[TICKETS].use_key(await store.secret(TICKET_SECRET))  # shared by every process
        stop_watching = store.watch_events(app[FEED].notify)
        yield
        stop_watching()
        await lease.stop()  # after the pipeline drained: no turn of ours runs any more
    finally:
        await store.aclose()


async def _backlog_ctx(app: web.Application) -> AsyncIterator[None]:
    ingest = app[SETTINGS].ingest
    backlog = Backlog(app[STORE], ready=ingest.backlog_ready, refuse=ingest.backlog_refuse)
    await backlog.sync()  # what an earlier run left counts before the first request
    backlog.start()
    app[BACKLOG] = backlog
    # Paced only once behind (a backlog read from the store, not this process's estimate,
    # which counts a flood's deliveries before their answers are seen); past backlog_ready
    # the waiting users come first and the pipeline is no longer paced.
    pacer = AckPacer(
        ingest.ack_priority_lag_ms / 1000,
        overloaded=lambda: not backlog.ready,
        behind=lambda: backlog.stored >= ingest.ack_priority_backlog,
    )
    pacer.start()
    app[PACER] = pacer
    app[METRICS].set_function(PACED_RATE, lambda: pacer.held_to)
    app[METRICS].set_function(BACKLOG_GAUGE, lambda: backlog.count)
    yield
    await pacer.aclose()
    await backlog.aclose()


async def _gauges_ctx(app: web.Application) -> AsyncIterator[None]:
    """The gauges /metrics reads from the store (after the channels: they label the outbox)."""
    channels = app[CHANNEL_ADAPTERS].keys()
    gauges = StoreGauges(app[STORE], app[METRICS], channels)
    app[METRICS].register(gauges)
    app[STORE_GAUGES] = gauges
    yield
    await gauges.aclose()


async def _writer_ctx(app: web.Application) -> AsyncIterator[None]:
    ingest = app[SETTINGS].ingest
    wake, handed, metrics = app[INTAKE_WAKE], app[HANDED], app[METRICS]

    def stored(deliveries: Sequence[Delivery]) -> None:
        handed.hand(deliveries)
        wake.set()

    writer = GroupCommitWriter(
        app[STORE],
        window=ingest.window_ms / 1000,
        max_batch=ingest.max_batch,
        on_delivery=stored,
        on_commit=lambda size: metrics.observe(BATCH_SIZE, size),
    )
    writer.start()
    app[WRITER] = writer
    yield
    await writer.aclose()  # the server stopped taking requests: commit what is queued


async def _close_sockets(app: web.Application) -> None:
    """Shutdown: say goodbye to every open socket (their clients reconnect and resume)."""
    sockets: set[web.WebSocketResponse] = app[SOCKETS]
    for ws in list(sockets):
        await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutting down")


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    backlog = request.app[BACKLOG]
    try:
        async with asyncio.timeout(READ_SECONDS):
            count = await backlog.sync()  # a read of the store: also proves that it answers
        if backlog.writes_failing:  # reads may work while writes fail: is it over?
            await _probe_write(request.app)
    except Exception as exc:  # any failure to answer means "not ready"
        log.warning("readiness check failed: %s", type(exc).__name__)
        return _not_ready("store_unavailable", "the store does not answer")
    stopped = sorted(task.get_name() for task in request.app.get(PIPELINE_TASKS, []) if task.done())
    if stopped and not request.app[STOPPING].is_set():
        message = f"pipeline tasks stopped: {', '.join(stopped)}; the log says why"
        return _not_ready("pipeline_stopped", message, tasks=stopped)
    if not backlog.ready:
        message = f"{count} messages wait for an answer, over {backlog.ready_bound}"
        return _not_ready("backlog", message, backlog=count)
    return web.json_response({"status": "ready", "backlog": count})


def _not_ready(code: str, message: str, **detail: object) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message, **detail}}, status=503)


async def _probe_write(app: web.Application) -> None:
    """One small committed write (this process's lease, renewed as its task would): raises
    while the store still refuses writes, else clears ``writes_failing``."""
    async with asyncio.timeout(PROBE_SECONDS):  # a held lock would make it wait the busy timeout
        await app[STORE].renew_lease(app[SETTINGS].store.lease_seconds)
    app[BACKLOG].writes_failing = False


async def metrics(request: web.Request) -> web.Response:
    """GET /metrics: every series of this process, in the Prometheus text format 0.0.4."""
    await request.app[STORE_GAUGES].refresh()  # bounded wait; cached between scrapes
    body = request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})


def sandbox_banner(settings: Settings, token_source: str | None) -> str:
    """What ``make run`` prints: where the console is, and how to sign in: ``token_source``
    (``admin_token_source``: where the token comes from; None: there is none). On stdout,
    never in the log; the token itself never: its first start printed it once."""
    url = f"http://{loopback_host(settings.server.host)}:{settings.server.port}/"
    if token_source is None:
        return (
            f"Sandbox on: open {url}; no one can sign in: admin.token and admin.token_file are"
            " empty, so the admin API is off."
        )
    return f"Sandbox on: open {url} and sign in with {token_source} to play both sides."


def announce_start(token_source: str | None) -> Callable[[web.Application], Awaitable[None]]:
    """on_startup, after every cleanup context (the store open, the channels and the pipeline
    started) and with the port bound: a missing ``admin.token_file`` is made now, its token
    printed once, and the sandbox banner follows. A start that failed before says neither."""

    async def announce(app: web.Application) -> None:
        settings = with_admin_token_file(app[SETTINGS], make=True)
        if settings is not app[SETTINGS]:
            app[SETTINGS] = settings  # the admin API reads its token from here
            configure_logging(settings)  # ... and the log scrubs it
        if settings.sandbox.enabled:
            print_banner(sandbox_banner(settings, token_source))

    return announce


def print_banner(banner: str) -> None:
    """``banner`` on stdout. One that cannot be written (a closed stdout, a full disk) is one
    WARNING and the server serves on: its log, on stderr, says where it listens."""
    stdout = guarded(sys.stdout)
    try:
        stdout.write(banner + "\n")
        stdout.flush()
    except OutputError as exc:
        discard_rest(exc)  # else the interpreter's flush at exit fails again
        log.warning("cannot write the sandbox banner on stdout: %s", exc)


def server_options(settings: Settings) -> dict[str, Any]:
    """Options of aiohttp's per-connection protocol (``RequestHandler``), given to the
    application as ``handler_args``: aiohttp applies them after the runner's own, so
    ``gateway serve`` and every in-process test server run with these (docs/security.md).
    """
    return {
        # After answering a request whose body it did not read, aiohttp reads and discards the
        # rest for up to 10 s ("lingering close") before closing, even after a 413 marked
        # "Connection: close": a refused sender kept its connection. 0: closed at once.
        "lingering_time": 0,
        # aiohttp inflates gzip, deflate, br and zstd request bodies as they arrive, before any
        # handler or size limit sees them (4 KiB of gzip held 4 MiB). Bodies stay as sent;
        # every route that reads one refuses an encoded body with 415.
        "auto_decompress": False,
        # aiohttp has no header timeout of its own. Its keep-alive timer closes a connection
        # that has not delivered a whole request header this long after it opened or after
        # its last response, idle or trickling alike: the one header deadline it offers.
        "keepalive_timeout": settings.server.keepalive_timeout,
    }


def build_app(
    settings: Settings,
    *,
    adapter_factories: Mapping[str, AdapterFactory] = ADAPTERS,
    ingest_only: bool = False,
) -> web.Application:
    """The whole gateway.

    Tests may substitute channel adapters (``adapter_factories``), and with ``ingest_only`` run
    the HTTP side without the pipeline's background tasks, to see the store as ingest left it.
    """
    app = web.Application(handler_args=server_options(settings))
    app[SETTINGS] = settings
    app[FACTORIES] = adapter_factories
    app[METRICS] = Metrics()
    app[STOPPING] = asyncio.Event()
    app[INTAKE_WAKE] = asyncio.Event()
    app[HANDED] = HandedDeliveries()
    app[SENDER_WAKE] = asyncio.Event()
    app[FEED] = EventFeed()
    app[SOCKETS] = set()
    app.on_shutdown.append(_close_sockets)
    # Torn down in reverse: the pipeline's tasks, then the writer (flushes), adapters, store.
    app.cleanup_ctx.extend([_store_ctx, _backlog_ctx, channels_ctx, _gauges_ctx, _writer_ctx])
    if not ingest_only:
        app.cleanup_ctx.append(pipeline_ctx)  # intake, dispatcher, sender, purge
    add_webhook_routes(app)
    add_ws_route(app)
    add_attachment_routes(app)  # before the admin API's catch-all
    add_console_routes(app)  # likewise
    add_admin_routes(app)
    add_sandbox_routes(app, settings)
    for warning in sandbox_warnings(settings):
        log.warning("SANDBOX: %s", warning)
    for warning in demo_credential_warnings(settings):
        log.warning("%s", warning)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", r"/{path:[\s\S]*}", unmatched)  # last: JSON 404 and 405
    return app


async def check_agents(settings: Settings) -> None:
    """Build the agents' registry and close it: a ConfigError naming the key if it fails."""
    registry = await gateway_registry(settings)
    await registry.aclose()


def checked_loop(settings: Settings) -> asyncio.AbstractEventLoop:
    """The event loop ``serve`` runs on, once the agents were built on it: a tool that cannot
    be imported is then a config error like any other, before the store is opened (aiohttp
    does not clean up the contexts already started when a later one fails at startup)."""
    loop = new_event_loop(settings.server.event_loop)
    log.info("event loop: %s", loop_name(loop))
    try:
        loop.run_until_complete(check_agents(settings))
    except BaseException:
        loop.close()
        raise
    return loop


def running_line(banner: str) -> str:
    """aiohttp's start banner as one line: "Running on http://...", without its frame of
    ``=`` and the "(Press CTRL+C to quit)" meant for a terminal."""
    first = banner.strip().splitlines()[0] if banner.strip() else banner
    return first.strip("= ")


def serve(settings: Settings, token_source: str | None = None) -> None:
    """Serve until SIGINT/SIGTERM, then shut down cleanly. ``token_source``: where the admin
    token comes from, for the sandbox banner (``admin_token_source``)."""
    before, after = raise_open_files_limit()
    if after != before:
        log.info("open-files limit raised from %d to %d", before, after)
    too_few = too_few_open_files(settings, after)
    if too_few is not None:
        log.warning("%s", too_few)
    sockets = listening_sockets(settings.server)  # a port in use: an error, before anything
    settings = with_bound_port(settings, sockets[0].getsockname()[1])  # port 0: the one bound
    try:
        check_token_file_can_be_made(settings)  # it is made once started: fail before that
        loop = checked_loop(settings)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    app = build_app(settings)
    # After the cleanup contexts have started: only a start that got this far says so.
    app.on_startup.append(announce_start(token_source))
    app.on_startup.append(freeze_startup_objects)
    web.run_app(
        app,
        sock=sockets,
        loop=loop,
        print=lambda text: log.info("%s", running_line(text)),
        # No line per request: at INFO it cut ingest from ~7,700 to ~3,400 webhooks/s on one
        # core (bench/ingest.py). /metrics counts requests; refusals are logged with a reason.
        access_log=None,
        # keepalive_timeout, lingering_time, auto_decompress: server_options(), on the app.
    )
    log.info("stopped")
