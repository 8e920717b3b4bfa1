"""Where an alert group goes: ``OPSLOOP_ALERTS`` routes, or ``OPSLOOP_ALERTS_CHANNEL``.

The routes file is YAML::

    routes:
      - match: {severity: critical, namespace: /prod-.*/}
        channel: C0INCIDENTS
        investigate: true        # true (default) | false | read_only
      - match: {team: payments}
        channel: C0PAYMENTS
        investigate: read_only
    default_channel: C0ALERTS    # optional: what no route matches

A route matches when every label it names has that value (a string), or matches the
regular expression between slashes in full (``/prod-.*/``); the first route that matches
wins, then ``default_channel`` (investigated). Without a file, ``OPSLOOP_ALERTS_CHANNEL``
takes every group, investigated. A group that nothing routes is refused (the endpoint's
422).

``load_routes`` reports every mistake with the file and line (``alerts.yml:7: routes[1]:
channel must be a Slack channel id like C0123ABCD``), so ``opsloop check`` and the start
of ``serve`` stop on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from bot.errors import ConfigError

Investigate = Literal["yes", "no", "read_only"]

_CHANNEL = re.compile(r"[CGD][A-Z0-9]{2,}")
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_ROUTES = 500
MAX_FILE_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Matcher:
    label: str
    value: str | None = None  # equal to this
    pattern: re.Pattern[str] | None = None  # or matching this in full

    def __call__(self, labels: Mapping[str, str]) -> bool:
        found = labels.get(self.label)
        if found is None:
            return False
        if self.pattern is not None:
            return self.pattern.fullmatch(found) is not None
        return found == self.value


@dataclass(frozen=True, slots=True)
class Route:
    channel: str
    investigate: Investigate = "yes"
    matchers: tuple[Matcher, ...] = ()
    line: int | None = None  # where the route is written (``None``: the default)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(m(labels) for m in self.matchers)


@dataclass(frozen=True, slots=True)
class Routes:
    routes: tuple[Route, ...] = ()
    default: Route | None = None

    def route(self, labels: Mapping[str, str]) -> Route | None:
        """The first route matching ``labels``, else the default, else None."""
        for route in self.routes:
            if route.matches(labels):
                return route
        return self.default

    @property
    def channels(self) -> tuple[str, ...]:
        found = [r.channel for r in self.routes]
        if self.default is not None:
            found.append(self.default.channel)
        return tuple(dict.fromkeys(found))


def single_channel(channel: str) -> Routes:
    """``OPSLOOP_ALERTS_CHANNEL`` without a routes file: everything there, investigated."""
    if not _CHANNEL.fullmatch(channel):
        raise ConfigError(
            f"OPSLOOP_ALERTS_CHANNEL: {channel!r} is not a Slack channel id like C0123ABCD"
        )
    return Routes(default=Route(channel=channel))


def configured(path: str | None, channel: str | None) -> Routes | None:
    """The routes the settings name: the file, else the one channel, else None."""
    if path:
        return load_routes(path, default_channel=channel)
    if channel:
        return single_channel(channel)
    return None


def load_routes(path: str | Path, *, default_channel: str | None = None) -> Routes:
    """Parse and check a routes file; ``ConfigError`` naming every mistake by line.
    ``default_channel`` (``OPSLOOP_ALERTS_CHANNEL``) stands when the file names none."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"OPSLOOP_ALERTS: {path}: cannot be read ({exc.strerror})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"OPSLOOP_ALERTS: {path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode()
        root = yaml.compose(text)
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"OPSLOOP_ALERTS: {where}: not valid YAML") from None
    problems: list[str] = []
    routes = _parse(root, path, problems)
    if default_channel and routes.default is None and not problems:
        routes = Routes(routes=routes.routes, default=single_channel(default_channel).default)
    if problems:
        raise ConfigError("OPSLOOP_ALERTS: " + "; ".join(problems[:20]))
    return routes


def _scalar(node: yaml.Node | None) -> str | None:
    if isinstance(node, yaml.ScalarNode) and node.tag != "tag:yaml.org,2002:null":
        return str(node.value)
    return None


def _items(node: yaml.Node) -> Iterable[tuple[str, yaml.Node, int]]:
    assert isinstance(node, yaml.MappingNode)
    for key, value in node.value:
        yield str(getattr(key, "value", "")), value, key.start_mark.line + 1


def _parse(root: yaml.Node | None, path: Path, problems: list[str]) -> Routes:
    def bad(line: int, what: str) -> None:
        problems.append(f"{path}:{line}: {what}")

    if root is None or not isinstance(root, yaml.MappingNode):
        line = root.start_mark.line + 1 if root is not None else 1
        bad(line, "the file must be a mapping with 'routes' (and 'default_channel')")
        return Routes()
    routes: list[Route] = []
    default: Route | None = None
    for key, value, line in _items(root):
        if key == "default_channel":
            channel = _scalar(value)
            if channel is None or not _CHANNEL.fullmatch(channel):
                bad(line, "default_channel must be a Slack channel id like C0123ABCD")
            else:
                default = Route(channel=channel)
        elif key == "routes":
            if not isinstance(value, yaml.SequenceNode):
                bad(line, "routes must be a list")
                continue
            if len(value.value) > MAX_ROUTES:
                bad(line, f"at most {MAX_ROUTES} routes")
            for index, item in enumerate(value.value[:MAX_ROUTES]):
                route = _route(item, f"routes[{index}]", bad)
                if route is not None:
                    routes.append(route)
        else:
            bad(line, f"unknown key {key!r} (expected 'routes' or 'default_channel')")
    return Routes(routes=tuple(routes), default=default)


def _route(node: yaml.Node, where: str, bad: Any) -> Route | None:
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.MappingNode):
        bad(line, f"{where}: a route must be a mapping with 'match' and 'channel'")
        return None
    channel: str | None = None
    investigate: Investigate = "yes"
    matchers: list[Matcher] = []
    ok = True
    for key, value, key_line in _items(node):
        if key == "channel":
            channel = _scalar(value)
            if channel is None or not _CHANNEL.fullmatch(channel):
                bad(key_line, f"{where}: channel must be a Slack channel id like C0123ABCD")
                ok = False
        elif key == "investigate":
            choice = _scalar(value)
            if choice in ("true", "True", "yes"):
                investigate = "yes"
            elif choice in ("false", "False", "no"):
                investigate = "no"
            elif choice == "read_only":
                investigate = "read_only"
            else:
                bad(key_line, f"{where}: investigate must be true, false or read_only")
                ok = False
        elif key == "match":
            found = _matchers(value, where, key_line, bad)
            if found is None:
                ok = False
            else:
                matchers.extend(found)
        else:
            bad(key_line, f"{where}: unknown key {key!r} (expected match, channel, investigate)")
            ok = False
    if channel is None and ok:
        bad(line, f"{where}: a route needs a channel")
        ok = False
    if not ok or channel is None:
        return None
    return Route(channel=channel, investigate=investigate, matchers=tuple(matchers), line=line)


def _matchers(node: yaml.Node, where: str, line: int, bad: Any) -> list[Matcher] | None:
    if not isinstance(node, yaml.MappingNode):
        bad(line, f"{where}: match must be a mapping of label: value or /regex/")
        return None
    found: list[Matcher] = []
    ok = True
    for label, value, key_line in _items(node):
        text = _scalar(value)
        if not _LABEL.fullmatch(label):
            bad(key_line, f"{where}: {label!r} is not a label name")
            ok = False
        elif text is None:
            bad(key_line, f"{where}: match.{label} must be a value or /regex/")
            ok = False
        elif len(text) >= 2 and text.startswith("/") and text.endswith("/"):
            try:
                found.append(Matcher(label, pattern=re.compile(text[1:-1])))
            except re.error as exc:
                bad(key_line, f"{where}: match.{label}: bad regular expression ({exc})")
                ok = False
        else:
            found.append(Matcher(label, value=text))
    return found if ok else None
