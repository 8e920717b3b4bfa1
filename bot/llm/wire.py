"""Per-message JSON fragments, cached, so a request costs O(new messages) to build.

History messages are frozen and appended once; each provider's JSON text for a message
is computed the first time it is sent and reused for every later request of the
conversation. Entries are keyed by object identity and vanish with the message (a weak
reference guards against a recycled ``id``), so the cache never walks or hashes the
history and never outlives it.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable
from typing import Any

dumps: Callable[[Any], str] = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), check_circular=False
).encode


class FragmentCache:
    """``id(obj) -> (weakref, json text)`` for one provider's rendering."""

    __slots__ = ("_entries", "_render")

    def __init__(self, render: Callable[[Any], Any]) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], str]] = {}
        self._render = render

    def get(self, obj: Any) -> str:
        key = id(obj)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is obj:
            return entry[1]
        text = dumps(self._render(obj))
        entries = self._entries
        entries[key] = (weakref.ref(obj, lambda _: entries.pop(key, None)), text)
        return text

    def __len__(self) -> int:
        return len(self._entries)
