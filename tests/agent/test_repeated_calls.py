"""The loop detector: the same call returning the same result is caught, then stopped.

A signature is sha256 of (tool name, canonical JSON arguments, real output) in a
sliding window of 10. The 3rd identical signature replaces that result with a "loop
detected … change approach" error the model sees and the run goes on; the 6th ends the
run ``loop``. A call polled while its output changes (a recovering service) never
matches; argument key order does not matter; the real output is hashed, not the
replacement or the cut observation.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.agent import (
    CallContext,
    FunctionTool,
    InMemoryHistory,
    RunState,
    StopReason,
    ToolCall,
    ToolMessage,
    run,
)
from bot.agent.repeated_calls import LoopDetector, LoopVerdict
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import HostArgs, NoArgs, ServiceArgs, echo_tool, make_config

# Deterministic examples, no per-example time limit: the suite never depends on speed.
PROPERTY = settings(derandomize=True, deadline=None, database=None)

# DESIGN's window, written out here: a change to the constant must fail these tests.
WINDOW = 10


def is_loop_message(content: str) -> bool:
    return "loop detected" in content and "change approach" in content


def tool_results(memory: InMemoryHistory) -> list[ToolMessage]:
    return [m for m in memory.messages if isinstance(m, ToolMessage)]


def repeated_check(n: int) -> list[object]:
    return [calls(call("check", f"c{i}", host="web-03")) for i in range(1, n + 1)]


# -- LoopDetector on its own ---------------------------------------------------


def test_verdicts_for_one_repeated_signature() -> None:
    detector = LoopDetector([])
    verdicts = [detector.observe("check", '{"host":"web-03"}', "ok") for _ in range(6)]
    assert verdicts == [LoopVerdict.OK, LoopVerdict.OK] + [LoopVerdict.WARN] * 3 + [
        LoopVerdict.STOP
    ]


def test_any_differing_part_is_a_different_signature() -> None:
    detector = LoopDetector([])
    detector.observe("check", '{"host":"web-03"}', "ok")
    detector.observe("check", '{"host":"web-03"}', "ok")
    assert detector.observe("check2", '{"host":"web-03"}', "ok") is LoopVerdict.OK
    assert detector.observe("check", '{"host":"web-02"}', "ok") is LoopVerdict.OK
    assert detector.observe("check", '{"host":"web-03"}', "ok!") is LoopVerdict.OK
    assert detector.observe("check", '{"host":"web-03"}', "ok") is LoopVerdict.WARN


def test_parts_do_not_run_into_each_other() -> None:
    detector = LoopDetector([])
    detector.observe("ab", "c", "out")
    detector.observe("a", "bc", "out")
    detector.observe("a", "b", "cout")
    assert detector.observe("ab", "co", "ut") is LoopVerdict.OK
    assert len(set(detector.window)) == 4


def test_window_is_the_shared_list_and_stays_bounded() -> None:
    state = RunState()
    detector = LoopDetector(state.loop_window)
    for i in range(25):
        detector.observe("check", "{}", str(i))
    assert state.loop_window is detector.window
    assert len(state.loop_window) == WINDOW


def test_signatures_outside_the_window_are_forgotten() -> None:
    def third_after(others: int) -> LoopVerdict:
        detector = LoopDetector([])
        detector.observe("check", "{}", "same")
        detector.observe("check", "{}", "same")
        for i in range(others):
            detector.observe("other", "{}", str(i))
        return detector.observe("check", "{}", "same")

    # Window of 10 = the new call and the 9 before it.
    assert third_after(7) is LoopVerdict.WARN  # all three in the window
    assert third_after(8) is LoopVerdict.OK  # the first has slid out


@PROPERTY
@given(st.lists(st.integers(min_value=0, max_value=3), max_size=60))
def test_verdict_matches_count_in_the_last_ten(stream: list[int]) -> None:
    detector = LoopDetector([])
    seen: list[int] = []
    for item in stream:
        seen.append(item)
        count = seen[-WINDOW:].count(item)
        expected = (
            LoopVerdict.STOP if count >= 6 else LoopVerdict.WARN if count >= 3 else LoopVerdict.OK
        )
        assert detector.observe("poll", "{}", f"out-{item}") is expected
        assert len(detector.window) <= WINDOW


# -- in a run ------------------------------------------------------------------


async def test_third_identical_result_is_replaced_and_the_run_goes_on() -> None:
    model = ScriptedModel([*repeated_check(3), text("web-03 looks stuck at 95%")])
    memory = InMemoryHistory()
    config = make_config(model, tools=[echo_tool()], memory=memory)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "web-03 looks stuck at 95%"
    results = tool_results(memory)
    assert [m.content for m in results[:2]] == ["ok web-03", "ok web-03"]
    assert is_loop_message(results[2].content)
    assert results[2].is_error
    assert results[2].tool_call_id == "c3"
    # The model sees the replacement in its next request.
    seen = [m for m in model.requests[3].messages if isinstance(m, ToolMessage)]
    assert is_loop_message(seen[-1].content)
    assert result.tool_executions == 3  # the tool did run; only its result was replaced
    model.assert_done()


async def test_sixth_identical_result_ends_the_run_as_loop() -> None:
    model = ScriptedModel(repeated_check(6))
    memory = InMemoryHistory()
    config = make_config(model, tools=[echo_tool()], memory=memory)

    result = await run(config)

    assert result.stop_reason is StopReason.LOOP, result.error
    assert len(model.requests) == 6
    assert result.tool_executions == 6
    assert "check" in (result.error or "")
    model.assert_done()


async def test_identical_calls_within_one_response_count() -> None:
    model = ScriptedModel([calls(*(call("check", f"c{i}", host="web-03") for i in range(6)))])
    result = await run(make_config(model, tools=[echo_tool()]))

    assert result.stop_reason is StopReason.LOOP
    assert len(model.requests) == 1


async def test_polling_a_recovering_service_is_not_a_loop() -> None:
    counter = itertools.count(1)

    async def poll(args: NoArgs, ctx: CallContext) -> str:
        return f"healthy replicas: {next(counter)}/10"

    tool = FunctionTool(name="poll", description="poll", args_model=NoArgs, fn=poll)
    model = ScriptedModel([*(calls(call("poll", f"c{i}")) for i in range(9)), text("recovered")])
    memory = InMemoryHistory()

    result = await run(make_config(model, tools=[tool], memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert not any(is_loop_message(m.content) for m in tool_results(memory))
    assert result.tool_executions == 9


async def test_argument_key_order_does_not_matter() -> None:
    async def status(args: ServiceArgs, ctx: CallContext) -> str:
        return "active (running)"

    tool = FunctionTool(name="status", description="status", args_model=ServiceArgs, fn=status)
    orders = [
        '{"host": "web-03", "service": "nginx"}',
        '{"service": "nginx", "host": "web-03"}',
        '{"service":"nginx","host":"web-03"}',
    ]
    model = ScriptedModel(
        [calls(ToolCall(id=f"c{i}", name="status", arguments=a)) for i, a in enumerate(orders)]
        + [text("nginx is running")]
    )
    memory = InMemoryHistory()

    result = await run(make_config(model, tools=[tool], memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert is_loop_message(tool_results(memory)[2].content)


class OneRef:
    """An artifact store that files every output under one reference, so that two cut
    observations differ only if the text the model is shown differs."""

    def __init__(self) -> None:
        self.kept: list[str] = []

    async def put(self, job_id: str, call_id: str, text: str) -> str:
        self.kept.append(text)
        return "artifact:dump"


def long_dump(outputs: Iterator[str]) -> FunctionTool:
    async def dump(args: HostArgs, ctx: CallContext) -> str:
        return next(outputs)

    return FunctionTool(
        name="dump", description="dump", args_model=HostArgs, fn=dump, output_bound=100
    )


async def test_the_real_output_is_hashed_not_the_cut_observation() -> None:
    # Outputs of one length and one line that differ only past the output bound: the
    # model is shown six identical cut observations, but the service is changing, so
    # this is not a loop. Hashing the cut form instead would call it one at the third.
    outputs = ("x" * 200 + f" tick {n}" for n in range(1, 7))
    artifacts = OneRef()
    model = ScriptedModel(
        [*(calls(call("dump", f"c{i}", host="web-03")) for i in range(6)), text("done")]
    )
    memory = InMemoryHistory()
    config = make_config(model, tools=[long_dump(outputs)], memory=memory, artifacts=artifacts)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    results = tool_results(memory)
    assert len(results) == 6
    assert not any(is_loop_message(m.content) for m in results)
    # What this rests on: the cut forms are equal, the full outputs are not.
    assert len({m.content for m in results}) == 1
    assert results[0].content.startswith("x" * 100) and "tick" not in results[0].content
    assert len(set(artifacts.kept)) == 6


async def test_the_same_long_output_is_a_loop_whatever_its_cut_form() -> None:
    # The other side: real outputs past the bound that are equal are caught.
    outputs = itertools.repeat("x" * 200 + " tick 1")
    model = ScriptedModel(
        [*(calls(call("dump", f"c{i}", host="web-03")) for i in range(3)), text("done")]
    )
    memory = InMemoryHistory()
    config = make_config(model, tools=[long_dump(outputs)], memory=memory, artifacts=OneRef())

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert [is_loop_message(m.content) for m in tool_results(memory)] == [False, False, True]


async def test_other_calls_in_between_do_not_reset_the_count() -> None:
    script = []
    for i in range(3):
        script.append(calls(call("check", f"a{i}", host="web-03")))
        script.append(calls(call("check", f"b{i}", host=f"db-0{i}")))
    model = ScriptedModel([*script, text("done")])
    memory = InMemoryHistory()

    result = await run(make_config(model, tools=[echo_tool()], memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    by_id = {m.tool_call_id: m.content for m in tool_results(memory)}
    assert by_id["a1"] == "ok web-03"
    assert is_loop_message(by_id["a2"])
    assert not any(is_loop_message(by_id[f"b{i}"]) for i in range(3))


async def test_window_survives_across_runs() -> None:
    memory = InMemoryHistory()
    first_model = ScriptedModel([*repeated_check(2), text("pausing")])
    first = await run(make_config(first_model, tools=[echo_tool()], memory=memory))
    assert first.stop_reason is StopReason.COMPLETED, first.error

    state = RunState.model_validate_json(first.state.model_dump_json())
    model = ScriptedModel([calls(call("check", "c9", host="web-03")), text("done")])
    second = await run(make_config(model, tools=[echo_tool()], memory=memory), state)

    assert second.stop_reason is StopReason.COMPLETED, second.error
    assert is_loop_message(tool_results(memory)[-1].content)
