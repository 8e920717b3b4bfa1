"""Messages injected into a running job (thread replies typed while the bot works).

At the start of every iteration the run fetches waiting messages, appends them to the
history as user messages (``<@author>: text``, ``source_id`` = the message id), makes
them durable with ``flush`` and only then acknowledges them. If appending or flushing
fails nothing is acknowledged, so the queue delivers them again; the run ends
``failed`` without raising. Injected text reaches the very next model request.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.agent import (
    AnyMessage,
    Approved,
    AssistantMessage,
    ConfirmRequest,
    Decision,
    FunctionTool,
    Injected,
    InMemoryHistory,
    Pending,
    StopReason,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.testing import FakeClock, ScriptedModel, call, calls, text

from .conftest import Recorder, echo_tool, make_config


class LoggedHistory(InMemoryHistory):
    """In-memory history that logs appends and flushes into a shared log."""

    def __init__(self, log: list[tuple[str, object]]) -> None:
        super().__init__()
        self.log = log
        self.durable: list[AnyMessage] = []

    def append(self, message: AnyMessage) -> None:
        super().append(message)
        self.log.append(("append", message))

    async def flush(self) -> None:
        await super().flush()
        self.durable = list(self.messages)
        self.log.append(("flush", len(self.messages)))


class FailingHistory(InMemoryHistory):
    """History whose store fails once an injected message is involved."""

    def __init__(self, *, fail_on: str) -> None:
        super().__init__()
        self.fail_on = fail_on

    def _has_injected(self) -> bool:
        return any(isinstance(m, UserMessage) and m.source_id for m in self.messages)

    def append(self, message: AnyMessage) -> None:
        if self.fail_on == "append" and isinstance(message, UserMessage) and message.source_id:
            raise ConnectionError("redis went away")
        super().append(message)

    async def flush(self) -> None:
        if self.fail_on == "flush" and self._has_injected():
            raise ConnectionError("redis went away")
        await super().flush()


class Queue:
    """An inject source serving one batch per fetch, from a script of batches."""

    def __init__(
        self, batches: Sequence[Sequence[Injected]], log: list[tuple[str, object]] | None = None
    ) -> None:
        self.batches = [list(b) for b in batches]
        self.log = log if log is not None else []
        self.fetches = 0
        self.acked: list[str] = []
        self.memory: LoggedHistory | None = None
        self.durable_at_ack: list[list[AnyMessage]] = []

    async def fetch(self) -> Sequence[Injected]:
        self.fetches += 1
        return self.batches.pop(0) if self.batches else []

    async def ack(self, items: Sequence[Injected]) -> None:
        self.log.append(("ack", tuple(i.id for i in items)))
        self.acked.extend(i.id for i in items)
        if self.memory is not None:
            self.durable_at_ack.append(list(self.memory.durable))


def injected_users(messages: Sequence[AnyMessage]) -> list[UserMessage]:
    return [m for m in messages if isinstance(m, UserMessage) and m.source_id is not None]


async def test_injected_messages_are_appended_flushed_and_only_then_acked(
    clock: FakeClock,
) -> None:
    log: list[tuple[str, object]] = []
    memory = LoggedHistory(log)
    memory.append(UserMessage(content="web-03 is at 95% CPU"))
    items = [
        Injected(id="1700000001.000100", text="it is nginx again", author="U0123ABC"),
        Injected(id="1700000002.000200", text="no restarts before 10:00"),
    ]
    queue = Queue([[], items], log)
    queue.memory = memory
    model = ScriptedModel([calls(call("check", "c1", host="web-03")), text("noted")])
    config = make_config(model, tools=[echo_tool()], memory=memory, inject=queue, clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert queue.acked == ["1700000001.000100", "1700000002.000200"]
    first = next(i for i, e in enumerate(log) if e[0] == "append" and _injected(e[1]))
    ack = log.index(("ack", ("1700000001.000100", "1700000002.000200")))
    flushes_between = [e for e in log[first:ack] if e[0] == "flush"]
    assert flushes_between, log
    # Both appends precede the flush, and that flush covered them.
    appended = [e[1] for e in log[first:ack] if e[0] == "append" and _injected(e[1])]
    assert [getattr(m, "source_id", None) for m in appended] == [i.id for i in items]
    [durable] = queue.durable_at_ack
    assert [m.source_id for m in injected_users(durable)] == [i.id for i in items]


def _injected(message: object) -> bool:
    return isinstance(message, UserMessage) and message.source_id is not None


async def test_injected_message_content_and_source_id(clock: FakeClock) -> None:
    items = [
        Injected(id="m1", text="it is nginx again", author="U0123ABC"),
        Injected(id="m2", text="no restarts before 10:00"),
    ]
    queue = Queue([items])
    model = ScriptedModel([text("noted")])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="web-03 is at 95% CPU"))
    config = make_config(model, memory=memory, inject=queue, clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    with_author, without = injected_users(memory.messages)
    assert with_author.content == "<@U0123ABC>: it is nginx again"
    assert with_author.source_id == "m1"
    assert "no restarts before 10:00" in without.content
    assert not without.content.startswith("<@")
    assert without.source_id == "m2"


async def test_a_credential_pasted_in_the_thread_is_not_sent_to_the_model(
    clock: FakeClock,
) -> None:
    pasted = "try with this: curl -H 'Authorization: Bearer s3cr3t-t0k3n' https://web-03/"
    queue = Queue([[Injected(id="m1", text=pasted, author="U1")]])
    model = ScriptedModel([text("noted")])
    memory = InMemoryHistory()
    result = await run(make_config(model, memory=memory, inject=queue, clock=clock))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    (message,) = injected_users(memory.messages)
    assert "s3cr3t" not in message.content
    assert "Authorization: Bearer [redacted]" in message.content
    assert "s3cr3t" not in str(model.requests[0].messages)


async def test_injected_messages_reach_the_next_model_request(clock: FakeClock) -> None:
    queue = Queue(
        [
            [Injected(id="m0", text="also check web-01", author="U1")],
            [Injected(id="m1", text="web-01 is fine, skip it", author="U2")],
        ]
    )
    model = ScriptedModel([calls(call("check", "c1", host="web-03")), text("web-03 checked")])
    config = make_config(model, tools=[echo_tool()], inject=queue, clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    first, second = model.histories
    assert isinstance(first[-1], UserMessage)
    assert first[-1].content == "<@U1>: also check web-01"
    # The reply typed while the tool ran comes after the tool's result, before the call.
    assert [type(m).__name__ for m in second[-3:]] == [
        "AssistantMessage",
        "ToolMessage",
        "UserMessage",
    ]
    assert isinstance(second[-1], UserMessage)
    assert second[-1].content == "<@U2>: web-01 is fine, skip it"
    assert second[-1].source_id == "m1"
    assert queue.fetches == 2
    assert queue.acked == ["m0", "m1"]


async def test_an_injected_messages_event_is_emitted(clock: FakeClock, recorder: Recorder) -> None:
    queue = Queue([[Injected(id="m1", text="a"), Injected(id="m2", text="b", author="U1")]])
    model = ScriptedModel([text("ok")])
    config = make_config(model, inject=queue, clock=clock, on_event=recorder)

    await run(config)

    [event] = recorder.of("injected")
    assert event.ids == ("m1", "m2")
    kinds = recorder.kinds()
    assert kinds.index("injected") < kinds.index("model_request_start")


async def test_nothing_is_acked_or_emitted_when_there_is_nothing(
    clock: FakeClock, recorder: Recorder
) -> None:
    queue = Queue([])
    model = ScriptedModel([text("ok")])
    config = make_config(model, inject=queue, clock=clock, on_event=recorder)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert queue.fetches == 1
    assert queue.log == []
    assert recorder.of("injected") == []


async def test_a_failed_flush_acks_nothing_and_fails_the_run(clock: FakeClock) -> None:
    memory = FailingHistory(fail_on="flush")
    memory.append(UserMessage(content="web-03 is at 95% CPU"))
    queue = Queue([[], [Injected(id="m1", text="stop", author="U1")]])
    model = ScriptedModel([calls(call("check", "c1", host="web-03"))])
    config = make_config(model, tools=[echo_tool()], memory=memory, inject=queue, clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.FAILED
    assert result.error is not None and "redis went away" in result.error
    assert queue.acked == []
    assert queue.log == []
    assert len(model.requests) == 1  # no model call with an unacknowledged history


async def test_a_failed_append_acks_nothing_and_fails_the_run(clock: FakeClock) -> None:
    memory = FailingHistory(fail_on="append")
    memory.append(UserMessage(content="web-03 is at 95% CPU"))
    queue = Queue([[Injected(id="m1", text="stop", author="U1")]])
    model = ScriptedModel([])
    config = make_config(model, memory=memory, inject=queue, clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.FAILED
    assert result.error is not None and "redis went away" in result.error
    assert queue.acked == []
    assert model.requests == []


async def test_a_reply_during_a_pause_enters_the_history_when_the_job_resumes(
    clock: FakeClock,
) -> None:
    async def restart(args: object, ctx: object) -> str:
        return "restarted nginx on web-03"

    restart_tool = FunctionTool(
        name="restart_service",
        description="restart",
        args_model=echo_tool().args_model,
        fn=restart,
        category="mutating",
    )

    async def pending(request: ConfirmRequest) -> Decision:
        return Pending()

    memory = InMemoryHistory()
    memory.append(UserMessage(content="restart nginx on web-03"))
    model = ScriptedModel([calls(call("restart_service", "c1", host="web-03")), text("done")])
    queue = Queue([])
    paused = await run(
        make_config(
            model,
            tools=[restart_tool],
            memory=memory,
            inject=queue,
            confirm=pending,
            clock=clock,
        )
    )
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL, paused.error

    # A reply arrives while the card waits; the resumed run picks it up.
    queue.batches = [[Injected(id="m9", text="go ahead, it is safe", author="U7")]]
    result = await run(
        make_config(model, tools=[restart_tool], memory=memory, inject=queue, clock=clock),
        paused.state,
        Approved(confirmed_by="U0123ABC"),
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert queue.acked == ["m9"]
    history = model.histories[1]
    # The tool result follows its call directly; the reply comes after it.
    assert isinstance(history[-3], AssistantMessage)
    assert isinstance(history[-2], ToolMessage) and history[-2].tool_call_id == "c1"
    assert isinstance(history[-1], UserMessage)
    assert history[-1].content == "<@U7>: go ahead, it is safe"
    assert history[-1].source_id == "m9"
