"""Typed application keys: what each cleanup context owns, shared without import cycles."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web

from webhook_bot_gateway.channels import AdapterFactory, ChannelAdapter
from webhook_bot_gateway.store import Store

from ._admin._operator_writes import OperatorWrites
from ._metrics import Metrics
from ._pipeline._backlog import Backlog
from ._pipeline._dispatcher import Dispatcher
from ._pipeline._handed import HandedDeliveries
from ._pipeline._pacer import AckPacer
from ._pipeline._writer import GroupCommitWriter
from ._store_gauges import StoreGauges
from ._web.feed import EventFeed
from ._web.ids import WebIds
from .config import Settings


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """What the admin API tells of a declared agent."""

    name: str
    kind: str  # bot / human
    description: str
    handoff_reply: str = ""  # a human agent's: what the user is told when handed to it


SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", Store)
METRICS = web.AppKey("metrics", Metrics)
STORE_GAUGES = web.AppKey("store_gauges", StoreGauges)  # /metrics' gauges read from the store
STOPPING = web.AppKey("stopping", asyncio.Event)
# Wake-ups between the pipeline's tasks. Each task also polls now and then, so a missed
# wake-up (or a row written by another process, e.g. `gateway quarantine replay`) only delays.
INTAKE_WAKE = web.AppKey("intake_wake", asyncio.Event)  # new deliveries were committed
HANDED = web.AppKey("handed", HandedDeliveries)  # ...and here they are (the intake's to trust)
SENDER_WAKE = web.AppKey("sender_wake", asyncio.Event)  # new outbox rows were committed
ADAPTERS = web.AppKey("adapters", Mapping[str, ChannelAdapter])  # by channel name
# Factories the adapters are built with; channels.ADAPTERS unless a test substitutes one.
FACTORIES = web.AppKey("adapter_factories", Mapping[str, AdapterFactory])
WRITER = web.AppKey("writer", GroupCommitWriter)  # the group-commit ingest writer
PACER = web.AppKey("ack_pacer", AckPacer)  # slows the pipeline while acks are slow
BACKLOG = web.AppKey("backlog", Backlog)  # acknowledged, unanswered messages and their bounds
DISPATCHER = web.AppKey("dispatcher", Dispatcher)  # absent with ingest_only: no turns run
# The pipeline's long-running tasks (intake, dispatcher, sender...): one that ended: /readyz 503
PIPELINE_TASKS = web.AppKey("pipeline_tasks", list[asyncio.Task[None]])
FEED = web.AppKey("event_feed", EventFeed)  # wakes /ws sockets when their session's log grows
WEB_IDS = web.AppKey("web_ids", WebIds)  # gives out and recognizes web session ids
# Open /ws and /console/live sockets: closed at shutdown, which would otherwise wait for them.
SOCKETS = web.AppKey("open_sockets", set[web.WebSocketResponse])
AGENTS = web.AppKey("agents", tuple["AgentInfo", ...])  # declared agents, for the console
AGENT_NAMES = web.AppKey("agent_names", frozenset[str])  # declared agents, for admin handoffs
# The admin API's replies, templates, handoffs and rewinds of one session: one at a time.
OPERATOR_WRITES = web.AppKey("operator_writes", OperatorWrites)
