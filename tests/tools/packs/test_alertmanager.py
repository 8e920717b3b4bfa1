"""The alertmanager pack against a real Alertmanager (API v2), shared by the module.

Alerts are posted to it as Prometheus would; each test uses its own alert names so the
shared server's state never couples tests. Tools run through ``execute`` with validated
arguments and a call context, as the agent core calls them (the approver arrives in
``CallContext.confirmed_by``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from bot.agent.tools import CallContext, Tool, needs_confirm, tool_spec
from bot.errors import ConfigError, ToolError
from tests.tools.packs.backends import (  # noqa: F401  (alertmanager_server, silent_server: fixtures)
    AlertmanagerServer,
    alertmanager_server,
    basic_auth_server,
    free_port,
    silent_server,
)
from tools.packs import PackConfig, load_packs
from tools.packs.alertmanager import alertmanager_tools, build
from tools.packs.prometheus import Backend

APPROVER = "U0APPROVER"
APPROVED = CallContext(job_id="C1:1.1:j1", call_id="call-1", confirmed_by=APPROVER)
READ = CallContext(job_id="C1:1.1:j1", call_id="call-2")
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


async def run(tools: Mapping[str, Tool], name: str, ctx: CallContext = READ, **args: object) -> str:
    tool = tools[name]
    result = await tool.execute(tool.args_model.model_validate(args), ctx)
    assert isinstance(result, str)
    return result


@pytest.fixture
async def pack(alertmanager_server: AlertmanagerServer) -> AsyncIterator[dict[str, Tool]]:  # noqa: F811
    built = build(PackConfig(alertmanager_url=alertmanager_server.url))
    yield {tool.name: tool for tool in built.tools}
    for close in built.closers:
        await close()


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


async def direct(server: AlertmanagerServer, path: str) -> Any:
    """Alertmanager's own answer, read around the pack."""
    async with httpx.AsyncClient(base_url=server.url, timeout=5) as client:
        response = await client.get(path)
    response.raise_for_status()
    return response.json()


@pytest.fixture
async def offline() -> AsyncIterator[dict[str, Tool]]:
    """The tools against a URL nothing serves: for what is decided before any request."""
    built = build(PackConfig(alertmanager_url="http://127.0.0.1:9"))
    yield {tool.name: tool for tool in built.tools}
    for close in built.closers:
        await close()


def created_id(out: str) -> str:
    match = re.match(rf"created silence ({UUID}) ", out)
    assert match, out
    return match.group(1)


# ---- the pack as a whole -----------------------------------------------------------------


def test_missing_url_is_a_config_error_naming_the_variable() -> None:
    with pytest.raises(
        ConfigError, match="^ALERTMANAGER_URL is required for the alertmanager pack$"
    ):
        load_packs(["alertmanager"], PackConfig(prometheus_url="http://127.0.0.1:9090"))


async def test_the_tools_are_the_contract_and_writes_need_approval() -> None:
    built = build(PackConfig(alertmanager_url="http://127.0.0.1:9093"))
    try:
        tools = {tool.name: tool for tool in built.tools}
        assert {name: tool.category for name, tool in tools.items()} == {
            "alertmanager_alerts": "read_only",
            "alertmanager_silences": "read_only",
            "alertmanager_create_silence": "mutating",
            "alertmanager_expire_silence": "mutating",
        }
        assert needs_confirm(tools["alertmanager_create_silence"])
        assert needs_confirm(tools["alertmanager_expire_silence"])
        create = tool_spec(tools["alertmanager_create_silence"]).parameters
        assert list(create["properties"]) == ["matchers", "minutes", "comment"]
        assert create["required"] == ["matchers", "minutes", "comment"]
        matcher = create["$defs"]["Matcher"]["properties"]
        assert list(matcher) == ["name", "value", "is_regex"]
        expire = tool_spec(tools["alertmanager_expire_silence"]).parameters
        assert list(expire["properties"]) == ["silence_id"]
        assert len(built.closers) == 1
    finally:
        for close in built.closers:
            await close()


@pytest.mark.parametrize("sneaky", [{"confirmed_by": "U0MODEL"}, {"createdBy": "U0MODEL"}])
def test_the_model_cannot_name_the_creator(
    offline: dict[str, Tool], sneaky: dict[str, str]
) -> None:
    tool = offline["alertmanager_create_silence"]
    args = {"matchers": [{"name": "alertname", "value": "X"}], "minutes": 5, "comment": "c"}
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        tool.args_model.model_validate({**args, **sneaky})


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"matchers": []}, "at least 1 item"),
        ({"matchers": [{"name": "alertname", "value": ""}]}, "must not match the empty string"),
        ({"matchers": [{"name": "job", "value": ".*", "is_regex": True}]}, "empty string"),
        ({"matchers": [{"name": "alertname", "value": "(", "is_regex": True}]}, "regular expr"),
        ({"matchers": [{"name": "alert name", "value": "X"}]}, "should match pattern"),
        ({"matchers": [{"name": "alertname", "value": "X", "is_equal": False}]}, "Extra inputs"),
        ({"matchers": [{"name": "alertname"}]}, "Field required"),
        ({"matchers": "alertname=X"}, "valid list"),
        ({"minutes": 0}, "greater than or equal to 1"),
        ({"minutes": 10081}, "less than or equal to 10080"),
        ({"comment": ""}, "at least 1 character"),
        ({"comment": "   "}, "should match pattern"),
    ],
)
def test_bad_silence_arguments_are_rejected_by_validation(
    offline: dict[str, Tool], args: dict[str, object], problem: str
) -> None:
    tool = offline["alertmanager_create_silence"]
    good = {"matchers": [{"name": "alertname", "value": "X"}], "minutes": 5, "comment": "c"}
    tool.args_model.model_validate(good)
    with pytest.raises(ValidationError, match=re.escape(problem)):
        tool.args_model.model_validate({**good, **args})


@pytest.mark.parametrize("silence_id", ["", "abc", "4863abd1-3094-44c3-8c5c-0478123dbfc"])
def test_expire_takes_a_uuid(offline: dict[str, Tool], silence_id: str) -> None:
    tool = offline["alertmanager_expire_silence"]
    with pytest.raises(ValidationError):
        tool.args_model.model_validate({"silence_id": silence_id})


# ---- against the server ------------------------------------------------------------------


async def test_posted_alerts_are_listed(
    pack: dict[str, Tool],
    alertmanager_server: AlertmanagerServer,  # noqa: F811
) -> None:
    name = unique("DiskFull")
    alertmanager_server.post_alerts(
        {
            "labels": {"alertname": name, "instance": "web-03", "severity": "page"},
            "annotations": {"summary": "disk / is 97% full"},
        }
    )
    out = await run(pack, "alertmanager_alerts")
    assert re.match(r"\d+ alerts?: \d+ active, \d+ suppressed(, \d+ unprocessed)?\n", out), out
    line = next(line for line in out.splitlines() if name in line)
    assert re.fullmatch(
        rf'active {name}\{{instance="web-03",severity="page"\}} since \S+Z '
        r"\((just now|\S+ ago)\): disk / is 97% full",
        line,
    ), line


async def test_a_silence_is_created_by_the_approver_listed_and_expired(
    pack: dict[str, Tool],
    alertmanager_server: AlertmanagerServer,  # noqa: F811
) -> None:
    name = unique("HighLatency")
    alertmanager_server.post_alerts({"labels": {"alertname": name, "service": "api"}})
    matchers: list[dict[str, object]] = [
        {"name": "alertname", "value": name},
        {"name": "service", "value": "ap.", "is_regex": True},
    ]
    out = await run(
        pack,
        "alertmanager_create_silence",
        APPROVED,
        matchers=matchers,
        minutes=90,
        comment="INC-42: deploy rollback in progress",
    )
    silence_id = created_id(out)
    assert out == (
        f'created silence {silence_id} for alertname="{name}",service=~"ap." until '
        f"{out.split(' until ')[1].split(' ')[0]} (90 min), createdBy {APPROVER}; "
        "it silences 1 current alert"
    )
    stored = await direct(alertmanager_server, f"/api/v2/silence/{silence_id}")
    assert stored["createdBy"] == APPROVER
    assert stored["comment"] == "INC-42: deploy rollback in progress"
    assert stored["status"]["state"] == "active"

    listed = await run(pack, "alertmanager_silences")
    line = next(line for line in listed.splitlines() if line.startswith(silence_id))
    assert re.fullmatch(
        rf'{silence_id} active until \S+Z \(in 1h(29m|30m)?\) alertname="{name}",'
        rf'service=~"ap\." by {APPROVER}: INC-42: deploy rollback in progress',
        line,
    ), line
    alerts = await run(pack, "alertmanager_alerts")
    assert any(
        line.startswith(f'suppressed {name}{{service="api"}}')
        and f"silenced by {silence_id}" in line
        for line in alerts.splitlines()
    ), alerts

    expired = await run(pack, "alertmanager_expire_silence", APPROVED, silence_id=silence_id)
    assert expired == (
        f'expired silence {silence_id} (alertname="{name}",service=~"ap." by {APPROVER}: '
        "INC-42: deploy rollback in progress); its alerts notify again"
    )
    stored = await direct(alertmanager_server, f"/api/v2/silence/{silence_id}")
    assert stored["status"]["state"] == "expired"
    assert silence_id not in await run(pack, "alertmanager_silences")
    again = await run(pack, "alertmanager_expire_silence", APPROVED, silence_id=silence_id)
    assert again.startswith(f"silence {silence_id} had already expired at ")
    assert again.endswith("; nothing changed " + expired.split(" ", 3)[3].split(";")[0])


async def test_a_silence_matching_nothing_says_so(pack: dict[str, Tool]) -> None:
    out = await run(
        pack,
        "alertmanager_create_silence",
        APPROVED,
        matchers=[{"name": "alertname", "value": unique("NoSuchAlert")}],
        minutes=1,
        comment="typo check",
    )
    assert out.endswith(
        "it silences 0 current alerts (check the label names and values if you expected some)"
    )
    await run(pack, "alertmanager_expire_silence", APPROVED, silence_id=created_id(out))


async def test_no_approver_no_silence(
    pack: dict[str, Tool],
    alertmanager_server: AlertmanagerServer,  # noqa: F811
) -> None:
    name = unique("Unapproved")
    with pytest.raises(ToolError, match="a silence needs an approver"):
        await run(
            pack,
            "alertmanager_create_silence",
            READ,
            matchers=[{"name": "alertname", "value": name}],
            minutes=5,
            comment="nobody approved this",
        )
    silences = await direct(alertmanager_server, "/api/v2/silences")
    assert not any(m["value"] == name for s in silences for m in s["matchers"])


async def test_alertmanager_rejections_are_reported_with_its_error(pack: dict[str, Tool]) -> None:
    # Python's re accepts a lookahead; Alertmanager's RE2 does not, and says why.
    with pytest.raises(ToolError) as caught:
        await run(
            pack,
            "alertmanager_create_silence",
            APPROVED,
            matchers=[{"name": "alertname", "value": "(?=x)x", "is_regex": True}],
            minutes=5,
            comment="lookahead",
        )
    message = str(caught.value)
    assert message.startswith("alertmanager answered HTTP 400: silence invalid: ")
    assert "invalid or unsupported Perl syntax" in message


async def test_expiring_an_unknown_silence_is_an_error(pack: dict[str, Tool]) -> None:
    with pytest.raises(ToolError, match=r"^alertmanager answered HTTP 404: \(empty\)$"):
        await run(pack, "alertmanager_expire_silence", APPROVED, silence_id=str(uuid.uuid4()))


async def test_long_alert_lists_are_bounded(
    pack: dict[str, Tool],
    alertmanager_server: AlertmanagerServer,  # noqa: F811
) -> None:
    prefix = unique("Flood")
    alertmanager_server.post_alerts(
        *({"labels": {"alertname": prefix, "n": str(i)}} for i in range(40))
    )
    out = await run(pack, "alertmanager_alerts")
    lines = out.splitlines()
    total = int(lines[0].split(" ", 1)[0])
    assert total >= 40
    assert len(lines) == 1 + 30 + 1 and lines[-1] == f"… {total - 30} more"


async def test_alertmanager_down_is_a_clear_error() -> None:
    port = free_port()  # nothing listens there
    built = build(PackConfig(alertmanager_url=f"http://127.0.0.1:{port}"))
    tools = {tool.name: tool for tool in built.tools}
    try:
        with pytest.raises(ToolError) as caught:
            await run(tools, "alertmanager_silences")
    finally:
        for close in built.closers:
            await close()
    assert str(caught.value) == (
        f"alertmanager at http://127.0.0.1:{port} is unreachable: connection refused"
    )


async def test_alertmanager_that_never_answers_times_out(silent_server: int) -> None:  # noqa: F811
    url = f"http://127.0.0.1:{silent_server}"
    backend = Backend("alertmanager", url, variable="ALERTMANAGER_URL", total_timeout=0.3)
    tools = {tool.name: tool for tool in alertmanager_tools(backend)}
    try:
        with pytest.raises(ToolError) as caught:
            await run(tools, "alertmanager_alerts")
    finally:
        await backend.aclose()
    assert str(caught.value) == f"alertmanager at {url} timed out after 0.3s"


async def test_alertmanager_refusing_the_password_says_so_without_it() -> None:
    silences: list[object] = []
    async with basic_auth_server("ops", "right-pw", {"/api/v2/silences": silences}) as url:
        wrong = build(PackConfig(alertmanager_url=url.replace("http://", "http://ops:wrong-pw@")))
        good = build(PackConfig(alertmanager_url=url.replace("http://", "http://ops:right-pw@")))
        try:
            with pytest.raises(ToolError) as caught:
                await run({t.name: t for t in wrong.tools}, "alertmanager_silences")
            good_tools = {t.name: t for t in good.tools}
            assert await run(good_tools, "alertmanager_silences") == "no active or pending silences"
        finally:
            for close in (*wrong.closers, *good.closers):
                await close()
    assert str(caught.value) == (
        f"alertmanager at {url.replace('http://', 'http://ops:***@')} refused the credentials "
        "in ALERTMANAGER_URL (HTTP 401)"
    )
