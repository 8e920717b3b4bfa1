"""The prometheus pack against a real Prometheus scraping a real node-exporter.

The stack (``backends.PrometheusStack``) is shared by the module: jobs ``node``,
``prometheus`` and ``dead`` (a closed port), an always-firing and an always-pending alert.
Tools run through ``execute`` with validated arguments, as the agent core calls them.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from bot.agent.tools import CallContext, Tool, tool_spec
from bot.errors import ConfigError, ToolError
from tests.tools.packs.backends import (  # noqa: F401  (prometheus_stack, silent_server: fixtures)
    PrometheusStack,
    basic_auth_server,
    free_port,
    prometheus_stack,
    silent_server,
)
from tools.packs import Pack, PackConfig, load_packs
from tools.packs.prometheus import (
    MAX_LISTED_TARGETS,
    Backend,
    build,
    parse_step,
    prometheus_tools,
    targets_summary,
)

CTX = CallContext(job_id="C1:1.1:j1", call_id="call-1")
NUMBER = r"(?:-?[0-9.e+-]+|NaN|[+-]Inf)"
RAISED = "(step raised from 1s to stay under 1000 points)"
TOOL_NAMES = [
    "prometheus_query",
    "prometheus_query_range",
    "prometheus_alerts",
    "prometheus_targets",
]


async def run(tools: Mapping[str, Tool], name: str, **args: object) -> str:
    tool = tools[name]
    result = await tool.execute(tool.args_model.model_validate(args), CTX)
    assert isinstance(result, str)
    return result


@pytest.fixture
async def pack(prometheus_stack: PrometheusStack) -> AsyncIterator[dict[str, Tool]]:  # noqa: F811
    built = build(PackConfig(prometheus_url=prometheus_stack.url))
    yield {tool.name: tool for tool in built.tools}
    for close in built.closers:
        await close()


async def tools_at(url: str, **limits: Any) -> tuple[dict[str, Tool], Backend]:
    backend = Backend("prometheus", url, variable="PROMETHEUS_URL", **limits)
    return {tool.name: tool for tool in prometheus_tools(backend)}, backend


# ---- the pack as a whole -----------------------------------------------------------------


def test_missing_url_is_a_config_error_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="^PROMETHEUS_URL is required for the prometheus pack$"):
        load_packs(["prometheus"], PackConfig())


@pytest.mark.parametrize("url", ["ftp://prom:9090", "prometheus:9090", "http://prom/?x=1"])
def test_a_url_that_is_no_base_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="PROMETHEUS_URL"):
        build(PackConfig(prometheus_url=url))


async def test_the_tools_are_the_contract_and_read_only() -> None:
    built: Pack = build(PackConfig(prometheus_url="http://127.0.0.1:9090"))
    try:
        assert [tool.name for tool in built.tools] == TOOL_NAMES
        assert {tool.category for tool in built.tools} == {"read_only"}
        params = {tool.name: tool_spec(tool).parameters for tool in built.tools}
        assert params["prometheus_query"]["required"] == ["query"]
        assert list(params["prometheus_query_range"]["properties"]) == ["query", "minutes", "step"]
        assert params["prometheus_alerts"]["properties"] == {}
        assert len(built.closers) == 1
    finally:
        for close in built.closers:
            await close()


# ---- prometheus_query ----------------------------------------------------------------


async def test_query_up_lists_every_target_compactly(
    pack: dict[str, Tool],
    prometheus_stack: PrometheusStack,  # noqa: F811
) -> None:
    out = await run(pack, "prometheus_query", query="up")
    lines = out.splitlines()
    assert re.fullmatch(
        r"vector, 3 series at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ; all match up", lines[0]
    )
    node, prom, dead = (
        f"127.0.0.1:{port}"
        for port in (prometheus_stack.node_port, prometheus_stack.port, prometheus_stack.dead_port)
    )
    assert sorted(lines[1:]) == sorted(
        [
            f'{{instance="{node}",job="node"}} 1',
            f'{{instance="{prom}",job="prometheus"}} 1',
            f'{{instance="{dead}",job="dead"}} 0',
        ]
    )


async def test_query_reads_node_exporter_metrics(
    pack: dict[str, Tool],
    prometheus_stack: PrometheusStack,  # noqa: F811
) -> None:
    out = await run(pack, "prometheus_query", query="node_load1")
    instance = f"127.0.0.1:{prometheus_stack.node_port}"
    assert re.fullmatch(
        rf'vector, 1 series at \S+\nnode_load1{{instance="{instance}",job="node"}} ({NUMBER})', out
    ), out


async def test_labels_all_series_share_are_said_once(
    pack: dict[str, Tool],
    prometheus_stack: PrometheusStack,  # noqa: F811
) -> None:
    out = await run(pack, "prometheus_query", query="node_cpu_seconds_total")
    head, *lines = out.splitlines()
    common = (
        f'node_cpu_seconds_total{{instance="127.0.0.1:{prometheus_stack.node_port}",job="node"}}'
    )
    assert head.endswith(f"; all match {common}")
    assert lines and all(re.fullmatch(rf'\{{cpu="\d+",mode="\w+"\}} {NUMBER}', ln) for ln in lines)


async def test_query_of_many_series_is_bounded(pack: dict[str, Tool]) -> None:
    out = await run(pack, "prometheus_query", query='{__name__=~".+"}')
    lines = out.splitlines()
    head = re.fullmatch(r"vector, (\d+) series at \S+; the 20 largest shown", lines[0])
    assert head, lines[0]
    total = int(head.group(1))
    assert total > 100
    assert len(lines) == 1 + 20 + 1
    assert lines[-1] == f"… {total - 20} more"
    values = [float(line.rsplit(" ", 1)[1]) for line in lines[1:-1]]
    assert values == sorted(values, reverse=True), out


async def test_a_sorted_query_keeps_its_order(pack: dict[str, Tool]) -> None:
    out = await run(pack, "prometheus_query", query='sort({__name__=~"node_.+"})')
    lines = out.splitlines()
    head = re.match(r"vector, (\d+) series at \S+; all match \{instance=", lines[0])
    assert head and int(head.group(1)) > 20 and "largest" not in lines[0], lines[0]
    values = [float(line.rsplit(" ", 1)[1]) for line in lines[1:-1]]
    assert values == sorted(values), out


async def test_query_scalar_string_and_empty_results(pack: dict[str, Tool]) -> None:
    assert re.fullmatch(r"scalar 2 at \S+Z", await run(pack, "prometheus_query", query="1 + 1"))
    assert (await run(pack, "prometheus_query", query='"hi"')).startswith('string "hi" at ')
    empty = await run(pack, "prometheus_query", query="no_such_metric_anywhere")
    assert empty == "vector, 0 series (no data: check the metric name and label filters)"


async def test_query_of_a_range_vector_is_summarised_per_series(pack: dict[str, Tool]) -> None:
    out = await run(pack, "prometheus_query", query='up{job="dead"}[30s]')
    head, line = out.splitlines()
    assert head == "matrix, 1 series"
    assert re.fullmatch(r'up\{instance="[^"]+",job="dead"\}: constant 0 \(\d+ points?\)', line), (
        line
    )


async def test_invalid_promql_reports_prometheus_error(pack: dict[str, Tool]) -> None:
    with pytest.raises(ToolError) as caught:
        await run(pack, "prometheus_query", query="sum(rate(up[5m])")
    assert re.fullmatch(
        r'prometheus answered HTTP 400 bad_data: invalid parameter "query": '
        r"\d+:\d+: parse error: unclosed left parenthesis",
        str(caught.value),
    ), caught.value


# ---- prometheus_query_range ----------------------------------------------------------------


async def test_range_query_gives_a_summary_per_series_not_the_points(
    pack: dict[str, Tool],
) -> None:
    # A series whose value is the evaluation time: known at every step, data or not.
    clock = 'label_replace(vector(time()), "job", "clock", "", "")'
    out = await run(pack, "prometheus_query_range", query=clock, minutes=5, step="1s")
    head, line = out.splitlines()
    assert head == "1 series over the last 5m, step 1s"
    match = re.fullmatch(
        r'\{job="clock"\}: min (\d+) avg (\d+) max (\d+) first (\d+) last (\d+) \(301 points\)',
        line,
    )
    assert match, line
    low, avg, high, first, last = (int(match.group(i)) for i in range(1, 6))
    assert (first, last) == (low, high)
    assert high - low == 300 and avg == low + 150


async def test_range_query_of_a_node_exporter_metric(
    pack: dict[str, Tool],
    prometheus_stack: PrometheusStack,  # noqa: F811
) -> None:
    out = await run(pack, "prometheus_query_range", query="node_load1", minutes=5, step="1s")
    head, line = out.splitlines()
    assert head == "1 series over the last 5m, step 1s"
    name = f'node_load1{{instance="127.0.0.1:{prometheus_stack.node_port}",job="node"}}'
    stats = rf"min {NUMBER} avg {NUMBER} max {NUMBER} first {NUMBER} last {NUMBER}"
    assert re.fullmatch(rf"{re.escape(name)}: ({stats}|constant {NUMBER}) \(\d+ points?\)", line)


async def test_range_query_of_several_series(pack: dict[str, Tool]) -> None:
    out = await run(pack, "prometheus_query_range", query="up", minutes=1, step=1)
    lines = out.splitlines()
    assert lines[0] == "3 series over the last 1m, step 1s; all match up"
    assert sum(": constant 1 (" in line for line in lines[1:]) == 2
    assert sum(": constant 0 (" in line for line in lines[1:]) == 1


@pytest.mark.parametrize(
    ("minutes", "step", "head"),
    [
        (60, None, "over the last 1h, step 15s"),  # default: ~240 points, but >= 15s
        (1440, None, "over the last 1d, step 6m"),
        (
            10080,
            "1s",
            "over the last 7d, step 10m5s (step raised from 1s to stay under 1000 points)",
        ),
        (60, "1h30m", "over the last 1h, step 1h30m"),
        (60, "60", "over the last 1h, step 1m"),
    ],
)
async def test_range_query_step(
    pack: dict[str, Tool], minutes: int, step: str | None, head: str
) -> None:
    out = await run(pack, "prometheus_query_range", query="up", minutes=minutes, step=step)
    assert out.splitlines()[0] == f"3 series {head}; all match up"


@pytest.mark.parametrize(
    "args",
    [
        {"query": "up", "minutes": 0},
        {"query": "up", "minutes": 10081},
        {"query": "up", "step": "30 seconds"},
        {"query": "up", "step": -5},
        {"query": ""},
    ],
)
async def test_range_query_arguments_are_bounded(args: dict[str, object]) -> None:
    tools, backend = await tools_at("http://127.0.0.1:9")
    await backend.aclose()
    with pytest.raises(ValidationError):
        tools["prometheus_query_range"].args_model.model_validate(args)


@pytest.mark.parametrize(
    ("step", "seconds"),
    [
        ("30s", 30),
        ("1h30m", 5400),
        ("500ms", 0.5),
        ("2d", 172800),
        ("60", 60),
        (15, 15),
        (0.5, 0.5),
    ],
)
def test_parse_step(step: str | float, seconds: float) -> None:
    assert parse_step(step) == seconds


def test_a_zero_step_is_an_error() -> None:
    with pytest.raises(ToolError, match="step must be longer than zero"):
        parse_step("0s")


# ---- prometheus_alerts and prometheus_targets ------------------------------------------------


async def test_alerts_lists_firing_then_pending(pack: dict[str, Tool]) -> None:
    out = await run(pack, "prometheus_alerts")
    lines = out.splitlines()
    assert lines[0] == "2 alerts: 1 firing, 1 pending"
    assert re.fullmatch(
        r'firing AlwaysFiring\{severity="page",team="ops"\} since \S+Z \(\S+ ago\) value 1: '
        r"Always firing, for the tests",
        lines[1],
    ), lines[1]
    assert re.fullmatch(
        r'pending AlwaysPending\{severity="ticket"\} since \S+ \(\S+ ago\) value 1', lines[2]
    )


async def test_targets_names_every_target_by_job_and_instance_down_first(
    pack: dict[str, Tool],
    prometheus_stack: PrometheusStack,  # noqa: F811
) -> None:
    out = await run(pack, "prometheus_targets")
    lines = out.splitlines()
    assert lines[0] == "3 active targets in 3 jobs: 2 up, 1 down"
    node, prom, dead = (
        f"127.0.0.1:{port}"
        for port in (prometheus_stack.node_port, prometheus_stack.port, prometheus_stack.dead_port)
    )
    last = r"\(last scrape (\S+ ago|just now)\)"
    assert re.fullmatch(rf"down  dead        {dead} {last}: .*connection refused", lines[1]), out
    assert lines[2:] == [f"up    node        {node}", f"up    prometheus  {prom}"], out


@pytest.mark.parametrize("count", [MAX_LISTED_TARGETS, MAX_LISTED_TARGETS + 1])
def test_targets_are_named_while_few_and_counted_when_many(count: int) -> None:
    now = datetime(2026, 12, 1, 16, 20, tzinfo=UTC)
    targets = [
        {
            "labels": {"job": "node", "instance": f"10.0.0.{i}:9100"},
            "health": "down" if i == 7 else "up",
            "lastScrape": "2026-12-01T16:19:50Z",
            "lastError": "i/o timeout",
        }
        for i in range(count)
    ]
    lines = targets_summary(targets, now).splitlines()
    assert lines[0] == f"{count} active targets in 1 job: {count - 1} up, 1 down"
    down = "down  node  10.0.0.7:9100 (last scrape 10s ago): i/o timeout"
    if count <= MAX_LISTED_TARGETS:
        assert lines[1] == down and len(lines) == 1 + count
        assert lines[2] == "up    node  10.0.0.0:9100"
    else:
        assert lines[1:] == [f"by job: node {count - 1}/{count} up", "not up:", down]


# ---- the backend unreachable, slow, or not Prometheus -----------------------------------


async def test_backend_down_is_a_clear_error() -> None:
    port = free_port()  # nothing listens there
    tools, backend = await tools_at(f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(ToolError) as caught:
            await run(tools, "prometheus_query", query="up")
    finally:
        await backend.aclose()
    assert str(caught.value) == (
        f"prometheus at http://127.0.0.1:{port} is unreachable: connection refused"
    )


async def test_backend_that_never_answers_times_out(silent_server: int) -> None:  # noqa: F811
    tools, backend = await tools_at(f"http://127.0.0.1:{silent_server}", total_timeout=0.3)
    try:
        with pytest.raises(ToolError) as caught:
            await run(tools, "prometheus_targets")
    finally:
        await backend.aclose()
    assert str(caught.value) == (
        f"prometheus at http://127.0.0.1:{silent_server} timed out after 0.3s"
    )


async def test_a_password_in_the_url_is_never_shown() -> None:
    port = free_port()
    tools, backend = await tools_at(f"http://ops:s3cret@127.0.0.1:{port}/prom/")
    try:
        with pytest.raises(ToolError) as caught:
            await run(tools, "prometheus_alerts")
    finally:
        await backend.aclose()
    assert "s3cret" not in str(caught.value)
    assert f"prometheus at http://ops:***@127.0.0.1:{port}/prom is unreachable" in str(caught.value)


async def test_a_url_that_is_not_prometheus_is_named(prometheus_stack: PrometheusStack) -> None:  # noqa: F811
    tools, backend = await tools_at(prometheus_stack.node_exporter_url)
    try:
        with pytest.raises(ToolError) as caught:
            await run(tools, "prometheus_query", query="up")
    finally:
        await backend.aclose()
    assert str(caught.value) == (
        f"prometheus at {prometheus_stack.node_exporter_url} answered /api/v1/query with "
        "something that is not JSON (text/html; charset=utf-8); "
        "is that the prometheus server's URL?"
    )


async def test_an_oversized_answer_is_refused(prometheus_stack: PrometheusStack) -> None:  # noqa: F811
    tools, backend = await tools_at(prometheus_stack.url, max_body=10_000)
    try:
        with pytest.raises(ToolError, match="answer is larger than 0.01 MB; narrow the request"):
            await run(tools, "prometheus_query", query='{__name__=~".+"}')
    finally:
        await backend.aclose()


@pytest.mark.parametrize("given", ["", "ops:wrong-pw@"])
async def test_refused_credentials_are_named_and_never_shown(given: str) -> None:
    answer = {"status": "success", "data": {"resultType": "vector", "result": []}}
    async with basic_auth_server("ops", "right-pw", {"/api/v1/query": answer}) as url:
        tools, backend = await tools_at(url.replace("http://", f"http://{given}"))
        good, good_backend = await tools_at(url.replace("http://", "http://ops:right-pw@"))
        try:
            with pytest.raises(ToolError) as caught:
                await run(tools, "prometheus_query", query="up")
            assert (await run(good, "prometheus_query", query="up")).startswith("vector, 0 series")
        finally:
            await backend.aclose()
            await good_backend.aclose()
    message = str(caught.value)
    assert "wrong-pw" not in message and "right-pw" not in message
    if given:
        assert message == (
            f"prometheus at {url.replace('http://', 'http://ops:***@')} refused the "
            "credentials in PROMETHEUS_URL (HTTP 401)"
        )
    else:
        assert message == (
            f"prometheus at {url} asks for credentials (HTTP 401); give them in "
            "PROMETHEUS_URL as http(s)://user:password@host"
        )
