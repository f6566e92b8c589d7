"""The pipeline's cleanup context: agents, intake, dispatcher, sender and purge, started together
after the store and the channels, and drained first on shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from webhook_bot_gateway.agents import ModelOutcome, Registry, Runner
from webhook_bot_gateway.channels import ChannelAdapter
from webhook_bot_gateway.store import Store

from .._accounts import account_agents, dead_letter_warnings, gateway_registry
from .._keys import (
    ADAPTERS,
    DISPATCHER,
    HANDED,
    INTAKE_WAKE,
    METRICS,
    PACER,
    PIPELINE_TASKS,
    SENDER_WAKE,
    SETTINGS,
    STOPPING,
    STORE,
)
from .._media.fetch import FetchPolicy
from .._media.worker import MediaWorker
from .._metrics import HANDOFFS, MODEL_SECONDS, TURNS_IN_FLIGHT, Metrics
from .._wait import Later
from ..config import Settings
from ._dispatcher import Dispatcher
from ._gone_agents import answer_gone
from ._handed import HandedDeliveries
from ._intake import Intake
from ._pacer import AckPacer
from ._purge import Purger, retention_of
from ._sender import Sender
from ._username_replay import UsernameReplay

log = logging.getLogger("gateway.pipeline")

INTAKE_POLL_SECONDS = 2.0  # deliveries written by another process are seen within this
DISPATCH_POLL_SECONDS = 5.0
SENDER_POLL_SECONDS = 2.0
MEDIA_POLL_SECONDS = 5.0
SENDER_COALESCE_SECONDS = 0.005  # bench/e2e.py: fewer store reads per reply while busy


@dataclass
class Pipeline:
    """The background half of the gateway, after the ack."""

    intake: Intake
    dispatcher: Dispatcher
    sender: Sender
    purger: Purger
    media: MediaWorker
    intake_wake: asyncio.Event
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self) -> None:
        """Reconcile interrupted runs, queue what is pending, then start every loop."""
        await self.dispatcher.start()  # before any turn can run: it marks `running` interrupted
        await self.media.sweep()  # before any upload or download of this process can begin
        self._spawn(self.dispatcher.run(DISPATCH_POLL_SECONDS), "dispatcher")
        self._spawn(self.intake.run(self.intake_wake, INTAKE_POLL_SECONDS), "intake")
        self._spawn(self.sender.run(SENDER_POLL_SECONDS), "sender")
        self._spawn(self.purger.run(), "purge")
        self._spawn(self.media.run(MEDIA_POLL_SECONDS), "media")

    async def stop(self, grace: float) -> None:
        """Stop parsing, let running turns finish within ``grace``, roll back the rest."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        await self.intake.stop()
        await self.media.stop()  # cut downloads stay pending: fetched again after a start
        await self.dispatcher.drain(max(deadline - loop.time(), 0.0))
        await self.sender.stop(max(deadline - loop.time(), 0.0))
        self.purger.stop()
        self.intake_wake.set()
        _, late = await asyncio.wait(self.tasks, timeout=max(deadline - loop.time(), 0.1))
        for task in late:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(_log_crash)
        self.tasks.append(task)


@dataclass(frozen=True, slots=True)
class TurnMetrics:
    """The runner's observer: model calls and a model's handoffs, in /metrics."""

    metrics: Metrics

    def model_call(self, model: str, seconds: float, outcome: ModelOutcome) -> None:
        self.metrics.observe(MODEL_SECONDS, seconds, model=model, outcome=outcome)

    def handoff(self, source: str, target: str) -> None:
        self.metrics.inc(HANDOFFS, from_agent=source, to_agent=target, reason="handoff")


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("pipeline task %s stopped", task.get_name(), exc_info=task.exception())


def build_pipeline(
    settings: Settings,
    store: Store,
    adapters: Mapping[str, ChannelAdapter],
    registry: Registry,
    *,
    metrics: Metrics,
    intake_wake: asyncio.Event,
    sender_wake: asyncio.Event,
    http: aiohttp.ClientSession,
    pacer: AckPacer | None = None,
    handed: HandedDeliveries | None = None,
) -> Pipeline:
    """Wire the pipeline's parts; nothing runs until ``start()``."""
    sender = Sender(
        store,
        adapters,
        settings.sender,
        metrics=metrics,
        wake=sender_wake,
        coalesce=SENDER_COALESCE_SECONDS,
    )
    media = MediaWorker(
        store,
        adapters,
        http,
        root=Path(settings.media.root),
        policy=fetch_policy(settings),
        wait_seconds=settings.media.download_wait_seconds,
        metrics=metrics,
        min_free_bytes=settings.media.min_free_bytes,
    )
    metrics.allow_agents(registry.names)
    dispatcher = Dispatcher(
        store,
        Runner.from_config(store, registry, settings.agents, TurnMetrics(metrics)),
        settings.dispatcher,
        metrics=metrics,
        adapters=adapters,
        on_outbox=sender_wake.set,
        handoff_agent=_handoff_agent(settings, registry),
        media=media,
        pacer=pacer,
    )
    intake = Intake(
        store,
        adapters,
        starting_agent=settings.agents.starting_agent,
        account_agents=account_agents(settings),
        metrics=metrics,
        on_inbox=dispatcher.offer,
        on_files=media.wake.set,
        resend_times=sender.resend_times,
        on_resend=sender_wake.set,
        pacer=pacer,
        handed=handed,
    )
    keep = settings.dedup.ttl_hours * 3600  # statuses of sent replies may arrive for days
    purger = Purger(
        store,
        interval=settings.dedup.purge_interval_seconds,
        keep_seconds=keep,
        retention=retention_of(settings),
        media_root=Path(settings.media.root),
    )
    metrics.set_function(TURNS_IN_FLIGHT, lambda: dispatcher.running_turns)
    return Pipeline(intake, dispatcher, sender, purger, media, intake_wake)


def _heard(dispatcher: Dispatcher, media: Later, session_ids: Iterable[str]) -> None:
    """Another process's new inbox rows: they are its own; see ``Dispatcher.heard``."""
    dispatcher.heard(session_ids)
    media()


def fetch_policy(settings: Settings) -> FetchPolicy:
    """``[media]``: the allowlist, and the configured platform APIs as trusted origins."""
    bases = (settings.telegram.api_base_url, settings.whatsapp.graph_base_url)
    return FetchPolicy(
        allowed_hosts=settings.media.allowed_hosts,
        trusted_origins=frozenset(str(URL(base).origin()) for base in bases),
        max_bytes=settings.media.max_bytes,
        timeout=settings.media.download_timeout,
    )


def _handoff_agent(settings: Settings, registry: Registry) -> str | None:
    name = settings.dispatcher.dead_letter_handoff
    if name and registry.get(name) is None:
        log.warning("dispatcher.dead_letter_handoff %r is not a declared agent: ignored", name)
        return None
    for warning in dead_letter_warnings(settings):
        log.warning("%s", warning)
    return name or None


async def pipeline_ctx(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: build and start the pipeline; on shutdown drain it, then close agents."""
    settings = app[SETTINGS]
    registry = await gateway_registry(settings)
    for warning in settings.agents.timing_warnings():
        log.warning("%s", warning)
    http = aiohttp.ClientSession()  # media downloads; adapters keep their own
    try:
        pipeline = build_pipeline(
            settings,
            app[STORE],
            app[ADAPTERS],
            registry,
            metrics=app[METRICS],
            intake_wake=app[INTAKE_WAKE],
            sender_wake=app[SENDER_WAKE],
            http=http,
            pacer=app[PACER],
            handed=app[HANDED],
        )
        app[DISPATCHER] = pipeline.dispatcher
        app[PIPELINE_TASKS] = pipeline.tasks
        await pipeline.start()
        # Sessions on an agent no longer declared: warned of, and their waiting users answered.
        gone = asyncio.create_task(answer_gone(app[STORE], registry, pipeline.dispatcher))
        try:
            # Work other processes commit (PostgreSQL) is theirs: looked at here after a grace
            # (what still waits then), not at the next poll; a turn running here at once.
            on_inbox = partial(_heard, pipeline.dispatcher, Later(pipeline.media.wake.set))
            on_outbox = Later(app[SENDER_WAKE].set)
            cancel_here = pipeline.dispatcher.cancel_turn  # what other processes relay
            replay = UsernameReplay(
                app[STORE], app[ADAPTERS], settings.agents.starting_agent, account_agents(settings)
            )
            pipeline.intake.on_quarantined = replay.quarantined
            replaying = replay.running(pipeline.dispatcher.poll_soon)
            async with app[STORE].watch_work(on_inbox, on_outbox, cancel_here), replaying:
                yield
        finally:
            app[STOPPING].set()
            gone.cancel()  # an answer not committed yet rolls back: the next start runs it
            await asyncio.gather(gone, return_exceptions=True)
            timeout = settings.server.shutdown_timeout
            log.info("shutting down: running turns get %g s, then roll back", timeout)
            await pipeline.stop(timeout)
            log.info("pipeline stopped")
    finally:
        await registry.aclose()
        await http.close()
