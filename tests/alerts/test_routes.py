"""Where an alert group goes: ``OPSLOOP_ALERTS`` routes (first match wins, ``/regex/`` in
full, ``default_channel``), ``OPSLOOP_ALERTS_CHANNEL`` alone, and every mistake in the file
reported at once, each with its file and line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.alerts.routes import Route, Routes, configured, load_routes, single_channel
from bot.errors import ConfigError

ROUTES = """\
routes:
  - match: {severity: critical, namespace: /prod-.*/}
    channel: C0INCIDENTS
  - match: {team: payments}
    channel: C0PAYMENTS
    investigate: read_only
  - match: {severity: info}
    channel: C0NOISE
    investigate: false
  - match: {code: 500}
    channel: C0ERRORS
    investigate: true
default_channel: C0ALERTS
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "alerts.yml"
    path.write_text(text)
    return path


def mistakes(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_routes(path)
    return str(caught.value)


@pytest.fixture
def routes(tmp_path: Path) -> Routes:
    return load_routes(write(tmp_path, ROUTES))


def test_first_match_wins(routes: Routes) -> None:
    both = {"severity": "critical", "namespace": "prod-eu", "team": "payments"}
    route = routes.route(both)
    assert route is not None
    assert (route.channel, route.investigate, route.line) == ("C0INCIDENTS", "yes", 2)
    route = routes.route({"severity": "warning", "team": "payments"})
    assert route is not None
    assert (route.channel, route.investigate, route.line) == ("C0PAYMENTS", "read_only", 4)


def test_a_regex_matches_the_whole_value(routes: Routes) -> None:
    def channel(namespace: str) -> str | None:
        route = routes.route({"severity": "critical", "namespace": namespace})
        return route.channel if route else None

    assert channel("prod-eu") == "C0INCIDENTS"
    assert channel("prod-") == "C0INCIDENTS"
    assert channel("preprod-eu") == "C0ALERTS"  # a search would match; a full match does not
    assert channel("prod") == "C0ALERTS"


def test_a_value_is_compared_as_written(routes: Routes) -> None:
    found = routes.route({"code": "500"})
    assert found is not None and found.channel == "C0ERRORS"
    assert routes.route({"severity": "Critical", "namespace": "prod-eu"}) == routes.default
    assert routes.route({"namespace": "prod-eu"}) == routes.default  # a label it names is missing


def test_investigate_is_yes_no_or_read_only(routes: Routes) -> None:
    assert [r.investigate for r in routes.routes] == ["yes", "read_only", "no", "yes"]


def test_the_default_channel_takes_what_no_route_matches(routes: Routes) -> None:
    assert routes.route({"team": "search"}) == Route(channel="C0ALERTS")
    assert routes.route({}) == Route(channel="C0ALERTS", investigate="yes")
    assert routes.channels == ("C0INCIDENTS", "C0PAYMENTS", "C0NOISE", "C0ERRORS", "C0ALERTS")


def test_without_a_default_nothing_routes_what_no_route_matches(tmp_path: Path) -> None:
    routes = load_routes(write(tmp_path, "routes:\n  - match: {team: a}\n    channel: C0A\n"))
    assert routes.route({"team": "b"}) is None
    assert routes.default is None


def test_a_route_without_match_takes_everything(tmp_path: Path) -> None:
    routes = load_routes(write(tmp_path, "routes:\n  - channel: C0ALL\n    investigate: no\n"))
    assert routes.route({"anything": "x"}) == Route(channel="C0ALL", investigate="no", line=2)


def test_the_alerts_channel_alone_takes_everything_investigated() -> None:
    routes = configured(None, "C0ALERTS")
    assert routes == single_channel("C0ALERTS")
    assert routes.route({"alertname": "Down"}) == Route(channel="C0ALERTS", investigate="yes")
    assert configured(None, None) is None
    assert configured("", "") is None


def test_the_alerts_channel_must_be_a_channel_id() -> None:
    for bad in ("#alerts", "alerts", "C0ALERTS\n", "U0123ABCD"):
        with pytest.raises(ConfigError, match="OPSLOOP_ALERTS_CHANNEL"):
            single_channel(bad)


def test_the_alerts_channel_is_the_default_of_a_file_without_one(tmp_path: Path) -> None:
    path = write(tmp_path, "routes:\n  - match: {team: a}\n    channel: C0A\n")
    routes = configured(str(path), "C0ALERTS")
    assert routes is not None and routes.default == Route(channel="C0ALERTS")
    # The file's own default stands.
    path = write(tmp_path, ROUTES)
    routes = configured(str(path), "C0OTHER")
    assert routes is not None and routes.default == Route(channel="C0ALERTS")


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("routes:\n  - match: {a: b}\n    channel: general\n", 3, "must be a Slack channel"),
        ("routes:\n  - match: {a: /prod-(/}\n    channel: C0A\n", 2, "bad regular expression"),
        ("routes:\n  - match: {a: b}\n    chanel: C0A\n", 3, "unknown key 'chanel'"),
        ("routes: []\ndefaults: C0A\n", 2, "unknown key 'defaults'"),
        ("routes:\n  - channel: C0A\n    investigate: maybe\n", 3, "investigate must be true"),
        ("routes:\n  - C0A\n", 2, "a route must be a mapping"),
        ("routes:\n  - match: {a: b}\n", 2, "a route needs a channel"),
        ("routes:\n  - match: [a, b]\n    channel: C0A\n", 2, "match must be a mapping"),
        ("routes:\n  - match: {a-b: c}\n    channel: C0A\n", 2, "'a-b' is not a label name"),
        ("routes:\n  - match: {a: [b]}\n    channel: C0A\n", 2, "match.a must be a value"),
        ("routes:\n  - match: {a: ~}\n    channel: C0A\n", 2, "match.a must be a value"),
        ("routes: {a: b}\n", 1, "routes must be a list"),
        ("default_channel: alerts\n", 1, "default_channel must be a Slack channel"),
        ("- a\n- b\n", 1, "must be a mapping with 'routes'"),
        ("", 1, "must be a mapping with 'routes'"),
        ("routes:\n  - match: {a: b\n    channel: C0A\n", 3, "not valid YAML"),
        ("routes:\n\t- channel: C0A\n", 2, "not valid YAML"),
        ("routes:\n  - channel: |\n      C0A\n", 2, "channel must be a Slack channel"),
    ],
)
def test_a_mistake_is_reported_with_file_and_line(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    path = write(tmp_path, text)
    error = mistakes(path)
    assert error.startswith("OPSLOOP_ALERTS: ")
    assert f"{path}:{line}: " in error
    assert says in error


def test_every_mistake_is_reported_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
routes:
  - match: {severity: critical}
    channel: general
  - match: {namespace: /prod-(/}
    channel: C0PROD
  - match: {team: payments}
    channel: C0PAYMENTS
    investigate: maybe
  - just a string
  - match: {team: search}
    channl: C0SEARCH
default_channel: "#alerts"
colour: red
""",
    )
    error = mistakes(path)
    found = re.findall(rf"{re.escape(str(path))}:(\d+): ", error)
    assert [int(n) for n in found] == [3, 4, 8, 9, 11, 12, 13]
    for says in (
        "routes[0]: channel must be a Slack channel id",
        "routes[1]: match.namespace: bad regular expression",
        "routes[2]: investigate must be true, false or read_only",
        "routes[3]: a route must be a mapping",
        "routes[4]: unknown key 'channl'",
        "default_channel must be a Slack channel id",
        "unknown key 'colour'",
    ):
        assert says in error


def test_a_missing_or_huge_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load_routes(tmp_path / "nope.yml")
    big = write(tmp_path, "# " + "x" * (1 << 20) + "\n")
    with pytest.raises(ConfigError, match="larger than"):
        load_routes(big)
    binary = tmp_path / "binary.yml"
    binary.write_bytes(b"routes: \xff\xfe\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_routes(binary)
