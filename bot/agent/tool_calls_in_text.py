"""Recovers tool calls that a model wrote as JSON text instead of structured calls.

This is about a successful response in the wrong shape; a model call that failed is
``model_failure_recovery.py``'s, and a structured call with arguments or a name a provider
would refuse is made well-formed in ``responses.py`` and refused in ``calls.py``.

Some models (and some OpenAI-compatible servers) put ``{"name": ..., "arguments": {...}}``
into ``content``. When every such object names an allowed tool, the response is turned
into real tool calls; anything else is left as text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container

from bot.agent.messages import ModelResponse, ToolCall
from bot.agent.tools import canonical_json

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
MAX_RECOVER_CHARS = 100_000


def _objects(text: str) -> list[object] | None:
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1)
    if not stripped or stripped[0] not in "[{" or len(stripped) > MAX_RECOVER_CHARS:
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    return items if items else None


def recover_tool_calls(
    response: ModelResponse, allowed: Container[str], *, id_prefix: str
) -> ModelResponse | None:
    """A copy of ``response`` with structured tool calls, or ``None`` if nothing to recover."""
    if response.tool_calls or not response.content:
        return None
    items = _objects(response.content)
    if items is None:
        return None
    calls: list[ToolCall] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            return None
        name = item.get("name")
        args = item.get("arguments", item.get("parameters", {}))
        if not isinstance(name, str) or name not in allowed:
            return None
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                return None
        if not isinstance(args, dict):
            return None
        calls.append(ToolCall(id=f"{id_prefix}_{index}", name=name, arguments=canonical_json(args)))
    return response.model_copy(update={"content": None, "tool_calls": tuple(calls)})
