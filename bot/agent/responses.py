"""What happens to a model response before the loop acts on it: usage accounting for
the next reservation, tool calls written as text recovered, call ids made unique
within the job (approvals and the write ledger are keyed by them) and ones every
provider accepts, and calls made well-formed.

The assistant message is stored and re-sent in every later request of the thread, so a
call a provider would refuse there (arguments that are not a JSON object, a name
outside ``^[a-zA-Z0-9_-]{1,64}$``) would fail every one of them. Such a call is stored
with ``{}`` / ``INVALID_TOOL_NAME`` instead, what the model wrote kept (bounded) in
``ToolCall.malformed``; ``calls.py`` answers it with an ``Error:`` and never runs it.
An id a provider would refuse (empty, over 40 chars, characters outside
``[a-zA-Z0-9_-]``: a fallback model of another provider, a broken server) is replaced
by a fresh job-unique one, as a repeated id is.

Also whether a response was cut off at the output limit (``cut_off``): such an answer is
not final, the loop asks for the rest."""

from __future__ import annotations

from collections.abc import Container
from typing import assert_never

from bot.agent.messages import (
    AnyMessage,
    AssistantMessage,
    Malformed,
    ModelResponse,
    ToolCall,
    ToolMessage,
    UserMessage,
    parse_arguments,
    sendable_tool_name,
    valid_call_id,
    valid_tool_name,
)
from bot.agent.state import RunState
from bot.agent.tool_calls_in_text import recover_tool_calls


def message_chars(message: AnyMessage) -> int:
    """The characters a message adds to the next prompt (for the token reservation)."""
    match message:
        case UserMessage(content=content) | ToolMessage(content=content):
            return len(content)
        case AssistantMessage(content=content, tool_calls=calls):
            return len(content or "") + sum(len(c.name) + len(c.arguments) for c in calls)
        case _:
            assert_never(message)


MAX_MALFORMED_CHARS = 2_000
"""What is kept of a malformed name or arguments (a cut-off output can be huge)."""


def _kept(text: str) -> str:
    if len(text) <= MAX_MALFORMED_CHARS:
        return text
    note = f"… [{len(text)} chars]"
    return text[: MAX_MALFORMED_CHARS - len(note)] + note


def well_formed(call: ToolCall) -> ToolCall:
    """``call`` as a provider accepts it in history (itself when it already is)."""
    parsed = parse_arguments(call.arguments)
    bad_name = not valid_tool_name(call.name)
    if isinstance(parsed, dict) and not bad_name:
        return call if call.arguments.strip() else call.model_copy(update={"arguments": "{}"})
    malformed = Malformed(
        name=_kept(call.name) if bad_name else None,
        arguments=None if isinstance(parsed, dict) else _kept(call.arguments),
        error=None if isinstance(parsed, dict) else parsed,
    )
    return call.model_copy(
        update={
            "name": sendable_tool_name(call.name),
            "arguments": call.arguments if isinstance(parsed, dict) else "{}",
            "malformed": malformed,
        }
    )


CUT_OFF = frozenset({"length", "max_tokens"})
"""The finish reasons of a response cut off at the output limit: ``length`` (OpenAI and
every OpenAI-compatible server) and ``max_tokens`` (Anthropic's ``stop_reason``, which
its adapter passes on as the neutral ``finish_reason``)."""


def cut_off(response: ModelResponse) -> bool:
    """Whether the model stopped because it ran out of output tokens, not because it was done."""
    return response.finish_reason in CUT_OFF


def account(state: RunState, response: ModelResponse) -> None:
    """Add the response's usage; its prompt size is the base of the next reservation."""
    usage = response.usage
    state.usage = state.usage + usage
    if usage.prompt_tokens:
        state.last_prompt_tokens = usage.prompt_tokens
        state.last_cached_tokens = usage.cached_tokens
        state.chars_since_request = 0


def normalize(state: RunState, response: ModelResponse, allowed: Container[str]) -> ModelResponse:
    """Recover text-written tool calls; give every call a job-unique id that every
    provider accepts (``valid_call_id``) and a form it accepts in history
    (``well_formed``)."""
    if not response.tool_calls:
        recovered = recover_tool_calls(response, allowed, id_prefix=f"recovered_{state.iterations}")
        if recovered is None:
            return response
        response = recovered
    seen = set(state.call_ids)
    fixed: list[ToolCall] = []
    changed = False
    for n, written in enumerate(response.tool_calls):
        call = well_formed(written)
        changed = changed or call is not written
        if call.id in seen or not valid_call_id(call.id):
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
