"""Agents, tools, handoffs, the resolver, the runner and model backends."""
