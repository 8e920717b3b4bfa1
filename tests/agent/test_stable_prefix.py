"""The stable prefix: one system prompt and one tools block for every request of a run.

The tools are offered in name order whatever order they were configured in (so the
prompt cache keeps hitting), and ``confirmed_by`` — which only a human decision sets —
is never part of a schema the model sees.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from bot.agent import CallContext, FunctionTool, ModelRequest, StopReason, run
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import NoArgs, echo_tool, make_config

SYSTEM = "You are an SRE assistant. Be brief."


class SilenceArgs(BaseModel):
    matcher: str = Field(description="alertname to silence")
    minutes: int = Field(description="how long", ge=1)
    confirmed_by: str | None = None


class StopArgs(BaseModel):
    name: str = Field(description="program name")
    confirmed_by: str


class OnlyApproverArgs(BaseModel):
    confirmed_by: str


def tool_with(name: str, args_model: type[BaseModel], **kw: Any) -> FunctionTool:
    async def fn(args: BaseModel, ctx: CallContext) -> str:
        return "done"

    return FunctionTool(name=name, description=f"{name} tool", args_model=args_model, fn=fn, **kw)


def some_tools() -> list[FunctionTool]:
    return [
        echo_tool("zeta_check"),
        tool_with("alpha_list", NoArgs),
        echo_tool("mid_check", parallel=True),
        tool_with("beta_silence", SilenceArgs, category="mutating"),
    ]


async def three_requests(tools: list[FunctionTool]) -> list[ModelRequest]:
    model = ScriptedModel(
        [
            calls(call("zeta_check", "c1", host="web-01")),
            calls(call("alpha_list", "c2"), call("mid_check", "c3", host="web-02")),
            text("all good"),
        ]
    )
    result = await run(make_config(model, tools=tools, system_prompt=SYSTEM))
    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(model.requests) == 3
    return model.requests


async def test_every_request_carries_the_same_system_prompt_and_tools() -> None:
    requests = await three_requests(some_tools())

    assert [r.system for r in requests] == [SYSTEM] * 3
    first = requests[0].tools
    assert all(r.tools == first for r in requests)
    assert len(first) == 4


async def test_tools_are_offered_in_name_order() -> None:
    requests = await three_requests(some_tools())

    names = [spec.name for spec in requests[0].tools]
    assert names == ["alpha_list", "beta_silence", "mid_check", "zeta_check"]


async def test_tools_block_does_not_depend_on_configured_order() -> None:
    tools = some_tools()
    forward = await three_requests(tools)
    backward = await three_requests(list(reversed(tools)))
    shuffled = await three_requests([tools[2], tools[0], tools[3], tools[1]])

    assert forward[0].tools == backward[0].tools == shuffled[0].tools
    assert [s.model_dump() for s in forward[2].tools] == [s.model_dump() for s in shuffled[2].tools]


async def test_confirmed_by_is_never_offered_to_the_model() -> None:
    tools = [
        tool_with("silence", SilenceArgs, category="mutating"),
        tool_with("stop_program", StopArgs, category="destructive"),
        tool_with("approve_only", OnlyApproverArgs, category="mutating"),
    ]
    model = ScriptedModel([text("nothing to do")])
    await run(make_config(model, tools=tools))

    specs = {s.name: s.parameters for s in model.requests[0].tools}
    assert set(specs) == {"silence", "stop_program", "approve_only"}
    for name, schema in specs.items():
        assert "confirmed_by" not in schema.get("properties", {}), name
        assert "confirmed_by" not in schema.get("required", []), name
        assert "confirmed_by" not in repr(schema), name
    # The real parameters are all still there.
    assert set(specs["silence"]["properties"]) == {"matcher", "minutes"}
    assert sorted(specs["silence"]["required"]) == ["matcher", "minutes"]
    assert set(specs["stop_program"]["properties"]) == {"name"}
    assert specs["stop_program"]["required"] == ["name"]
    assert specs["approve_only"].get("properties") == {}
