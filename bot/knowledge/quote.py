"""Text from the team's files as data: Slack's control syntax taken out, plain ASCII kept.

A runbook is the team's own text, but whatever it says reaches the model, and the model
may repeat it into Slack. :func:`quote_as_data` rewrites every piece of Slack's ``<…>``
syntax into the plain words a person would read, so repeated text can never ping anyone,
name a group, or pose as a mention that looks like someone's approval:

    <@U0BOSS>              → @U0BOSS          <@U0BOSS|boss>        → @boss
    <!channel> <!here>     → @channel @here   <!everyone>           → @everyone
    <!subteam^S012|@sre>   → @sre             <!subteam^S012>       → @S012
    <#C012|ops>            → #ops             <https://x|the docs>  → the docs (https://x)
    <!date^1700000000^{date}|Nov 14> → Nov 14

Any ``<@``, ``<!`` or ``<#`` left over (unclosed, or an odd shape) loses its ``<``, and so
do their HTML-escaped forms (``&lt;@U1&gt;``). A bare ``@here`` is only a word: the bot
never posts with ``link_names`` or ``parse=full``, and Slack turns typed ``@here`` into a
mention only in its own composer, not in text an app posts.

Nothing here decides what is true; the approvals path never reads text (a card's click is
the only approval), this only keeps runbook text from *looking* like Slack's own markup.
"""

from __future__ import annotations

import re

# ``<@U…>`` / ``<@W…>`` with an optional ``|label``.
_USER = re.compile(r"<@([A-Z0-9]+)(?:\|([^<>|]*))?>")
# ``<#C…>`` / ``<#G…>`` with an optional ``|name``.
_CHANNEL = re.compile(r"<#([A-Z0-9]+)(?:\|([^<>|]*))?>")
# ``<!subteam^S…>`` with an optional ``|@handle``.
_SUBTEAM = re.compile(r"<!subteam\^([A-Za-z0-9]+)(?:\|([^<>|]*))?>")
# ``<!date^…|fallback>`` and any other ``<!word…|label>``: the label, else ``@word``.
_SPECIAL = re.compile(r"<!([A-Za-z]+)([^<>|]*)(?:\|([^<>]*))?>")
# ``<https://…|label>``, ``<mailto:…>`` and other ``<scheme:…>`` links.
_LINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.-]*:[^<>|\s]*)(?:\|([^<>]*))?>")
# Whatever is left that still opens Slack syntax, escaped or not.
_LEFTOVER = re.compile(r"(?:<|&lt;)(?=[@!#])")
_ESCAPED = re.compile(r"&lt;([@!#][^<>&\s]*?)&gt;")


def _user(match: re.Match[str]) -> str:
    label = (match.group(2) or "").strip().lstrip("@")
    return "@" + (label or match.group(1))


def _channel(match: re.Match[str]) -> str:
    label = (match.group(2) or "").strip().lstrip("#")
    return "#" + (label or match.group(1))


def _subteam(match: re.Match[str]) -> str:
    label = (match.group(2) or "").strip().lstrip("@")
    return "@" + (label or match.group(1))


def _special(match: re.Match[str]) -> str:
    word, label = match.group(1), (match.group(3) or "").strip()
    if word.lower() in ("here", "channel", "everyone"):
        return "@" + word.lower()
    return label or "@" + word


def _link(match: re.Match[str]) -> str:
    url, label = match.group(1), (match.group(2) or "").strip()
    return f"{label} ({url})" if label and label != url else url


def quote_as_data(text: str) -> str:
    """``text`` with Slack's mention, broadcast, group, channel and link syntax written
    as plain words (see the module docstring for each form)."""
    if "<" not in text and "&lt;" not in text:
        return text
    text = _ESCAPED.sub(r"<\1>", text)  # then read as the unescaped form
    text = _USER.sub(_user, text)
    text = _CHANNEL.sub(_channel, text)
    text = _SUBTEAM.sub(_subteam, text)
    text = _SPECIAL.sub(_special, text)
    text = _LINK.sub(_link, text)
    return _LEFTOVER.sub("", text)
