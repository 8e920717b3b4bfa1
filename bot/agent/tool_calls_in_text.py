"""Recovers tool calls that a model wrote as JSON text instead of structured calls.

This is about a successful response in the wrong shape; a model call that failed is
``model_failure_recovery.py``'s, and a structured call with arguments or a name a provider
would refuse is made well-formed in ``responses.py`` and refused in ``calls.py``.

Some models (and some OpenAI-compatible servers) put ``{"name": ..., "arguments": {...}}``
into ``content``. When every such object names an allowed tool, the response is turned
into real tool calls; anything else is left as text.

The call may be the whole content (bare, in a fence, or a list of calls), or follow a
short lead-in the model wrote first ("I'll check the disk: {...}"), which stays as the
message's text (the reason an approval card shows). A call after prose is taken only in
the shape a model uses when it slipped out of the format, never JSON quoted in an
explanation of something else (a wrong guess runs a tool no one asked for):

- the call ends the content: JSON followed by more text (``… {...} failed because``),
  inside quotes or inline code, is talked about, not made;
- the lead-in is one paragraph of at most ``MAX_LEAD_CHARS``, not a question, with no
  code of its own (no braces or backticks) and no words that talk about a call rather
  than make one (``_TALKS_ABOUT``: an example, the format, what ran earlier, what you
  could send);
- each object is exactly ``{"name", "arguments"}`` (or ``"parameters"``): no other keys.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container

from bot.agent.messages import ModelResponse, ToolCall
from bot.agent.tools import canonical_json

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_TRAILING_FENCE = re.compile(r"```(?:json)?[ \t]*\n(.*?)\s*```\s*\Z", re.DOTALL)
MAX_RECOVER_CHARS = 100_000
MAX_LEAD_CHARS = 500
_CALL_KEYS = ({"name", "arguments"}, {"name", "parameters"})
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_TALKS_ABOUT = re.compile(
    r"\b(?:examples?|e\.g\.|for instance|such as|format|syntax|schema|looks? like|"
    r"would (?:look|be)|you (?:can|could|would|should|might)|instead of|rather than|"
    r"previous|previously|earlier|already|last time|i (?:ran|called|sent|wrote|used)|"
    r"(?:was|were) (?:called|sent|run))\b",
    re.IGNORECASE,
)


def _parse(text: str) -> list[object] | None:
    if not text or text[0] not in "[{" or len(text) > MAX_RECOVER_CHARS:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    return items if items else None


def _objects(text: str) -> list[object] | None:
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1)
    return _parse(stripped)


def _after_lead(text: str) -> tuple[str, list[object]] | None:
    """``(lead-in, objects)`` of prose ending in a call, or ``None`` (module docstring)."""
    stripped = text.strip()
    fenced = _TRAILING_FENCE.search(stripped)
    if fenced is not None:
        lead, body = stripped[: fenced.start()], fenced.group(1)
    else:
        start = stripped.find("{")
        if start <= 0:
            return None
        before = stripped[:start].rstrip()
        if before.endswith("["):  # a list of calls
            start = len(before) - 1
        lead, body = stripped[:start], stripped[start:]
    lead = lead.strip()
    if (
        not lead
        or len(lead) > MAX_LEAD_CHARS
        or lead.endswith("?")  # asking whether to, not doing it
        or _PARAGRAPH_BREAK.search(lead)
        or any(c in lead for c in "{}`")
        or _TALKS_ABOUT.search(lead)
    ):
        return None
    items = _parse(body)
    if items is None or not all(isinstance(i, dict) and set(i) in _CALL_KEYS for i in items):
        return None
    return lead, items


def recover_tool_calls(
    response: ModelResponse, allowed: Container[str], *, id_prefix: str
) -> ModelResponse | None:
    """A copy of ``response`` with structured tool calls, or ``None`` if nothing to recover."""
    if response.tool_calls or not response.content:
        return None
    content: str | None = None
    items = _objects(response.content)
    if items is None:
        found = _after_lead(response.content)
        if found is None:
            return None
        content, items = found
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
    return response.model_copy(update={"content": content, "tool_calls": tuple(calls)})
