"""The people of the emulator and what Slack's client makes of what they type.

:class:`DevUser` is a person the page can act as; :data:`DEV_USERS` are the dev
workspace's (alice asks, bob approves — :data:`APPROVERS` —, mallory may not), whom the
page's hint introduces and whose names the fake Slack answers ``users.info`` with.
:class:`Composer` checks a set of them
and turns typed text into what Slack's client sends (:meth:`Composer.compose`): ``&``,
``<`` and ``>`` escaped, ``@name`` of a dev user or of the bot (``@opsloop``) and an
already written ``<@U…>`` of a known id as mentions; :func:`rich_text` is the block
the client sends along with it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.emulator.slack import BOT_NAME, BOT_USER_ID

_USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,79}")


@dataclass(frozen=True)
class DevUser:
    """A person the page can act as."""

    id: str  # e.g. "UALICE"
    name: str  # "alice"
    role: str  # shown in the switcher, e.g. "requester", "approver", "stranger"


# The people on the page's switcher: who asks, who may approve, who may not.
DEV_USERS: tuple[DevUser, ...] = (
    DevUser("UALICE", "alice", "requester"),
    DevUser("UBOB", "bob", "approver"),
    DevUser("UMALLORY", "mallory", "stranger"),
)
APPROVERS = ",".join(u.id for u in DEV_USERS if u.role == "approver")  # OPSLOOP_APPROVERS


def slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


class Composer:
    """Typed text → Slack's text, for a checked set of dev users.

    ``ValueError`` for a bad or repeated user id or name, or one that is the bot's.
    """

    def __init__(self, users: Sequence[DevUser]) -> None:
        seen: set[str] = set()
        for user in users:
            if not _USER_ID.fullmatch(user.id) or user.id == BOT_USER_ID:
                raise ValueError(f"bad user id {user.id!r}: U followed by capitals or digits")
            if not _NAME.fullmatch(user.name) or user.name == BOT_NAME:
                raise ValueError(f"bad user name {user.name!r}: lower case, digits, . _ -")
            if user.id in seen or user.name in seen:
                raise ValueError(f"user {user.id} / {user.name} given twice")
            seen |= {user.id, user.name}
        self.users: tuple[DevUser, ...] = tuple(users)
        self.by_id = {u.id: u for u in self.users}
        self._ids_by_name = {u.name: u.id for u in self.users} | {BOT_NAME: BOT_USER_ID}
        names = sorted(self._ids_by_name, key=len, reverse=True)
        self._typed = re.compile(
            r"<@(?P<id>[UW][A-Z0-9]+)(?:\|[^<>]*)?>"
            r"|(?<![\w@.])@(?P<name>" + "|".join(map(re.escape, names)) + r")(?![\w-])",
            re.IGNORECASE,
        )
        self._mention = re.compile(rf"<@{BOT_USER_ID}(?:\|[^<>]*)?>")

    def compose(self, typed: str) -> str:
        """What Slack's client sends for ``typed``: ``&``, ``<``, ``>`` escaped, and ``@name``
        (a dev user or ``@opsloop``) and an already written ``<@U…>`` of a known id as mentions.
        """
        parts: list[str] = []
        pos = 0
        for match in self._typed.finditer(typed):
            parts.append(slack_escape(typed[pos : match.start()]))
            if match.group("name"):
                parts.append(f"<@{self._ids_by_name[match.group('name').lower()]}>")
            elif match.group("id") in self.by_id or match.group("id") == BOT_USER_ID:
                parts.append(f"<@{match.group('id')}>")
            else:
                parts.append(slack_escape(match.group(0)))
            pos = match.end()
        parts.append(slack_escape(typed[pos:]))
        return "".join(parts)

    def mentions_bot(self, text: str) -> bool:
        return self._mention.search(text) is not None


def rich_text(text: str) -> dict[str, Any]:
    """The ``rich_text`` block Slack's client sends with a typed message."""
    elements: list[dict[str, Any]] = []
    pos = 0
    for match in re.finditer(r"<@([UW][A-Z0-9]+)>", text):
        if match.start() > pos:
            elements.append({"type": "text", "text": slack_unescape(text[pos : match.start()])})
        elements.append({"type": "user", "user_id": match.group(1)})
        pos = match.end()
    if pos < len(text):
        elements.append({"type": "text", "text": slack_unescape(text[pos:])})
    block_id = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:5]
    return {
        "type": "rich_text",
        "block_id": block_id,
        "elements": [{"type": "rich_text_section", "elements": elements}],
    }


__all__ = [
    "APPROVERS",
    "DEV_USERS",
    "Composer",
    "DevUser",
    "rich_text",
    "slack_escape",
    "slack_unescape",
]
