"""The console's application key."""

from __future__ import annotations

from aiohttp import web

from .tickets import Tickets

TICKETS = web.AppKey("console_tickets", Tickets)
