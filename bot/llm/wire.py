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
from collections.abc import Callable, Sequence
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


class PrefixCache:
    """The joined fragments of a conversation's messages, extended as it grows.

    Keyed by the first message's identity; valid while the history still starts with
    the same first message and still holds the same message at the last cached index
    (append-only growth). A condensed or different history simply misses.
    """

    __slots__ = ("_fragments", "_entries", "_max")

    def __init__(self, fragments: FragmentCache, *, max_entries: int = 4096) -> None:
        self._fragments = fragments
        self._entries: dict[int, tuple[weakref.ref[Any], int, weakref.ref[Any], str]] = {}
        self._max = max_entries

    def join(self, messages: Sequence[Any]) -> str:
        """``",".join(fragment(m) for m in messages)``, reusing earlier work."""
        if not messages:
            return ""
        first = messages[0]
        key = id(first)
        entry = self._entries.get(key)
        get = self._fragments.get
        if (
            entry is not None
            and entry[0]() is first
            and len(messages) >= entry[1]
            and messages[entry[1] - 1] is entry[2]()
        ):
            count, text = entry[1], entry[3]
            if count < len(messages):
                text = text + "," + ",".join([get(m) for m in messages[count:]])
        else:
            text = ",".join([get(m) for m in messages])
            if len(self._entries) >= self._max:
                self._entries.clear()  # crude bound; conversations re-warm on their next call
        last = messages[-1]
        entries = self._entries
        entries[key] = (
            weakref.ref(first, lambda _: entries.pop(key, None)),
            len(messages),
            weakref.ref(last),
            text,
        )
        return text


class LastJson:
    """The JSON text of the last value rendered, reused while the same value comes back
    (the system prompt and tools are identical in every request of a job)."""

    __slots__ = ("_render", "_value", "_text")

    def __init__(self, render: Callable[[Any], Any]) -> None:
        self._render = render
        self._value: Any = None
        self._text: str | None = None

    def get(self, value: Any) -> str:
        if self._text is not None and (self._value is value or self._value == value):
            return self._text
        self._value, self._text = value, dumps(self._render(value))
        return self._text
