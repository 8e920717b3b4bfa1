"""What ``opsloop timeline`` and the shortcut accept as a thread: a Slack message link
(with or without ``thread_ts``/``cid``), ``CHANNEL:TS`` or a job id; anything else is
refused with a message naming the accepted forms (these become Redis keys)."""

from __future__ import annotations

import pytest

from bot.store.keys import Thread
from bot.turns.timeline import is_message_link, parse_thread_ref

ROOT = Thread("C123", "1700000000.000100")


@pytest.mark.parametrize(
    "ref",
    [
        "C123:1700000000.000100",
        "  C123:1700000000.000100\n",
        "C123:1700000000.000100:j3",
        "https://acme.slack.com/archives/C123/p1700000000000100",
        "https://acme.slack.com/archives/C123/p1700000000000100/",
        "https://acme.enterprise.slack.com/archives/C123/p1700000000000100",
        # A reply's link as Slack's Copy link makes it: the thread is the root's.
        "https://acme.slack.com/archives/C123/p1700000099000200"
        "?thread_ts=1700000000.000100&cid=C123",
        "https://acme.slack.com/archives/C123/p1700000099000200?thread_ts=1700000000.000100",
    ],
)
def test_the_forms_that_name_a_thread(ref: str) -> None:
    assert parse_thread_ref(ref) == ROOT


def test_private_channels_and_direct_messages() -> None:
    assert parse_thread_ref("G0PRIV:1700000000.000100") == Thread("G0PRIV", "1700000000.000100")
    assert parse_thread_ref("D0DM:1700000000.000100:j1") == Thread("D0DM", "1700000000.000100")


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("", "give a Slack message link"),
        ("web-03", "cannot read"),
        ("c123:1700000000.000100", "cannot read"),  # channel ids are upper case
        ("C123:1700000000.1", "cannot read"),
        ("C123:1700000000.000100:j0", "cannot read"),
        ("C123:1700000000.000100:3", "cannot read"),
        ("C123:1700000000.000100:j3:x", "cannot read"),
        ("C123:1700000000.000100\nDEL x", "cannot read"),
        ("C1*:1700000000.000100", "cannot read"),
        ("https://evil.example.com/archives/C123/p1700000000000100", "not a Slack message link"),
        ("https://slack.com.evil.io/archives/C123/p1700000000000100", "not a Slack message link"),
        ("ftp://acme.slack.com/archives/C123/p1700000000000100", "cannot read"),
        ("https://acme.slack.com/team/U123", "not a link to a message"),
        ("https://acme.slack.com/archives/C123/p17000", "not a link to a message"),
        ("https://acme.slack.com/archives/C123/p1700000000000100?thread_ts=*", "not a Slack"),
        (
            "https://acme.slack.com/archives/C123/p1700000000000100?thread_ts=1&thread_ts=2",
            "query",
        ),
        ("https://acme.slack.com/archives/C123/p1700000000000100?cid=C999", "not its channel"),
        ("https://acme.slack.com/archives/C123/p1700000000000100?x=1", "query"),
        ("C123:1700000000.000100" + " " * 600, "give a Slack message link"),
    ],
)
def test_anything_else_is_refused_saying_what_is_accepted(ref: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as refused:
        parse_thread_ref(ref)
    assert len(str(refused.value)) < 600  # never the whole input echoed back


def test_a_message_link_without_thread_ts_is_known_as_such() -> None:
    """The message itself is taken as the thread's root; the caller says so when Redis
    has nothing of it (it may be a reply)."""
    bare = "https://acme.slack.com/archives/C123/p1700000099000200"
    assert parse_thread_ref(bare) == Thread("C123", "1700000099.000200")
    assert is_message_link(bare)
    assert not is_message_link(bare + "?thread_ts=1700000000.000100&cid=C123")
    assert not is_message_link("C123:1700000000.000100")
