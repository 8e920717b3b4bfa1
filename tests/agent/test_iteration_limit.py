"""The iteration limit is terminal: no model call beyond it, the last response's tools still run.

An iteration is one model response; retries of an empty response do not count. With
``max_iterations=N`` the tools of response N run and the job ends ``limit_iterations``
without another model call; a final answer at response N completes the job.
"""

from __future__ import annotations

from bot.agent import InMemoryHistory, Limits, RunState, StopReason, ToolMessage, run
from bot.agent.events import LimitReached
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import Recorder, echo_tool, make_config


async def test_tools_of_last_response_run_then_stop(recorder: Recorder) -> None:
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-01")),
            calls(call("check", "c2", host="web-02"), call("check", "c3", host="web-03")),
        ]
    )
    config = make_config(
        model, tools=[echo_tool()], limits=Limits(max_iterations=2), on_event=recorder
    )

    result = await run(config)

    assert result.stop_reason is StopReason.LIMIT_ITERATIONS, result.error
    assert len(model.requests) == 2  # no third call, not even "one more try"
    assert result.iterations == 2
    assert result.tool_executions == 3
    assert isinstance(config.memory, InMemoryHistory)
    history = config.memory.messages
    results = [m for m in history if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.content) for m in results] == [
        ("c1", "ok web-01"),
        ("c2", "ok web-02"),
        ("c3", "ok web-03"),
    ]
    assert isinstance(history[-1], ToolMessage)
    model.assert_done()


async def test_limit_reached_event_is_emitted(recorder: Recorder) -> None:
    model = ScriptedModel([calls(call("check", "c1", host="web-01"))])
    config = make_config(
        model, tools=[echo_tool()], limits=Limits(max_iterations=1), on_event=recorder
    )

    result = await run(config)

    assert result.stop_reason is StopReason.LIMIT_ITERATIONS
    hits = recorder.of("limit_reached")
    assert len(hits) == 1
    assert isinstance(hits[0], LimitReached)
    assert hits[0].reason is StopReason.LIMIT_ITERATIONS
    assert "1/1" in hits[0].detail
    # The limit is the last thing that happens before the run ends.
    assert recorder.kinds()[-2:] == ["limit_reached", "run_end"]


async def test_final_answer_at_the_last_iteration_completes() -> None:
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-01")),
            calls(call("check", "c2", host="web-02")),
            text("web-01 and web-02 are fine"),
        ]
    )
    config = make_config(model, tools=[echo_tool()], limits=Limits(max_iterations=3))

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "web-01 and web-02 are fine"
    assert result.iterations == 3
    model.assert_done()


async def test_empty_retries_do_not_count_as_iterations() -> None:
    model = ScriptedModel([text(""), text("all good")])
    config = make_config(model, limits=Limits(max_iterations=1))

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "all good"
    assert result.iterations == 1
    assert result.model_calls == 2


async def test_limit_carries_over_into_a_later_run(recorder: Recorder) -> None:
    first_model = ScriptedModel([calls(call("check", "c1", host="web-01"))])
    first = await run(
        make_config(first_model, tools=[echo_tool()], limits=Limits(max_iterations=1))
    )
    assert first.stop_reason is StopReason.LIMIT_ITERATIONS

    # The same job resumed with the same limit: no model call at all.
    second_model = ScriptedModel([])
    state = RunState.model_validate_json(first.state.model_dump_json())
    second = await run(
        make_config(
            second_model,
            tools=[echo_tool()],
            limits=Limits(max_iterations=1),
            on_event=recorder,
        ),
        state,
    )

    assert second.stop_reason is StopReason.LIMIT_ITERATIONS
    assert second_model.requests == []
    assert second.iterations == 1
    assert [e.reason for e in recorder.of("limit_reached")] == [StopReason.LIMIT_ITERATIONS]


async def test_raised_limit_allows_exactly_the_extra_iterations() -> None:
    first = await run(
        make_config(
            ScriptedModel([calls(call("check", "c1", host="web-01"))]),
            tools=[echo_tool()],
            limits=Limits(max_iterations=1),
        )
    )
    assert first.stop_reason is StopReason.LIMIT_ITERATIONS

    model = ScriptedModel(
        [calls(call("check", "c2", host="web-02")), calls(call("check", "c3", host="web-03"))]
    )
    second = await run(
        make_config(model, tools=[echo_tool()], limits=Limits(max_iterations=3)), first.state
    )

    assert second.stop_reason is StopReason.LIMIT_ITERATIONS
    assert len(model.requests) == 2
    assert second.iterations == 3
    assert second.tool_executions == 3
    model.assert_done()


async def test_zero_iterations_makes_no_model_call() -> None:
    model = ScriptedModel([])
    result = await run(make_config(model, limits=Limits(max_iterations=0)))

    assert result.stop_reason is StopReason.LIMIT_ITERATIONS
    assert model.requests == []
    assert result.iterations == 0
