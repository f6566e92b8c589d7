"""Agents, tools, handoffs, the resolver, the runner and model backends."""

from ._agent import Agent, AgentKind, handoff_tool_name
from ._config import AgentConfig, AgentsConfig, OpenAIModelConfig, RuleConfig
from ._config_bool import ConfigBool
from ._context import DEAD_LETTER
from ._errors import (
    AgentConfigError,
    AgentError,
    ContextTooLong,
    ModelBackendError,
    StepLimitExceeded,
    ToolFailed,
    TurnCancelled,
    TurnTimeout,
)
from ._loader import build_registry
from ._loop import NOT_SENT, Reply, ReplyGuard
from ._model import ImagePart, ModelBackend, ModelMessage, ModelResponse, ToolCall, ToolSpec
from ._observer import NO_OBSERVER, ModelOutcome, TurnObserver
from ._openai import OpenAIModel
from ._pruning import ChatMessage, prune_to_turns
from ._registry import Registry
from ._resolver import resolve_agent
from ._rules import Rule, RulesModel
from ._runner import Runner, TurnResult, UserInput
from ._tools import Tool, ToolContext, ToolError, ToolResult, tool

__all__ = [
    "DEAD_LETTER",
    "NOT_SENT",
    "NO_OBSERVER",
    "ModelOutcome",
    "TurnObserver",
    "ImagePart",
    "Agent",
    "AgentConfig",
    "AgentConfigError",
    "AgentError",
    "AgentKind",
    "AgentsConfig",
    "ChatMessage",
    "ConfigBool",
    "ModelBackend",
    "ContextTooLong",
    "ModelBackendError",
    "ModelMessage",
    "ModelResponse",
    "OpenAIModel",
    "OpenAIModelConfig",
    "Registry",
    "Reply",
    "ReplyGuard",
    "Rule",
    "RuleConfig",
    "RulesModel",
    "Runner",
    "StepLimitExceeded",
    "Tool",
    "ToolCall",
    "ToolFailed",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolSpec",
    "TurnCancelled",
    "TurnResult",
    "TurnTimeout",
    "UserInput",
    "build_registry",
    "handoff_tool_name",
    "prune_to_turns",
    "resolve_agent",
    "tool",
]
