"""The thread a person names: a Slack message link, ``CHANNEL:TS`` or a job id, read
strictly (what it names becomes Redis keys). ``opsloop timeline`` and the timeline
shortcut use it (``bot.turns.timeline`` re-exports it)."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

from bot.store.keys import Thread

_CHANNEL = r"[CDG][A-Z0-9]{1,20}"
_TS = r"\d{9,10}\.\d{6}"
_THREAD = re.compile(rf"(?P<channel>{_CHANNEL}):(?P<ts>{_TS})(?::j(?P<n>[1-9]\d{{0,5}}))?")
_LINK_PATH = re.compile(rf"/archives/(?P<channel>{_CHANNEL})/p(?P<digits>\d{{15,16}})/?")
_SLACK_HOST = re.compile(r"([a-z0-9-]+\.)*(slack|slack-gov)\.com")
MAX_REF_CHARS = 500
REF_FORMS = (
    "a Slack message link (https://…slack.com/archives/C123/p1700000000000100), "
    "a thread (C123:1700000000.000100) or a job id (C123:1700000000.000100:j3)"
)


def parse_thread_ref(ref: str) -> Thread:
    """The thread ``ref`` names: a Slack message link (with or without
    ``?thread_ts=…&cid=…``), ``CHANNEL:TS``, or a job id ``CHANNEL:TS:jN``. Anything else
    raises ``ValueError`` saying what is accepted.

    A link to a reply inside a thread carries ``thread_ts`` when copied from Slack's
    "Copy link"; one without it names the message itself, taken as the thread's root
    (``is_message_link`` tells the caller, to say so when nothing is found)."""
    text = ref.strip()
    if not text or len(ref) > MAX_REF_CHARS:
        raise ValueError(f"give {REF_FORMS}")
    if found := _THREAD.fullmatch(text):
        return Thread(found["channel"], found["ts"])
    parts = urlsplit(text)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"cannot read {text[:200]!r}: give {REF_FORMS}")
    if not _SLACK_HOST.fullmatch(parts.hostname) or parts.fragment:
        raise ValueError(f"{text[:200]!r} is not a Slack message link: give {REF_FORMS}")
    path = _LINK_PATH.fullmatch(parts.path)
    if path is None:
        raise ValueError(
            f"{text[:200]!r} is not a link to a message (…/archives/C123/p1700000000000100): "
            f"give {REF_FORMS}"
        )
    channel, digits = path["channel"], path["digits"]
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = set(query) - {"thread_ts", "cid"}
    if unknown or any(len(values) != 1 for values in query.values()):
        raise ValueError(f"the link's query {parts.query[:200]!r} is not Slack's: give {REF_FORMS}")
    if "cid" in query and query["cid"][0] != channel:
        raise ValueError(f"the link's cid {query['cid'][0][:40]!r} is not its channel {channel}")
    thread_ts = query.get("thread_ts", [f"{digits[:-6]}.{digits[-6:]}"])[0]
    if not re.fullmatch(_TS, thread_ts):
        raise ValueError(f"the link's thread_ts {thread_ts[:40]!r} is not a Slack timestamp")
    return Thread(channel, thread_ts)


def is_message_link(ref: str) -> bool:
    """Whether ``ref`` is a link to a message without ``thread_ts``: if that message is a
    reply, its thread is not known from the link (the thread's root is needed)."""
    parts = urlsplit(ref.strip())
    return parts.scheme in ("https", "http") and "thread_ts" not in parse_qs(parts.query)
