"""The ``[agents]`` config section; gateway/config.py composes it into the whole file."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class AgentsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    starting_agent: str = Field(default="triage", min_length=1)
    max_turns: int = Field(default=40, gt=0)
