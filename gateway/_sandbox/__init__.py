"""The offline sandbox: fake Telegram Bot API and Graph API under ``/sandbox/``, a simulator that
posts correctly signed deliveries through the real webhook routes, and the log of what was sent.

Exists only with ``[sandbox] enabled = true``; see docs/sandbox.md.
"""

from .routes import add_sandbox_routes, sandbox_warnings

__all__ = ["add_sandbox_routes", "sandbox_warnings"]
