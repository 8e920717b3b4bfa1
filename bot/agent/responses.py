"""What happens to a model response before the loop acts on it: usage accounting for
the next reservation, tool calls written as text recovered, and call ids made unique
within the job (approvals and the write ledger are keyed by them)."""

from __future__ import annotations

from collections.abc import Container
from typing import assert_never

from bot.agent.messages import (
    AnyMessage,
    AssistantMessage,
    ModelResponse,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from bot.agent.state import RunState
from bot.agent.toolcall_recovery import recover_tool_calls


def message_chars(message: AnyMessage) -> int:
    """The characters a message adds to the next prompt (for the token reservation)."""
    match message:
        case UserMessage(content=content) | ToolMessage(content=content):
            return len(content)
        case AssistantMessage(content=content, tool_calls=calls):
            return len(content or "") + sum(len(c.name) + len(c.arguments) for c in calls)
        case _:
            assert_never(message)


def account(state: RunState, response: ModelResponse) -> None:
    """Add the response's usage; its prompt size is the base of the next reservation."""
    usage = response.usage
    state.usage = state.usage + usage
    if usage.prompt_tokens:
        state.last_prompt_tokens = usage.prompt_tokens
        state.last_cached_tokens = usage.cached_tokens
        state.chars_since_request = 0


def normalize(state: RunState, response: ModelResponse, allowed: Container[str]) -> ModelResponse:
    """Recover text-written tool calls; give every call a unique, non-empty id."""
    if not response.tool_calls:
        recovered = recover_tool_calls(response, allowed, id_prefix=f"recovered_{state.iterations}")
        if recovered is None:
            return response
        response = recovered
    seen = set(state.call_ids)
    fixed: list[ToolCall] = []
    changed = False
    for n, call in enumerate(response.tool_calls):
        if not call.id or call.id in seen:
            fresh, k = f"call_{state.iterations}_{n}", 0
            while fresh in seen:
                k += 1
                fresh = f"call_{state.iterations}_{n}_{k}"
            call = call.model_copy(update={"id": fresh})
            changed = True
        seen.add(call.id)
        state.call_ids.append(call.id)
        fixed.append(call)
    return response.model_copy(update={"tool_calls": tuple(fixed)}) if changed else response
