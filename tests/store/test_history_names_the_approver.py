"""The Redis history names a call's real approver, in every process that reads it.

The assistant message is durable before the job pauses for its card, with whatever the
model wrote as ``confirmed_by``; the result appended after the click carries the
approver. The LIST stays append-only; every ``RedisHistory`` — the one that resumes the
job, and any later one that loads the thread — rewrites the call from its result, so the
next model request and condensing see the clicker, and the effective view after
condensing does too.
"""

from __future__ import annotations

import json
from dataclasses import replace

import redis.asyncio as aioredis
from pydantic import BaseModel

from bot.agent import (
    Approved,
    AssistantMessage,
    CallContext,
    ConfirmRequest,
    Decision,
    FunctionTool,
    InMemoryHistory,
    Pending,
    RunState,
    StopReason,
    ToolCall,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.store.history import RedisHistory, load_message
from bot.store.keys import Keys, Thread
from tests.agent.conftest import make_config

CLICKER = "U0CLICKER1"


class ServiceArgs(BaseModel):
    service: str


async def restart(args: ServiceArgs, ctx: CallContext) -> str:
    return f"restarted {args.service} as {ctx.confirmed_by}"


TOOLS = [
    FunctionTool(
        name="restart_service",
        description="restart",
        args_model=ServiceArgs,
        fn=restart,
        category="mutating",
    )
]


async def pending(request: ConfirmRequest) -> Decision:
    return Pending()


def confirmed_by(messages: object, call_id: str = "c1") -> object:
    assert isinstance(messages, list | tuple)
    for message in messages:
        if isinstance(message, AssistantMessage):
            for tool_call in message.tool_calls:
                if tool_call.id == call_id:
                    return json.loads(tool_call.arguments).get("confirmed_by")
    raise AssertionError(f"no call {call_id}")


async def test_a_job_resumed_elsewhere_shows_the_clicker(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    # Process one: the request, the call as the model wrote it, the pause.
    first = RedisHistory(redis, keys, thread)
    await first.history()
    first.append(UserMessage(content="restart nginx"))
    written = call("restart_service", "c1", service="nginx", confirmed_by="U0MODEL99")
    base = make_config(ScriptedModel([]), tools=TOOLS, memory=InMemoryHistory())
    paused = await run(
        replace(
            base,
            client=ScriptedModel([calls(written)]),
            memory=first,
            confirm=pending,
        )
    )
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL, paused.error
    assert paused.approval is not None

    # Process two loads the thread and resumes with the click.
    second = RedisHistory(redis, keys, thread)
    assert confirmed_by(list(await second.history())) == "U0MODEL99"  # not decided yet
    model = ScriptedModel([text("restarted")])
    decision = Approved(
        confirmed_by=CLICKER, tool=paused.approval.tool, args_hash=paused.approval.args_hash
    )
    state = RunState.model_validate_json(paused.state.model_dump_json())
    resumed = await run(replace(base, client=model, memory=second), state, decision)
    assert resumed.stop_reason is StopReason.COMPLETED, resumed.error

    [request] = model.requests
    assert confirmed_by(request.messages) == CLICKER
    assert confirmed_by(list(second.originals)) == CLICKER

    # Any later reader derives the same from the stored list...
    third = RedisHistory(redis, keys, thread)
    assert confirmed_by(list(await third.history())) == CLICKER
    results = [m for m in await third.history() if isinstance(m, ToolMessage)]
    assert [(r.content, r.confirmed_by) for r in results] == [
        (f"restarted nginx as {CLICKER}", CLICKER)
    ]
    # ...which stays append-only: the call as written, then the result naming the approver.
    raw = [load_message(r) for r in await redis.lrange(keys.history(thread), 0, -1)]
    assert confirmed_by(raw) == "U0MODEL99"
    assert [type(m).__name__ for m in raw] == [
        "UserMessage",
        "AssistantMessage",
        "ToolMessage",
        "AssistantMessage",
    ]


async def test_the_condensed_view_shows_the_clicker(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    stored = RedisHistory(redis, keys, thread)
    await stored.history()
    for message in (
        UserMessage(content="restart nginx"),
        AssistantMessage(
            tool_calls=(
                ToolCall(
                    id="c1",
                    name="restart_service",
                    arguments='{"service": "nginx", "confirmed_by": "U0MODEL99"}',
                ),
            )
        ),
        ToolMessage(
            tool_call_id="c1", name="restart_service", content="restarted", confirmed_by=CLICKER
        ),
        AssistantMessage(content="done"),
        UserMessage(content="thanks"),
    ):
        stored.append(message)
    await stored.condense(1, "the user asked for a restart")

    view = list(await stored.history())
    assert confirmed_by(view) == CLICKER
    again = list(await RedisHistory(redis, keys, thread).history())
    assert view == again
    assert isinstance(again[0], UserMessage) and again[0].summary
