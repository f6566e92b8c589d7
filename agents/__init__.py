"""Agents, tools, handoffs, the resolver, the runner and model backends."""

from ._config import AgentsConfig

__all__ = ["AgentsConfig"]
