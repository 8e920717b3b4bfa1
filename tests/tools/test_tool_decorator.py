"""``@tool``: a plain ``async def`` becomes a core tool whose argument model (and so the
schema the model sees) comes from type hints and the docstring, never hand-written.

Covers the three docstring styles, descriptions on every field, required vs defaults,
enums, constraints, the definition errors raised at decoration time, ``CallContext``
and ``confirmed_by`` injection, how return values are rendered, and a run through the
real agent loop (read-only, mutating with an approval, destructive with its dry run).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from bot.agent import (
    AgentConfig,
    AnyMessage,
    Approved,
    CallContext,
    ConfirmRequest,
    Decision,
    InMemoryHistory,
    StopReason,
    Tool,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.testing import FakeClock, ScriptedModel, call, calls, text
from bot.agent.tools import tool_spec
from bot.errors import ToolError
from tools.base import PythonTool, parse_docstring, render, tool

APPROVER = "U0123ABC"


class Unit(enum.Enum):
    NGINX = "nginx"
    REDIS = "redis"


class Disk(BaseModel):
    mount: str
    used_pct: float


@tool
async def disk_usage(
    host: str,
    mount: str = "/",
    unit: Literal["GB", "GiB"] = "GiB",
    tags: list[str] | None = None,
) -> str:
    """Show disk usage on one host.

    Reads ``df`` output; nothing changes.

    Args:
        host (str): Host name,
            for example ``web-03``.
        mount: Mount point to report.
        unit: Size unit.
        tags: Labels to filter by.

    Returns:
        The usage table.
    """
    return f"{host} {mount} {unit} {tags}"


@tool
async def sphinx_style(host: str, lines: int = 50) -> str:
    """Tail a service's log.

    :param host: Host name.
    :type host: str
    :param int lines: How many lines,
        counted from the end.
    :returns: The lines.
    """
    return host


@tool
async def numpy_style(host: str, first: int = 0, last: int = 10) -> str:
    """List processes by CPU.

    Parameters
    ----------
    host : str
        Host name.
    first, last : int
        Bounds of the ranking.

    Returns
    -------
    str
        The table.
    """
    return host


@tool("scale-deployment", category="mutating", timeout=60, output_bound=500)
async def scale(
    deployment: Annotated[str, Field(pattern=r"^[a-z0-9-]+$")],
    replicas: Annotated[int, Field(ge=0, le=20)],
    unit: Unit,
    reason: Annotated[str, Field(description="Why, for the audit log", max_length=200)] = "",
) -> str:
    """Scale a deployment.

    Args:
        deployment: Deployment name.
        replicas: Wanted replica count.
        unit: Unit the deployment serves.
    """
    return f"{deployment}={replicas} ({unit.value})"


def spec_of(t: Tool) -> dict[str, Any]:
    return tool_spec(t).parameters


# ---- schema from hints and docstrings -----------------------------------------------


def test_google_docstring_and_hints_make_the_schema() -> None:
    spec = tool_spec(disk_usage)

    assert spec.name == "disk_usage"
    assert (
        spec.description == "Show disk usage on one host.\n\nReads ``df`` output; nothing changes."
    )
    assert spec.parameters["type"] == "object"
    assert spec.parameters["additionalProperties"] is False
    assert spec.parameters["required"] == ["host"]
    props = spec.parameters["properties"]
    assert list(props) == ["host", "mount", "unit", "tags"]
    assert props["host"]["type"] == "string"
    assert props["host"]["description"] == "Host name, for example ``web-03``."
    assert props["mount"] == {
        "default": "/",
        "description": "Mount point to report.",
        "title": "Mount",
        "type": "string",
    }
    assert props["unit"]["enum"] == ["GB", "GiB"]
    assert props["unit"]["default"] == "GiB"
    assert props["tags"]["anyOf"] == [
        {"items": {"type": "string"}, "type": "array"},
        {"type": "null"},
    ]
    assert props["tags"]["default"] is None


def test_sphinx_docstring() -> None:
    spec = tool_spec(sphinx_style)

    assert spec.description == "Tail a service's log."
    props = spec.parameters["properties"]
    assert props["host"]["description"] == "Host name."
    assert props["lines"]["description"] == "How many lines, counted from the end."
    assert props["lines"]["default"] == 50
    assert spec.parameters["required"] == ["host"]


def test_numpy_docstring() -> None:
    spec = tool_spec(numpy_style)

    assert spec.description == "List processes by CPU."
    props = spec.parameters["properties"]
    assert props["host"]["description"] == "Host name."
    assert props["first"]["description"] == props["last"]["description"]
    assert props["last"]["description"] == "Bounds of the ranking."


@pytest.mark.parametrize("t", [disk_usage, sphinx_style, numpy_style, scale])
def test_every_field_has_a_description(t: PythonTool[Any, Any]) -> None:
    for name, prop in spec_of(t)["properties"].items():
        assert prop.get("description"), name


def test_options_and_annotated_fields() -> None:
    spec = tool_spec(scale)

    assert spec.name == "scale-deployment"
    assert (scale.category, scale.parallel, scale.timeout, scale.output_bound) == (
        "mutating",
        False,
        60.0,
        500,
    )
    props = spec.parameters["properties"]
    assert props["deployment"]["pattern"] == "^[a-z0-9-]+$"
    assert (props["replicas"]["minimum"], props["replicas"]["maximum"]) == (0, 20)
    # An Annotated description needs no docstring entry.
    assert props["reason"]["description"] == "Why, for the audit log"
    assert props["reason"]["maxLength"] == 200
    assert spec.parameters["required"] == ["deployment", "replicas", "unit"]


def test_enum_parameter_is_an_enum_in_the_schema_and_a_member_for_the_function() -> None:
    schema = spec_of(scale)
    ref = schema["properties"]["unit"]["$ref"].rsplit("/", 1)[-1]
    assert schema["$defs"][ref]["enum"] == ["nginx", "redis"]
    args = scale.args_model.model_validate({"deployment": "api", "replicas": 2, "unit": "redis"})
    assert getattr(args, "unit") is Unit.REDIS  # noqa: B009 - generated model, no static attr


@pytest.mark.parametrize(
    "arguments",
    [
        {"deployment": "api; rm -rf /", "replicas": 1, "unit": "nginx"},
        {"deployment": "api", "replicas": 21, "unit": "nginx"},
        {"deployment": "api", "replicas": -1, "unit": "nginx"},
        {"deployment": "api", "replicas": 1, "unit": "postgres"},
        {"deployment": "api", "replicas": 1, "unit": "nginx", "reason": "x" * 201},
        {"deployment": "api", "replicas": 1, "unit": "nginx", "force": True},
        {"replicas": 1, "unit": "nginx"},
    ],
)
def test_constraints_unknown_and_missing_arguments_are_refused(arguments: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        scale.args_model.model_validate(arguments)


def test_bare_decorator_and_empty_parentheses_are_the_same() -> None:
    @tool()
    async def ping() -> None:
        """Check the bot is alive."""

    assert isinstance(ping, PythonTool)
    assert spec_of(ping) == {"additionalProperties": False, "properties": {}, "type": "object"}
    assert isinstance(disk_usage, PythonTool)
    assert disk_usage.category == "read_only"


async def test_a_tool_is_still_callable_as_the_function() -> None:
    assert await disk_usage("web-03", unit="GB") == "web-03 / GB None"


# ---- definition errors, at decoration time --------------------------------------------


def test_missing_parameter_description_names_function_and_parameter() -> None:
    with pytest.raises(TypeError, match=r"undocumented.*parameter 'service' has no description"):

        @tool
        async def undocumented(host: str, service: str) -> str:
            """Restart something.

            Args:
                host: Host name.
            """
            return host


def test_missing_summary_is_an_error() -> None:
    with pytest.raises(TypeError, match="no_summary.*summary"):

        @tool
        async def no_summary(host: str) -> str:
            """Args:
            host: Host name.
            """
            return host

    with pytest.raises(TypeError, match="no_doc.*summary"):

        @tool
        async def no_doc() -> str:
            return ""


@pytest.mark.parametrize("name", ["", "has space", "dot.ted", "x" * 65, "émoji"])
def test_bad_name_is_an_error(name: str) -> None:
    with pytest.raises(ValueError, match="must match"):

        @tool(name)
        async def fine() -> str:
            """Fine."""
            return ""


def test_sync_function_is_rejected() -> None:
    def sync(host: str) -> str:
        """Sync.

        Args:
            host: Host.
        """
        return host

    with pytest.raises(TypeError, match=r"sync.*must be an 'async def'"):
        tool(sync)  # type: ignore[arg-type]


def test_async_generator_is_rejected() -> None:
    async def stream(host: str) -> Any:
        """Stream.

        Args:
            host: Host.
        """
        yield host

    with pytest.raises(TypeError, match="async def"):
        tool(stream)


def test_other_definition_errors() -> None:
    async def untyped(host) -> str:  # type: ignore[no-untyped-def]
        """Untyped.

        Args:
            host: Host.
        """
        return str(host)

    async def star(*hosts: str) -> str:
        """Star.

        Args:
            hosts: Hosts.
        """
        return ""

    async def stale_doc(host: str) -> str:
        """Stale.

        Args:
            host: Host.
            service: Renamed away long ago.
        """
        return host

    async def clash(json: str) -> str:
        """Clash.

        Args:
            json: Shadows BaseModel.json.
        """
        return json

    async def wrong_approver(confirmed_by: int) -> str:
        """Approver with a wrong type."""
        return ""

    async def no_dry_run(host: str) -> str:
        """Delete everything.

        Args:
            host: Host.
        """
        return host

    with pytest.raises(TypeError, match="parameter 'host' needs a type hint"):
        tool(untyped)
    with pytest.raises(TypeError, match="parameter 'hosts'.*args"):
        tool(star)
    with pytest.raises(TypeError, match=r"unknown parameter.*'service'"):
        tool(stale_doc)
    with pytest.raises(TypeError, match="parameter 'json'.*clashes"):
        tool(clash)
    with pytest.raises(TypeError, match="confirmed_by.*str"):
        tool(wrong_approver)
    with pytest.raises(TypeError, match="destructive.*CallContext"):
        tool(category="destructive")(no_dry_run)
    with pytest.raises(ValueError, match="parallel"):
        tool(category="mutating", parallel=True)(stale_doc)
    with pytest.raises(ValueError, match="timeout"):
        tool(timeout=0)(no_dry_run)
    with pytest.raises(ValueError, match="category"):
        tool(category="dangerous")(no_dry_run)  # type: ignore[call-overload]


# ---- docstring parser corner cases -----------------------------------------------------


def test_parser_stops_sections_at_the_first_column() -> None:
    doc = parse_docstring(
        """Summary line.

        Args:
            a: First.
            b: Second,
                continued.

        Closing paragraph that belongs to no parameter.

        Raises:
            ToolError: never here.
        """
    )
    assert doc.summary == "Summary line."
    assert doc.params == {"a": "First.", "b": "Second, continued."}


def test_parser_without_sections_is_all_summary() -> None:
    doc = parse_docstring("One line.\n\n    Second paragraph.\n")
    assert doc.summary == "One line.\n\nSecond paragraph."
    assert doc.params == {}


# ---- injection ---------------------------------------------------------------------------


class Seen:
    """What an injected tool received, for the assertions."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []


SEEN = Seen()


@tool(category="mutating")
async def restart_service(
    host: str, context: CallContext, confirmed_by: str | None, unit: Unit = Unit.NGINX
) -> str:
    """Restart a unit on a host.

    Args:
        host: Host name.
        unit: The unit to restart.
    """
    context.progress(f"restarting {unit.value}")
    SEEN.calls.append(
        {
            "host": host,
            "unit": unit,
            "confirmed_by": confirmed_by,
            "key": context.idempotency_key,
            "dry_run": context.dry_run,
        }
    )
    return f"restarted {unit.value} on {host} for {confirmed_by}"


@tool
async def whoami(confirmed_by: str) -> str:
    """Say who approved the call (empty when nobody did)."""
    return f"[{confirmed_by}]"


@pytest.fixture(autouse=True)
def _fresh_seen() -> None:
    SEEN.calls.clear()


def test_injected_parameters_are_not_arguments() -> None:
    assert set(restart_service.args_model.model_fields) == {"host", "unit"}
    schema = spec_of(restart_service)
    assert set(schema["properties"]) == {"host", "unit"}
    assert schema["required"] == ["host"]
    assert whoami.args_model.model_fields == {}
    with pytest.raises(ValidationError):  # the model cannot pass the context either
        restart_service.args_model.model_validate({"host": "h", "context": {}})


async def test_context_and_approver_reach_the_function() -> None:
    progress: list[str] = []
    ctx = CallContext(job_id="job-9", call_id="c3", confirmed_by=APPROVER, progress=progress.append)
    args = restart_service.args_model.model_validate({"host": "web-03", "unit": "redis"})

    out = await restart_service.execute(args, ctx)

    assert out == f"restarted redis on web-03 for {APPROVER}"
    assert SEEN.calls == [
        {
            "host": "web-03",
            "unit": Unit.REDIS,
            "confirmed_by": APPROVER,
            "key": "job-9:c3",
            "dry_run": False,
        }
    ]
    assert progress == ["restarting redis"]


async def test_a_plain_str_approver_is_empty_without_an_approval() -> None:
    args = whoami.args_model.model_validate({})
    assert await whoami.execute(args, CallContext(job_id="j", call_id="c")) == "[]"
    approved = CallContext(job_id="j", call_id="c", confirmed_by=APPROVER)
    assert await whoami.execute(args, approved) == f"[{APPROVER}]"


# ---- return values -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain text", "plain text"),
        (b"\xffraw", b"\xffraw"),
        (bytearray(b"raw"), b"raw"),
        (None, "ok"),
        ({"host": "web-03", "note": "café"}, '{\n  "host": "web-03",\n  "note": "café"\n}'),
        ([1, "two"], '[\n  1,\n  "two"\n]'),
        (Disk(mount="/", used_pct=91.5), '{\n  "mount": "/",\n  "used_pct": 91.5\n}'),
        ([Disk(mount="/", used_pct=1.0)], '[\n  {\n    "mount": "/",\n    "used_pct": 1.0\n  }\n]'),
        (Unit.NGINX, '"nginx"'),
        (42, "42"),
        (True, "true"),
    ],
)
def test_return_values_are_rendered(value: object, expected: str | bytes) -> None:
    assert render(value) == expected


def test_an_unrenderable_return_value_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="'t' returned a object"):
        render(object(), tool_name="t")


async def test_execute_renders_what_the_function_returns() -> None:
    @tool
    async def disks(host: str) -> list[Disk]:
        """List disks.

        Args:
            host: Host name.
        """
        return [Disk(mount="/", used_pct=12.0)]

    args = disks.args_model.model_validate({"host": "h"})
    out = await disks.execute(args, CallContext(job_id="j", call_id="c"))
    assert json.loads(out) == [{"mount": "/", "used_pct": 12.0}]


# ---- end to end through the agent loop --------------------------------------------------------


class Confirmer:
    """Approves every request and keeps it."""

    def __init__(self) -> None:
        self.requests: list[ConfirmRequest] = []

    async def __call__(self, request: ConfirmRequest) -> Decision:
        self.requests.append(request)
        return Approved(confirmed_by=APPROVER)


def config(
    model: ScriptedModel, tools: Sequence[Tool], *, confirm: Confirmer | None = None
) -> AgentConfig:
    memory = InMemoryHistory()
    memory.append(UserMessage(content="web-03 is slow, look into it"))
    return AgentConfig(
        job_id="job-1",
        client=model,
        memory=memory,
        system_prompt="You are an SRE assistant.",
        tools=tools,
        confirm=confirm,
        clock=FakeClock(),
    )


def tool_messages(messages: Sequence[AnyMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


async def test_read_only_tool_through_the_loop() -> None:
    model = ScriptedModel(
        [
            calls(
                call("disk_usage", "c1", host="web-03", unit="GB"),
                call("disk_usage", "c2", host="web-03", unit="TB"),
                call("whoami", "c3", confirmed_by="U_FORGED"),
            ),
            text("done"),
        ]
    )

    result = await run(config(model, [disk_usage, whoami]))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    offered = {spec.name: spec for spec in model.requests[0].tools}
    assert offered["disk_usage"] == tool_spec(disk_usage)
    assert "confirmed_by" not in json.dumps(offered["whoami"].parameters)
    ok, invalid, forged = tool_messages(model.requests[1].messages)
    assert (ok.content, ok.is_error) == ("web-03 / GB None", False)
    assert invalid.is_error
    assert invalid.content.startswith("Error: invalid arguments for tool 'disk_usage': unit:")
    # A confirmed_by written by the model never reaches the function.
    assert (forged.content, forged.is_error) == ("[]", False)
    model.assert_done()


async def test_mutating_tool_runs_after_approval_with_the_approver() -> None:
    confirm = Confirmer()
    model = ScriptedModel(
        [calls(call("restart_service", "c7", host="web-03", unit="redis")), text("restarted")]
    )

    result = await run(config(model, [restart_service], confirm=confirm))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [request] = confirm.requests
    assert (request.tool, request.category) == ("restart_service", "mutating")
    assert request.arguments == {"host": "web-03", "unit": "redis"}
    assert SEEN.calls == [
        {
            "host": "web-03",
            "unit": Unit.REDIS,
            "confirmed_by": APPROVER,
            "key": "job-1:c7",
            "dry_run": False,
        }
    ]
    [message] = tool_messages(model.requests[1].messages)
    assert message.content == f"restarted redis on web-03 for {APPROVER}"
    assert message.confirmed_by == APPROVER
    model.assert_done()


@tool(category="destructive")
async def drop_cache(host: str, ctx: CallContext, confirmed_by: str | None) -> dict[str, Any]:
    """Drop the page cache on a host.

    Args:
        host: Host name.
    """
    if host == "db-01":
        raise ToolError("refusing to touch a database host")
    return {"host": host, "dry_run": ctx.dry_run, "confirmed_by": confirmed_by}


async def test_destructive_tool_dry_run_then_approved_run() -> None:
    confirm = Confirmer()
    model = ScriptedModel(
        [
            calls(call("drop_cache", "c1", host="web-03")),
            calls(call("drop_cache", "c2", host="db-01")),
            text("cache dropped"),
        ]
    )

    result = await run(config(model, [drop_cache], confirm=confirm))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [request] = confirm.requests  # the failing dry run of db-01 asks nobody
    assert request.dry_run_output is not None
    assert json.loads(request.dry_run_output) == {
        "host": "web-03",
        "dry_run": True,
        "confirmed_by": None,
    }
    [done] = tool_messages(model.requests[1].messages)
    assert json.loads(done.content) == {
        "host": "web-03",
        "dry_run": False,
        "confirmed_by": APPROVER,
    }
    refused = tool_messages(model.requests[2].messages)[-1]
    assert refused.is_error
    assert refused.content == (
        "Error: dry run failed, not asking for approval: Error: refusing to touch a database host"
    )
    model.assert_done()
