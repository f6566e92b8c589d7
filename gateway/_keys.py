"""Typed application keys: what each cleanup context owns, shared without import cycles."""

from __future__ import annotations

import asyncio

from aiohttp import web

from store import Store

from ._metrics import Metrics
from .config import Settings

SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", Store)
METRICS = web.AppKey("metrics", Metrics)
STOPPING = web.AppKey("stopping", asyncio.Event)
# Wake-ups between the pipeline's tasks. Each task also polls now and then, so a missed
# wake-up (or a row written by another process, e.g. `gateway quarantine replay`) only delays.
INTAKE_WAKE = web.AppKey("intake_wake", asyncio.Event)  # new deliveries were committed
SENDER_WAKE = web.AppKey("sender_wake", asyncio.Event)  # new outbox rows were committed
