"""A store failure abandons the run (to be resumed), it does not end the job."""

import pytest

from bot.agent import RunState, run
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.errors import StoreError

from .conftest import echo_tool, make_config


async def test_a_failing_checkpoint_propagates_instead_of_failing_the_run() -> None:
    model = ScriptedModel([calls(call("check", "c1", host="web-03")), text("fine")])
    saved: list[RunState] = []

    async def checkpoint(state: RunState) -> None:
        if saved:
            raise StoreError("redis unavailable during job checkpoint")
        saved.append(state.model_copy(deep=True))

    config = make_config(model, tools=[echo_tool()], on_checkpoint=checkpoint)
    with pytest.raises(StoreError):
        await run(config)
    assert len(saved) == 1  # the last good step is what a resumed run starts from


async def test_other_failures_still_end_the_run_as_failed() -> None:
    model = ScriptedModel([calls(call("check", "c1", host="web-03")), text("fine")])

    async def checkpoint(state: RunState) -> None:
        raise RuntimeError("a bug")

    result = await run(make_config(model, tools=[echo_tool()], on_checkpoint=checkpoint))
    assert result.stop_reason.value == "failed" and "a bug" in (result.error or "")
