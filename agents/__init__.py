"""Agents, tools, handoffs, the resolver, the runner and model backends."""

from ._config import AgentsConfig
from ._pruning import ChatMessage, prune_to_turns

__all__ = ["AgentsConfig", "ChatMessage", "prune_to_turns"]
