"""manifest.yml declares exactly the events the app listens to, and what it calls."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "bot" / "slack" / "app.py"

# Slack's bot event subscriptions that deliver each event type bolt listens for.
SUBSCRIPTIONS = {"app_mention": {"app_mention"}, "message": {"message.channels", "message.groups"}}
# Web API methods the bot calls → the scope each needs.
SCOPES = {
    "chat_postMessage": "chat:write",
    "chat_update": "chat:write",
    "chat_postEphemeral": "chat:write",
    "reactions_add": "reactions:write",
    "conversations_replies": "channels:history",
    "usergroups_users_list": "usergroups:read",
}


def manifest() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / "manifest.yml").read_text())


def registered_events() -> set[str]:
    """``self.app.event("…")`` calls in the app module."""
    events = set()
    for node in ast.walk(ast.parse(APP.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "event"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            events.add(str(node.args[0].value))
    return events


def called_methods() -> set[str]:
    source = "\n".join(p.read_text() for p in (ROOT / "bot" / "slack").glob("*.py"))
    return {m for m in SCOPES if f".{m}(" in source}


def test_every_registered_event_is_subscribed_and_the_reverse() -> None:
    events = registered_events()
    assert events == {"app_mention", "message"}
    wanted = set().union(*(SUBSCRIPTIONS[e] for e in events))
    assert set(manifest()["settings"]["event_subscriptions"]["bot_events"]) == wanted


def test_scopes_are_exactly_the_ones_used() -> None:
    scopes = set(manifest()["oauth_config"]["scopes"]["bot"])
    needed = {SCOPES[m] for m in called_methods()}
    needed |= {"app_mentions:read", "channels:history", "groups:history"}  # the events
    assert scopes == needed


def registered_actions() -> set[str]:
    """``self.app.action(NAME)`` calls in the app module (names of blocks.py constants)."""
    found = set()
    for node in ast.walk(ast.parse(APP.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "action"
            and node.args
            and isinstance(node.args[0], ast.Name)
        ):
            found.add(node.args[0].id)
    return found


def test_interactivity_is_declared_exactly_when_actions_are_handled() -> None:
    from bot.slack import blocks

    actions = {getattr(blocks, name) for name in registered_actions()}
    built = {getattr(blocks, n) for n in dir(blocks) if n.startswith("ACTION_")}
    assert actions == built  # every button the bot shows is handled, and the reverse
    settings = manifest().get("settings", {})
    assert settings["interactivity"]["is_enabled"] is True
    events_url = settings["event_subscriptions"]["request_url"]
    assert settings["interactivity"]["request_url"] == events_url  # one endpoint
