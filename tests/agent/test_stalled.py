"""``stalled``: 5 iterations in a row in which every tool result was an error end the job.

The count is DESIGN's and pinned here by its literal (not read from the constant): 5
failing iterations stall, 4 do not, and one result that is not an error starts the
count again.
"""

from __future__ import annotations

from bot.agent import CallContext, FunctionTool, ModelResponse, StopReason, run
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.errors import ToolError

from .conftest import HostArgs, echo_tool, make_config


async def unreachable(args: HostArgs, ctx: CallContext) -> str:
    raise ToolError(f"{args.host} unreachable")


TOOLS = [
    echo_tool(),
    FunctionTool(name="ssh", description="ssh to a host", args_model=HostArgs, fn=unreachable),
]
_hosts = iter(range(1000))


def failing() -> ModelResponse:
    """A response whose one call fails, each with other arguments and another error
    (the loop detector must not be what ends the job)."""
    return calls(call("ssh", host=f"web-{next(_hosts)}"))


async def test_five_iterations_of_errors_in_a_row_stall_the_job() -> None:
    model = ScriptedModel([failing() for _ in range(5)])

    result = await run(make_config(model, tools=TOOLS))

    assert result.stop_reason is StopReason.STALLED
    assert result.iterations == 5
    assert result.error == "every tool call failed in 5 iterations in a row"
    model.assert_done()  # and no sixth call was made (it would be an unexpected one)


async def test_four_iterations_of_errors_do_not_stall() -> None:
    model = ScriptedModel([*(failing() for _ in range(4)), text("gave up on that tool")])

    result = await run(make_config(model, tools=TOOLS))

    assert result.stop_reason is StopReason.COMPLETED
    assert result.iterations == 5
    model.assert_done()


async def test_a_result_that_is_not_an_error_starts_the_count_again() -> None:
    mixed = calls(call("ssh", host="db-01"), call("check", host="web-03"))
    model = ScriptedModel(
        [
            *(failing() for _ in range(4)),
            mixed,  # one call of the batch worked: not an all-error iteration
            *(failing() for _ in range(4)),
            text("done"),
        ]
    )

    result = await run(make_config(model, tools=TOOLS))

    assert result.stop_reason is StopReason.COMPLETED
    assert result.iterations == 10
    model.assert_done()
