"""One model step of the loop: the call, with everything that may come before or
instead of an answer — the limits pre-check with its reservation, condensing when the
prompt has grown past its threshold, the fallback chain, condensing on a context
overflow, empty-response retries, a stream that repeats itself, Stop and the deadline;
each call's cost (``cost.charge``) and, with a workspace-wide cap, its hold there
(``cost.hold`` before the call, settled exactly once after it, however it ended).

``model_step`` returns the normalised response (the iteration counted, usage accounted)
or the ``Finish`` that ends the run; it works on the run through ``StepHost``, the part
of ``bot.agent.run``'s run state it needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.agent.config import AgentConfig
from bot.agent.cost import Held, charge, hold
from bot.agent.events import (
    Event,
    LimitReached,
    ModelFallback,
    ModelRequestEnd,
    ModelRequestStart,
    StreamDelta,
)
from bot.agent.guard import Aborted, AbortKind, guarded
from bot.agent.limits import check_before_request
from bot.agent.messages import AnyMessage, ModelRequest, ModelResponse, Usage
from bot.agent.model_failure_recovery import Action
from bot.agent.ports import Clock, DeltaSink, SpendRefused
from bot.agent.responses import account, cut_off, normalize
from bot.agent.state import PendingApproval, RunState, StopReason
from bot.agent.stream_repetition import RepetitionDetected, RepetitionDetector
from bot.errors import ModelError


@dataclass(frozen=True, slots=True)
class Next:
    """Go on with the next iteration."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    reason: StopReason
    output: str | None = None
    error: str | None = None
    approval: PendingApproval | None = None


Step = Next | Finish


ABORT_REASON: dict[AbortKind, StopReason] = {
    "deadline": StopReason.LIMIT_DEADLINE,
    "cancel": StopReason.CANCELLED,
    "timeout": StopReason.FAILED,
}


class StepHost(Protocol):
    """What a model step reads and calls on its run (``bot.agent.run``)."""

    config: AgentConfig
    state: RunState
    clock: Clock
    tool_names: frozenset[str]
    last_text: str | None
    condense_used: bool

    def emit(self, event: Event) -> None: ...
    def active(self) -> float: ...
    def deadline_in(self) -> float: ...
    def cancel_reason(self) -> str: ...
    def cancelled(self) -> Finish | None: ...
    async def request(self) -> ModelRequest: ...
    def reserve(self, messages: Sequence[AnyMessage]) -> int: ...
    def should_condense(self, estimated_prompt: int) -> bool: ...
    async def condense(self) -> bool: ...


async def model_step(self: StepHost) -> ModelResponse | Finish:
    chain = self.config.client.chain()
    if not chain:
        return Finish(reason=StopReason.FAILED, error="no model is configured")
    empty_retries = 0
    attempt = 0
    while True:
        if (stop := self.cancelled()) is not None:
            return stop
        request = await self.request()
        reserve = self.reserve(request.messages)
        hit = check_before_request(
            self.state, self.config.limits, active_s=self.active(), reserve=reserve
        )
        if hit is not None:
            self.emit(LimitReached(reason=hit.reason, detail=hit.detail))
            return Finish(reason=hit.reason, output=self.last_text, error=hit.detail)
        if self.should_condense(reserve - self.config.limits.max_output_tokens):
            if not await self.condense():
                if self.config.recovery.on_condense_failure() is Action.FAIL:
                    return Finish(
                        reason=StopReason.FAILED,
                        output=self.last_text,
                        error="condensing the history failed",
                    )
            continue  # rebuild the request (and re-check the limits) either way
        index = min(self.state.model_index, len(chain) - 1)
        client = chain[index]
        held: Held | None = None
        if (spend := self.config.spend) is not None:
            got = await hold(
                spend,
                self.config.pricing,
                model=client.name,
                reserve=reserve,
                max_output_tokens=self.config.limits.max_output_tokens,
            )
            if isinstance(got, SpendRefused):
                self.emit(LimitReached(reason=StopReason.LIMIT_TOKENS, detail=got.detail))
                return Finish(
                    reason=StopReason.LIMIT_TOKENS, output=self.last_text, error=got.detail
                )
            held = got
        attempt += 1
        self.state.model_calls += 1
        iteration = self.state.iterations + 1
        self.emit(ModelRequestStart(iteration=iteration, model=client.name, attempt=attempt))
        started = self.clock.monotonic()
        streamed: list[str] = []
        used = Usage()  # what the hold is settled with: none unless the call reports some
        try:
            response = await guarded(
                client.complete(request, on_delta=delta_sink(self, streamed))
                if request.stream
                else client.complete(request),
                clock=self.clock,
                deadline_in=self.deadline_in(),
                cancel=self.config.cancel,
            )
        except Aborted as exc:
            emit_end(self, iteration, client.name, started, None, error=exc.kind)
            reason = ABORT_REASON[exc.kind]
            if reason is StopReason.LIMIT_DEADLINE:
                detail = "deadline reached during a model call"
                self.emit(LimitReached(reason=reason, detail=detail))
            else:
                detail = self.cancel_reason()
            return Finish(reason=reason, output=self.last_text, error=detail)
        except RepetitionDetected:
            # The stream was cut: its usage is unknown, so count the estimate as spent.
            chars = sum(len(s) for s in streamed)
            estimate = reserve - self.config.limits.max_output_tokens + chars // 4
            used = Usage(prompt_tokens=max(estimate, 0))
            self.state.usage = self.state.usage + used
            cost = charge(self.state, self.config.pricing, client.name, used)
            emit_end(self, iteration, client.name, started, None, error="repetition", cost_usd=cost)
            response = ModelResponse()
        except ModelError as exc:
            emit_end(self, iteration, client.name, started, None, error=str(exc))
            action = self.config.recovery.on_model_error(
                exc,
                has_fallback=index + 1 < len(chain),
                can_condense=self.config.condense is not None and not self.condense_used,
            )
            match action:
                case Action.FALLBACK:
                    self.state.model_index = index + 1
                    self.state.switches.append(f"{client.name} -> {chain[index + 1].name}: {exc}")
                    self.emit(
                        ModelFallback(
                            from_model=client.name,
                            to_model=chain[index + 1].name,
                            error=str(exc),
                        )
                    )
                    attempt = 0
                    continue
                case Action.CONDENSE:
                    ok = await self.condense()
                    if not ok and self.config.recovery.on_condense_failure() is Action.FAIL:
                        return Finish(
                            reason=StopReason.FAILED, output=self.last_text, error=str(exc)
                        )
                    continue
                case _:
                    return Finish(
                        reason=StopReason.FAILED,
                        output=self.last_text,
                        error=f"{type(exc).__name__}: {exc}",
                    )
        except Exception as exc:
            emit_end(self, iteration, client.name, started, None, error=repr(exc))
            raise
        else:
            used = response.usage
            account(self.state, response)
            cost = charge(self.state, self.config.pricing, client.name, used)
            emit_end(
                self,
                iteration,
                client.name,
                started,
                response.usage,
                calls=len(response.tool_calls),
                cut=cut_off(response) and not response.tool_calls,
                response=response,
                cost_usd=cost,
            )
        finally:
            # Exactly once, on every way out of the call: an answer, a model error (before
            # the fallback's own reservation), Stop, the deadline, a repeating stream, a bug.
            if held is not None:
                await held.settle(used)
        if response.is_empty:
            if self.config.recovery.on_empty(empty_retries) is Action.RETRY:
                empty_retries += 1
                continue
            return Finish(
                reason=StopReason.NO_ACTION,
                output=self.last_text,
                error=f"the model gave no answer ({empty_retries + 1} empty responses)",
            )
        self.state.iterations += 1
        self.state.model = client.name
        return normalize(self.state, response, self.tool_names)


def delta_sink(self: StepHost, streamed: list[str]) -> DeltaSink:
    detector = [RepetitionDetector()]

    def sink(text: str) -> None:
        if not text:  # the client retries: what streamed so far is void
            streamed.clear()
            detector[0] = RepetitionDetector()
            self.emit(StreamDelta(text=""))
            return
        streamed.append(text)
        self.emit(StreamDelta(text=text))
        if detector[0].feed(text):
            raise RepetitionDetected()

    return sink


def emit_end(
    self: StepHost,
    iteration: int,
    model: str,
    started: float,
    usage: Usage | None,
    *,
    calls: int = 0,
    error: str | None = None,
    cut: bool = False,
    response: ModelResponse | None = None,
    cost_usd: float | None = None,
) -> None:
    self.emit(
        ModelRequestEnd(
            iteration=iteration,
            model=model,
            duration_s=self.clock.monotonic() - started,
            usage=usage,
            tool_calls=calls,
            error=error,
            cut_off=cut,
            response_model=response.model if response is not None else None,
            finish_reason=response.finish_reason if response is not None else None,
            cost_usd=cost_usd,
        )
    )
