"""Provider text made encodable: no lone UTF-16 surrogates.

JSON may escape a surrogate on its own (``"\\ud800"``), and ``json.loads`` turns it into
a Python str that UTF-8 cannot encode (raw CESU-8 bytes do the same: ``json.loads`` of
bytes decodes them with ``surrogatepass``). Kept in history, such a string would fail
every later request of the thread when its body is encoded, and the store when it
writes it. So the adapters pass every string they keep from a response through
``clean`` (text, text deltas, call ids and names) and call arguments through
``clean_arguments`` (a call through ``received_call``, the whole answer through
``HttpModelClient._response``); a lone surrogate becomes U+FFFD. ``encode`` is the last guard, for
text that entered history another way. When there is nothing to replace, ``clean`` is
one regex search, ``clean_arguments`` two, and ``encode`` a plain ``str.encode``.
"""

from __future__ import annotations

import json
import re

from bot.agent.messages import ToolCall
from bot.llm.wire import dumps

_SURROGATE = re.compile("[\ud800-\udfff]")
ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")  # half of a pair, or a lone one


def clean(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (``text`` itself when none)."""
    if _SURROGATE.search(text) is None:
        return text
    # Through UTF-16: a pair that arrived split (two stream pieces joined again) becomes
    # its one character; a lone half has nothing to pair with and becomes U+FFFD.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_arguments(text: str) -> str:
    """Call arguments (JSON text) whose values hold no lone surrogate once parsed.

    A lone surrogate may also sit one level down, escaped inside the JSON text; then
    the arguments are written again with U+FFFD in its place (text with only escaped
    pairs, or that is not JSON, is kept as it is).
    """
    text = clean(text)
    if ESCAPED_SURROGATE.search(text) is None:
        return text
    try:
        written = dumps(json.loads(text))
    except (ValueError, RecursionError):
        return text  # not JSON: stored as {}, the original kept as this ASCII text
    return text if _SURROGATE.search(written) is None else clean(written)


def received_call(call_id: str, name: str, arguments: str) -> ToolCall:
    """A tool call taken from an answer, every string cleaned (an empty id: the core
    assigns one)."""
    return ToolCall(id=clean(call_id), name=clean(name), arguments=clean_arguments(arguments))


def encode(body: str) -> bytes:
    """A request body as UTF-8; lone surrogates (in a history kept from before, or text
    that entered another way) are sent as U+FFFD instead of failing the request."""
    try:
        return body.encode()
    except UnicodeEncodeError:
        # In JSON text written with ensure_ascii=False a surrogate can only be inside a
        # string, so replacing it keeps the JSON valid.
        return clean(body).encode()
