"""Agents declared in Python, for ``agents.module`` tests."""

from webhook_bot_gateway.agents import Agent, Rule, RulesModel, tool


@tool
def echo(text: str) -> str:
    """Say it back."""
    return text


AGENTS = [
    Agent(
        "coder",
        "You write code.",
        tools=[echo],
        model=RulesModel([Rule(match="(?P<t>.+)", tool="echo", arguments={"text": "{t}"})]),
    ),
]

NOT_AGENTS = ["coder"]
