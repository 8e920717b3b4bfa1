"""manifest.yml declares exactly what the app listens to and calls: the events its listeners
take (``app.event``, and bolt's ``Assistant`` middleware), the scopes of those events and of
every Web API method the edge calls, the shortcuts it handles (``app.shortcut``), the
features those need (the assistant pane, App Home), and interactivity for its buttons. A
listener without its event, scope or feature fails here, and so does a declaration no code
uses."""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
EDGE = ROOT / "bot" / "slack"

# Slack's bot event subscriptions that deliver each event type bolt listens for.
SUBSCRIPTIONS = {
    "app_mention": {"app_mention"},
    "message": {"message.channels", "message.groups"},
    "app_home_opened": {"app_home_opened"},
    "assistant_thread_started": {"assistant_thread_started"},
    "assistant_thread_context_changed": {"assistant_thread_context_changed"},
}
# What bolt's Assistant middleware listens to (``app.assistant(...)``): the pane's events
# and the user's messages in it, which arrive as ``message.im``.
ASSISTANT_SUBSCRIPTIONS = {
    "assistant_thread_started",
    "assistant_thread_context_changed",
    "message.im",
}
# The scope each subscription needs (None: none).
EVENT_SCOPES: dict[str, str | None] = {
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.im": "im:history",
    "assistant_thread_started": "assistant:write",
    "assistant_thread_context_changed": "assistant:write",
    "app_home_opened": None,
}
# Web API methods the bot calls → the scope each needs (None: none). A method called in
# bot/slack and missing here fails ``test_every_called_method_has_a_known_scope``.
SCOPES: dict[str, str | None] = {
    "auth_test": None,
    "chat_postMessage": "chat:write",
    "chat_update": "chat:write",
    "chat_delete": "chat:write",  # its own messages only
    "chat_postEphemeral": "chat:write",
    "chat_startStream": "chat:write",
    "chat_appendStream": "chat:write",
    "chat_stopStream": "chat:write",
    "reactions_add": "reactions:write",
    "conversations_replies": "channels:history",
    "usergroups_users_list": "usergroups:read",
    "users_info": "users:read",
    "conversations_info": "channels:read",
    "assistant_threads_setStatus": "assistant:write",
    "assistant_threads_setSuggestedPrompts": "assistant:write",
    "assistant_threads_setTitle": "assistant:write",
    "views_publish": None,
    "views_open": None,  # no scope: a trigger_id is the permission
    "views_update": None,
    "files_upload_v2": "files:write",
    "files_getUploadURLExternal": "files:write",
    "files_completeUploadExternal": "files:write",
}
# Method families: an attribute call like ``client.chat_postMessage(`` is a Web API call.
METHOD = re.compile(
    r"^(auth|chat|conversations|reactions|usergroups|assistant_threads|views|files|users|"
    r"pins|bookmarks|team|apps|dnd|emoji|search|canvases)_[A-Za-z0-9_]+$"
)
SHORTCUT_SCOPE = "commands"  # Slack: shortcuts need the commands scope


def manifest() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "manifest.yml").read_text()))


@cache
def edge_modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text()) for p in sorted(EDGE.glob("*.py"))}


def _calls(attr: str) -> list[tuple[str, ast.Call]]:
    """Every ``x.<attr>(…)`` call in bot/slack, with its module's name."""
    return [
        (name, node)
        for name, tree in edge_modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == attr
    ]


def _value(module: str, node: ast.expr) -> object:
    """A listener's first argument: a string, or a module-level name (a constant)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return getattr(importlib.import_module(f"bot.slack.{module}"), node.id)
    raise AssertionError(f"bot/slack/{module}.py: a listener of {ast.dump(node)}")


def registered(attr: str) -> set[str]:
    """What ``app.<attr>(X)`` registers across bot/slack (``event``, ``action``, ``shortcut``)."""
    return {str(_value(m, c.args[0])) for m, c in _calls(attr) if c.args}


def uses_assistant() -> bool:
    """Whether bolt's ``Assistant`` middleware is registered (``app.assistant(…)``)."""
    return bool(_calls("assistant")) and any(
        isinstance(n, ast.Name) and n.id == "AsyncAssistant"
        for tree in edge_modules().values()
        for n in ast.walk(tree)
    )


def called_methods() -> set[str]:
    found = set()
    for tree in edge_modules().values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if METHOD.match(node.func.attr):
                    found.add(node.func.attr)
    return found


def wanted_subscriptions() -> set[str]:
    wanted: set[str] = set()
    for event in registered("event"):
        assert event in SUBSCRIPTIONS, f"no subscription known for the {event!r} listener"
        wanted |= SUBSCRIPTIONS[event]
    if uses_assistant():
        wanted |= ASSISTANT_SUBSCRIPTIONS
    return wanted


def test_every_listened_event_is_subscribed_and_the_reverse() -> None:
    events = registered("event")
    assert {"app_mention", "message"} <= events
    bot_events = manifest()["settings"]["event_subscriptions"]["bot_events"]
    assert len(bot_events) == len(set(bot_events))
    assert set(bot_events) == wanted_subscriptions()


def test_every_called_method_has_a_known_scope() -> None:
    unknown = called_methods() - SCOPES.keys()
    assert not unknown, f"add these Web API methods (and their scopes) to SCOPES: {unknown}"


def test_scopes_are_exactly_the_ones_used() -> None:
    scopes = manifest()["oauth_config"]["scopes"]["bot"]
    assert len(scopes) == len(set(scopes))
    needed = {SCOPES[m] for m in called_methods()}
    needed |= {EVENT_SCOPES[s] for s in wanted_subscriptions()}
    if registered("shortcut"):
        needed.add(SHORTCUT_SCOPE)
    assert set(scopes) == needed - {None}


def test_the_shortcuts_declared_are_exactly_the_ones_handled() -> None:
    declared = manifest()["features"].get("shortcuts") or []
    assert {s["callback_id"] for s in declared} == registered("shortcut")
    for shortcut in declared:
        assert shortcut["type"] == "message"  # they act on a message
        assert shortcut["name"] and len(shortcut["name"]) <= 24  # Slack's bound
        assert shortcut["description"] and len(shortcut["description"]) <= 80
    assert "opsloop_investigate" in registered("shortcut")  # DESIGN's callback id


def test_the_features_are_declared_exactly_when_their_listeners_exist() -> None:
    features = manifest()["features"]
    pane = features.get("assistant_view")
    assert (pane is not None) == uses_assistant()
    if pane is not None:
        assert pane["assistant_description"]
        for prompt in pane.get("suggested_prompts") or []:
            assert prompt["title"] and prompt["message"]
    home = features.get("app_home") or {}
    assert bool(home.get("home_tab_enabled")) == ("app_home_opened" in registered("event"))
    # The pane's threads are the bot's DM: its messages tab must be open to people.
    assert bool(home.get("messages_tab_enabled")) == uses_assistant()
    if uses_assistant():
        assert home.get("messages_tab_read_only_enabled") is False


def built_actions() -> set[str]:
    """The action ids the edge defines: module-level ``ACTION_* = "…"`` in bot/slack."""
    found = set()
    for tree in edge_modules().values():
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.startswith("ACTION_"):
                        found.add(str(node.value.value))
    return found


def test_interactivity_is_declared_exactly_when_actions_are_handled() -> None:
    assert registered("action") == built_actions()  # every button shown is handled, and back
    assert "opsloop_feedback" in built_actions()  # the answers' feedback buttons
    settings = manifest().get("settings", {})
    assert settings["interactivity"]["is_enabled"] is True
    events_url = settings["event_subscriptions"]["request_url"]
    assert settings["interactivity"]["request_url"] == events_url  # one endpoint
