"""Deterministic doubles for testing anything built on the core.

``ScriptedModel`` answers from a list of steps or a function of the history, records
every request, and fails on an unexpected call (and, via ``assert_done``, on steps left
unused). ``FakeClock`` makes deadlines and timeouts move only when a test says so.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from bot.agent.messages import (
    AnyMessage,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
)
from bot.agent.ports import Client, DeltaSink

Reply = ModelResponse | BaseException
ScriptFn = Callable[[ModelRequest], Reply | Awaitable[Reply]]
ScriptStep = Reply | ScriptFn


def text(content: str, *, usage: Usage | None = None) -> ModelResponse:
    """A final answer."""
    return ModelResponse(content=content, usage=usage or Usage(), finish_reason="stop")


_ids = itertools.count(1)


def call(name: str, _id: str | None = None, /, **arguments: object) -> ToolCall:
    """A tool call with JSON arguments."""
    return ToolCall(id=_id or f"call_{next(_ids)}", name=name, arguments=json.dumps(arguments))


def calls(
    *tool_calls: ToolCall, content: str | None = None, usage: Usage | None = None
) -> ModelResponse:
    """A response asking for tools."""
    return ModelResponse(
        content=content,
        tool_calls=tuple(tool_calls),
        usage=usage or Usage(),
        finish_reason="tool_calls",
    )


class UnexpectedModelCall(AssertionError):
    pass


class ScriptedModel:
    """A model client (and a one-model resolver) that follows a script."""

    def __init__(
        self,
        steps: Iterable[ScriptStep] = (),
        *,
        fn: ScriptFn | None = None,
        name: str = "scripted",
        chunk: int = 8,
    ) -> None:
        self._steps: deque[ScriptStep] = deque(steps)
        self._fn = fn
        self._name = name
        self._chunk = chunk
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return self._name

    def chain(self) -> Sequence[Client]:
        return [self]

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaSink | None = None
    ) -> ModelResponse:
        # Snapshot the history: the live list keeps growing after the call.
        self.requests.append(replace(request, messages=tuple(request.messages)))
        step: ScriptStep
        if self._fn is not None:
            step = self._fn
        elif self._steps:
            step = self._steps.popleft()
        else:
            raise UnexpectedModelCall(f"unexpected model call #{len(self.requests)}")
        reply: Reply | Awaitable[Reply]
        reply = step(request) if callable(step) else step
        if not isinstance(reply, ModelResponse | BaseException):
            reply = await reply
        if isinstance(reply, BaseException):
            raise reply
        if on_delta is not None and reply.content:
            for start in range(0, len(reply.content), self._chunk):
                on_delta(reply.content[start : start + self._chunk])
                await asyncio.sleep(0)
        return reply

    @property
    def histories(self) -> list[Sequence[AnyMessage]]:
        return [r.messages for r in self.requests]

    def assert_done(self) -> None:
        if self._steps:
            raise AssertionError(f"{len(self._steps)} scripted step(s) never used")


@dataclass(slots=True)
class StaticChain:
    """A fixed fallback chain of clients."""

    clients: Sequence[Client]

    def chain(self) -> Sequence[Client]:
        return self.clients


@dataclass(slots=True)
class _Timer:
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass(slots=True)
class FakeClock:
    """A clock that only moves on ``advance``; due timers fire in order."""

    now: float = 0.0
    _heap: list[tuple[float, int, _Timer]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def monotonic(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(callback)
        heapq.heappush(self._heap, (self.now + max(delay, 0.0), next(self._seq), timer))
        return timer

    def advance(self, seconds: float) -> None:
        target = self.now + seconds
        while self._heap and self._heap[0][0] <= target:
            when, _, timer = heapq.heappop(self._heap)
            self.now = max(self.now, when)
            if not timer.cancelled:
                timer.callback()
        self.now = target

    @property
    def pending_timers(self) -> int:
        return sum(1 for _, _, t in self._heap if not t.cancelled)
