"""Shared building blocks for agent-core tests: fake tools and a config factory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import BaseModel, Field

from bot.agent import AgentConfig, CallContext, FunctionTool, InMemoryHistory, UserMessage
from bot.agent.events import Event
from bot.agent.testing import FakeClock, ScriptedModel


class HostArgs(BaseModel):
    host: str = Field(description="Host name")


class NoArgs(BaseModel):
    pass


class ServiceArgs(BaseModel):
    host: str = Field(description="Host name")
    service: str = Field(description="Unit name", pattern=r"^[a-z0-9@._-]+$")


def echo_tool(name: str = "check", **kw: Any) -> FunctionTool:
    """A read-only tool answering ``ok <host>``."""

    async def fn(args: HostArgs, ctx: CallContext) -> str:
        return f"ok {args.host}"

    tool = FunctionTool(name=name, description=f"{name} a host", args_model=HostArgs, fn=fn, **kw)
    return tool


class Recorder:
    """An event sink that keeps every event."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.kind == kind]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def make_config(
    model: ScriptedModel,
    *,
    tools: Sequence[FunctionTool] = (),
    memory: InMemoryHistory | None = None,
    prompt: str = "web-03 is at 95% CPU, look into it",
    **kw: Any,
) -> AgentConfig:
    """A config with an in-memory history that starts with the user's request."""
    if memory is None:
        memory = InMemoryHistory()
        memory.append(UserMessage(content=prompt))
    kw.setdefault("job_id", "job-1")
    kw.setdefault("system_prompt", "You are an SRE assistant.")
    return AgentConfig(client=model, memory=memory, tools=tools, **kw)
