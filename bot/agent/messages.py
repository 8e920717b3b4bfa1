"""The neutral conversation and model-exchange types the core speaks.

Model adapters (``bot.llm``) translate these to and from provider wire formats; the
store persists them as JSON. Everything here is a frozen pydantic model so that a
message appended to history can never change afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ToolCall(BaseModel):
    """A tool call as the model wrote it; ``arguments`` is the raw JSON text."""

    model_config = _FROZEN

    id: str
    name: str
    arguments: str = "{}"


class UserMessage(BaseModel):
    """A human message (the request, a reply injected mid-run, or a condensed summary)."""

    model_config = _FROZEN

    role: Literal["user"] = "user"
    content: str
    source_id: str | None = None  # e.g. the Slack message ts of an injected reply
    summary: bool = False  # a condensed summary standing in for earlier messages


class AssistantMessage(BaseModel):
    """One model response: text, tool calls, or both."""

    model_config = _FROZEN

    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


class ToolMessage(BaseModel):
    """The result of one tool call, matched to it by ``tool_call_id``."""

    model_config = _FROZEN

    role: Literal["tool"] = "tool"
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False
    confirmed_by: str | None = None  # who approved the call, for history and trace
    artifact: str | None = None  # reference of the full output when it was cut


AnyMessage = UserMessage | AssistantMessage | ToolMessage
Message = Annotated[AnyMessage, Field(discriminator="role")]
"""The discriminated union, for parsing persisted history."""


class Usage(BaseModel):
    """Token usage; ``paid`` is what the token budget counts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def paid(self) -> int:
        return self.prompt_tokens - self.cached_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
        )


class ToolSpec(BaseModel):
    """What the model is told about a tool."""

    model_config = _FROZEN

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """One request to a model: the stable prefix (system, tools) and the history.

    A plain dataclass, not a pydantic model: it is built on every iteration and must
    not walk the history to validate it.
    """

    system: str
    tools: tuple[ToolSpec, ...]
    messages: Sequence[AnyMessage]
    max_output_tokens: int
    stream: bool = False
    time_left: float | None = None  # seconds until the job's deadline: no retry waits past it


class ModelResponse(BaseModel):
    """One model response in neutral form."""

    model_config = _FROZEN

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    finish_reason: str | None = None
    model: str | None = None

    @property
    def is_empty(self) -> bool:
        return not self.tool_calls and not (self.content and self.content.strip())
