"""The sandbox's application key (apart from gateway/_keys.py: it exists only when enabled)."""

from __future__ import annotations

from aiohttp import web

from .state import SandboxState

SANDBOX = web.AppKey("sandbox", SandboxState)
