"""What the scripted model says, settable after its server has started.

``ScriptedModel`` is the policy holder the end-to-end tests and the benchmarks point the
scripted model server (``bot.emulator.model_server.ScriptedServer``) at: the server is
started once, and the caller sets ``model.policy`` when it knows what the model should
say; ``wait_for`` waits on a condition over the requests received, woken by each request.
``steps`` is the simplest policy: these answers in order, a 500 for any further request.
What a policy returns is made of ``bot.emulator.scripted``'s parts.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

from bot.emulator.model_server import ScriptedServer
from bot.emulator.scripted import Answer, Fault, Policy, ScriptedRequest

WAIT_TIMEOUT_S = 10.0  # a hang guard for ``wait_for``


class ScriptedModel:
    """What the model says, settable by the test after the server has started.

    ``policy`` decides each request (None: every request fails with a 500 naming the
    omission). ``wait_for`` returns once a condition on ``requests`` holds, woken by each
    request rather than by a clock. ``strict``: the server refuses an invalid history with
    a 400, as vLLM does (see ``ScriptedServer``).
    """

    def __init__(self, policy: Policy | None = None, *, strict: bool = False) -> None:
        self.policy: Policy | None = policy
        self.server: ScriptedServer = ScriptedServer(self, strict=strict)
        self._arrived = asyncio.Event()

    def __call__(self, request: ScriptedRequest) -> Any:
        self._arrived.set()
        if self.policy is None:
            return Fault(status=500, message="e2e: the test set no model policy")
        return self.policy(request)

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def requests(self) -> list[ScriptedRequest]:
        return self.server.requests

    async def wait_for(
        self,
        predicate: Callable[[list[ScriptedRequest]], object],
        *,
        timeout: float = WAIT_TIMEOUT_S,  # noqa: ASYNC109 (a hang guard)
    ) -> None:
        """Return once ``predicate(requests)`` is truthy, re-checked after every request."""

        async def until() -> None:
            while not predicate(self.requests):
                self._arrived.clear()
                await self._arrived.wait()

        try:
            await asyncio.wait_for(until(), timeout)
        except TimeoutError:
            count = len(self.requests)
            message = f"model condition not met within {timeout}s ({count} requests)"
            raise TimeoutError(message) from None


def steps(*answers: Answer) -> Policy:
    """A policy answering with ``answers`` in order; any further request gets a 500."""
    queue = list(answers)
    served = itertools.count(1)

    def policy(_: ScriptedRequest) -> Answer:
        n = next(served)
        if n > len(queue):
            return Fault(status=500, message=f"e2e: unexpected model request #{n}")
        return queue[n - 1]

    return policy
