"""The neutral conversation and model-exchange types the core speaks.

Model adapters (``bot.llm``) translate these to and from provider wire formats; the
store persists them as JSON. Everything here is a frozen pydantic model so that a
message appended to history can never change afterwards.

Also the rule every provider applies to a tool call in history (``parse_arguments``,
``valid_tool_name``, ``valid_call_id``): a call that breaks it is stored in a form that
follows it (``bot.agent.responses``), and the adapters never send one that breaks it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

_FROZEN = ConfigDict(frozen=True, extra="forbid")

_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
INVALID_TOOL_NAME = "invalid_tool_name"
"""What a call whose name a provider would refuse is stored and sent as."""


def valid_tool_name(name: str) -> bool:
    """Whether OpenAI and Anthropic accept ``name`` (``^[a-zA-Z0-9_-]{1,64}$``)."""
    return _TOOL_NAME.fullmatch(name) is not None


def sendable_tool_name(name: str) -> str:
    """``name`` when the providers accept it, else ``INVALID_TOOL_NAME``."""
    return name if valid_tool_name(name) else INVALID_TOOL_NAME


MAX_CALL_ID_CHARS = 40
"""OpenAI refuses a longer ``tool_call_id``."""
_CALL_ID = re.compile(r"[a-zA-Z0-9_-]{1,40}")  # 40: MAX_CALL_ID_CHARS


def valid_call_id(call_id: str) -> bool:
    """Whether both providers accept ``call_id`` in history: OpenAI at most
    ``MAX_CALL_ID_CHARS`` chars, Anthropic ``^[a-zA-Z0-9_-]+$``."""
    return _CALL_ID.fullmatch(call_id) is not None


def _not_a_number(constant: str) -> float:
    raise ValueError(f"{constant} is not JSON")


def parse_arguments(text: str) -> dict[str, Any] | str:
    """A call's arguments as the JSON object they must be (blank text is ``{}``), or
    why they are not one (``not valid JSON (…)``, ``expected a JSON object, got list``)."""
    if not text or text.isspace():
        return {}
    try:
        value = json.loads(text, parse_constant=_not_a_number)
    except (ValueError, RecursionError) as exc:
        return f"not valid JSON ({exc})"
    if not isinstance(value, dict):
        return f"expected a JSON object, got {type(value).__name__}"
    return value


class Malformed(BaseModel):
    """What the model wrote when its call could not be stored as written (bounded)."""

    model_config = _FROZEN

    name: str | None = None  # the name, when it was not a valid tool name
    arguments: str | None = None  # the arguments, when they were not a JSON object
    error: str | None = None  # why the arguments were refused, for the model


class ToolCall(BaseModel):
    """A tool call; ``arguments`` is JSON object text.

    A call the model wrote with a name or arguments a provider would refuse in history
    is stored with ``INVALID_TOOL_NAME`` / ``{}`` and what it wrote in ``malformed``;
    such a call is never run.
    """

    model_config = _FROZEN

    id: str
    name: str
    arguments: str = "{}"
    malformed: Malformed | None = None

    @model_serializer(mode="wrap")
    def _without_unset_malformed(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A well-formed call is written exactly as before the field existed, so a
        # reader that forbids unknown keys (an older process, a rolling deploy) reads it.
        data = handler(self)
        if isinstance(data, dict) and data.get("malformed", False) is None:
            del data["malformed"]
        return data


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
