"""The operator console: its static files, the routes it needs beyond the admin API, and its
live feed (``/console/live``)."""

from .routes import add_console_routes

__all__ = ["add_console_routes"]
