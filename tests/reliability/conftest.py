"""The end-to-end fixtures (fake platforms, the gateway as a process, a fresh PostgreSQL schema)
for the reliability tests too."""

from tests.e2e.conftest import http, make_gateway, platforms, postgres  # noqa: F401
