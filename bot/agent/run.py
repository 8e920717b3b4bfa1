"""The agent loop: one ``run`` over one ``AgentConfig``, always returning a ``RunResult``.

Per iteration: inject → limits pre-check (with reservation) → model call (recovery:
fallback, condense, empty retries) → account usage, append the assistant message →
final answer if no tool calls → the batch of calls (``calls.py``), each result through
the loop detector → stop predicate. A confirm answering "pending" ends the run as
``awaiting_approval`` with a resumable state; ``run(config, state, decision)`` picks the
batch up where it paused.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from bot.agent.calls import CallRunner, Outcome, Paused
from bot.agent.config import AgentConfig, StopCheck
from bot.agent.events import (
    ApprovalRequested,
    CondenseDone,
    CondenseFailed,
    Event,
    InjectedMessages,
    LimitReached,
    ModelFallback,
    ModelRequestEnd,
    ModelRequestStart,
    RunEnd,
    StreamDelta,
)
from bot.agent.guard import Aborted, AbortKind, guarded
from bot.agent.limits import check_before_request, reservation
from bot.agent.messages import (
    AnyMessage,
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from bot.agent.model_failure_recovery import Action
from bot.agent.ports import Decision, DeltaSink
from bot.agent.redact import redact_secrets
from bot.agent.repeated_calls import LOOP_MESSAGE, LoopDetector, LoopVerdict
from bot.agent.responses import account, message_chars, normalize
from bot.agent.state import PendingApproval, PendingBatch, RunResult, RunState, StopReason
from bot.agent.stream_repetition import RepetitionDetected, RepetitionDetector
from bot.agent.tools import canonical_json, tool_spec
from bot.errors import HandedOver, ModelError, StoreError

log = logging.getLogger(__name__)

STALL_ITERATIONS = 5


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


_ABORT_REASON: dict[AbortKind, StopReason] = {
    "deadline": StopReason.LIMIT_DEADLINE,
    "cancel": StopReason.CANCELLED,
    "timeout": StopReason.FAILED,
}


async def run(
    config: AgentConfig, state: RunState | None = None, decision: Decision | None = None
) -> RunResult:
    """Run (or resume) one job's turn until it ends or pauses; never raises for a
    run-level failure: the result says what happened. A ``StoreError`` from a port (the
    store failed, or refused a writer that lost its lease) propagates: the run is
    abandoned as last checkpointed, to be resumed, not ended."""
    return await _Run(config, state or RunState(), decision).execute()


class _Run:
    def __init__(self, config: AgentConfig, state: RunState, decision: Decision | None) -> None:
        self.config = config
        self.state = state
        self.decision = decision
        self.clock = config.clock
        # The immutable prefix: identical in every request of the run (prompt cache).
        self.specs = tuple(tool_spec(t) for t in sorted(config.tools, key=lambda t: t.name))
        self.prefix_chars = len(config.system_prompt) + sum(
            len(s.name) + len(s.description) + len(canonical_json(s.parameters)) for s in self.specs
        )
        self.tool_names = frozenset(t.name for t in config.tools)
        self.detector = LoopDetector(state.loop_window)
        self.calls = CallRunner(config, state, emit=self.emit, deadline_in=self.deadline_in)
        self.last_text: str | None = None
        self.history_chars: int | None = None  # counted once, then kept up to date
        self.condense_used = False
        self.started = 0.0
        self.active_before = state.active_time_s

    # -- plumbing -------------------------------------------------------------

    def emit(self, event: Event) -> None:
        sink = self.config.on_event
        if sink is None:
            return
        try:
            sink(event)
        except Exception:
            log.exception("event sink failed on %s", event.kind)

    def active(self) -> float:
        return self.active_before + (self.clock.monotonic() - self.started)

    def deadline_in(self) -> float:
        return self.config.limits.deadline_s - self.active()

    def append(self, message: AnyMessage) -> None:
        self.config.memory.append(message)
        chars = message_chars(message)
        self.state.chars_since_request += chars
        if self.history_chars is not None:
            self.history_chars += chars

    async def checkpoint(self) -> None:
        """Make the step durable: history appends and, when wanted, the state."""
        self.state.active_time_s = self.active()
        if self.config.on_checkpoint is not None:
            await self.config.on_checkpoint(self.state)  # flushes memory too
        else:
            await self.config.memory.flush()

    def cancel_reason(self) -> str:
        token = self.config.cancel
        return (token.reason if token is not None else None) or "cancelled"

    def cancelled(self) -> Finish | None:
        token = self.config.cancel
        if token is not None and token.cancelled:
            return Finish(reason=StopReason.CANCELLED, output=self.last_text, error=token.reason)
        return None

    # -- the run --------------------------------------------------------------

    async def execute(self) -> RunResult:
        self.started = self.clock.monotonic()
        try:
            step: Step = Next()
            if self.state.pending is not None:
                step = await self.resume(self.state.pending)
            while isinstance(step, Next):
                step = await self.iteration()
            if step.reason is not StopReason.AWAITING_APPROVAL:
                await self.config.memory.flush()
        except StoreError:
            # The store failed (or refused a stale writer): the run is abandoned, not
            # ended. The job stays as its last checkpoint left it and is resumed from
            # there by whoever runs it next; the caller decides when.
            raise
        except Exception as exc:
            log.exception("run of job %s failed", self.config.job_id)
            step = Finish(
                reason=StopReason.FAILED,
                output=self.last_text,
                error=f"{type(exc).__name__}: {exc}",
            )
        return self.finish(step)

    def finish(self, step: Finish) -> RunResult:
        self.state.active_time_s = self.active()
        state = self.state
        result = RunResult(
            stop_reason=step.reason,
            output=step.output,
            error=step.error,
            iterations=state.iterations,
            model_calls=state.model_calls,
            tool_executions=state.tool_executions,
            usage=state.usage,
            tools_used=list(state.tools_used),
            model=state.model,
            switches=list(state.switches),
            state=state,
            approval=step.approval,
        )
        self.emit(RunEnd(result))
        return result

    async def iteration(self) -> Step:
        if (stop := self.cancelled()) is not None:
            return stop
        if self.config.hand_over is not None and self.config.hand_over():
            raise HandedOver(
                f"job {self.config.job_id} handed over after iteration {self.state.iterations}"
            )
        await self.take_injected()
        got = await self.model_step()
        if isinstance(got, Finish):
            return got
        response = got
        if response.content and response.content.strip():
            self.last_text = response.content
        if not response.tool_calls:
            self.append(AssistantMessage(content=response.content))
            await self.checkpoint()
            return await self.final(response.content)
        assistant = AssistantMessage(content=response.content, tool_calls=response.tool_calls)
        self.append(assistant)
        step = await self.batch(assistant, list(assistant.tool_calls), any_ok=False)
        if isinstance(step, Finish):
            return step
        return await self.after_step()

    async def final(self, output: str | None) -> Finish:
        if self.config.stop is not None:
            verdict = await self.config.stop(StopCheck(final=True, output=output, state=self.state))
            if verdict is not None and verdict.reason is not StopReason.COMPLETED:
                return Finish(reason=verdict.reason, output=output, error=verdict.message)
        return Finish(reason=StopReason.COMPLETED, output=output)

    async def after_step(self) -> Step:
        if self.config.stop is not None:
            check = StopCheck(final=False, output=self.last_text, state=self.state)
            verdict = await self.config.stop(check)
            if verdict is not None:
                return Finish(reason=verdict.reason, output=self.last_text, error=verdict.message)
        if self.state.error_streak >= STALL_ITERATIONS:
            return Finish(
                reason=StopReason.STALLED,
                output=self.last_text,
                error=f"every tool call failed in {self.state.error_streak} iterations in a row",
            )
        return Next()

    async def resume(self, pending: PendingBatch) -> Step:
        self.state.pending = None
        if (stop := self.cancelled()) is not None:  # Stop won the race with the decision
            self.skip(pending.remaining, stop)
            await self.checkpoint()
            return stop
        step = await self.batch(
            pending.message,
            list(pending.remaining),
            any_ok=pending.any_ok,
            decision=self.decision,
            approval=pending.approval,
        )
        if isinstance(step, Finish):
            return step
        return await self.after_step()

    # -- inject and condense --------------------------------------------------

    async def take_injected(self) -> None:
        inject = self.config.inject
        if inject is None:
            return
        items = await inject.fetch()
        if not items:
            return
        for item in items:
            # A credential pasted in the channel is not passed on to the model provider.
            said = redact_secrets(item.text)
            text = f"<@{item.author}>: {said}" if item.author else said
            self.append(UserMessage(content=text, source_id=item.id))
        await self.config.memory.flush()  # durable before anyone sees an ack
        await inject.ack(items)
        self.emit(InjectedMessages(ids=tuple(i.id for i in items)))

    async def condense(self) -> bool:
        """Condense history once per run; False (and an event) when it fails."""
        self.condense_used = True
        condense = self.config.condense
        if condense is None:
            return False
        try:
            history = await self.config.memory.history()
            chain = self.config.client.chain()
            client = chain[min(self.state.model_index, len(chain) - 1)]
            outcome = await guarded(
                condense(history, client=client, time_left=self.deadline_in()),
                clock=self.clock,
                deadline_in=self.deadline_in(),
                cancel=self.config.cancel,
            )
            upto = outcome.upto
            if not 0 < upto <= len(history):
                raise ValueError(f"summary would replace {upto} of {len(history)} messages")
            if upto < len(history) and isinstance(history[upto], ToolMessage):
                raise ValueError("summary would separate a tool call from its result")
            self.state.usage = self.state.usage + outcome.usage
            await self.config.memory.condense(upto, outcome.summary)
        except Exception as exc:
            log.warning("condensing job %s failed", self.config.job_id, exc_info=True)
            self.emit(CondenseFailed(error=f"{type(exc).__name__}: {exc}"))
            return False
        # The next reservation is recounted from the whole, smaller prompt.
        self.history_chars = None
        self.state.last_prompt_tokens = 0
        self.state.last_cached_tokens = 0
        self.state.chars_since_request = 0
        self.emit(CondenseDone(replaced=upto))
        return True

    # -- the model step -------------------------------------------------------

    async def request(self) -> ModelRequest:
        return ModelRequest(
            system=self.config.system_prompt,
            tools=self.specs,
            messages=await self.config.memory.history(),
            max_output_tokens=self.config.limits.max_output_tokens,
            stream=self.config.stream,
            time_left=self.deadline_in(),
        )

    def reserve(self, messages: Sequence[AnyMessage]) -> int:
        full = 0
        if not self.state.last_prompt_tokens:
            # No provider figure to start from (first call, after condensing, or a server
            # that reports no usage): estimate the whole prompt, counting history once.
            if self.history_chars is None:
                self.history_chars = sum(message_chars(m) for m in messages)
            full = self.prefix_chars + self.history_chars
        return reservation(self.state, self.config.limits, full_prompt_chars=full)

    def should_condense(self, estimated_prompt: int) -> bool:
        threshold = self.config.condense_at_tokens
        return (
            threshold is not None
            and self.config.condense is not None
            and not self.condense_used
            and estimated_prompt >= threshold
        )

    async def model_step(self) -> ModelResponse | Finish:
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
            attempt += 1
            self.state.model_calls += 1
            iteration = self.state.iterations + 1
            self.emit(ModelRequestStart(iteration=iteration, model=client.name, attempt=attempt))
            started = self.clock.monotonic()
            streamed: list[str] = []
            try:
                response = await guarded(
                    client.complete(request, on_delta=self.delta_sink(streamed))
                    if request.stream
                    else client.complete(request),
                    clock=self.clock,
                    deadline_in=self.deadline_in(),
                    cancel=self.config.cancel,
                )
            except Aborted as exc:
                self.emit_end(iteration, client.name, started, None, error=exc.kind)
                reason = _ABORT_REASON[exc.kind]
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
                self.state.usage = self.state.usage + Usage(prompt_tokens=max(estimate, 0))
                self.emit_end(iteration, client.name, started, None, error="repetition")
                response = ModelResponse()
            except ModelError as exc:
                self.emit_end(iteration, client.name, started, None, error=str(exc))
                action = self.config.recovery.on_model_error(
                    exc,
                    has_fallback=index + 1 < len(chain),
                    can_condense=self.config.condense is not None and not self.condense_used,
                )
                match action:
                    case Action.FALLBACK:
                        self.state.model_index = index + 1
                        self.state.switches.append(
                            f"{client.name} -> {chain[index + 1].name}: {exc}"
                        )
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
                self.emit_end(iteration, client.name, started, None, error=repr(exc))
                raise
            else:
                account(self.state, response)
                self.emit_end(
                    iteration, client.name, started, response.usage, calls=len(response.tool_calls)
                )
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

    def delta_sink(self, streamed: list[str]) -> DeltaSink:
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
        self,
        iteration: int,
        model: str,
        started: float,
        usage: Usage | None,
        *,
        calls: int = 0,
        error: str | None = None,
    ) -> None:
        self.emit(
            ModelRequestEnd(
                iteration=iteration,
                model=model,
                duration_s=self.clock.monotonic() - started,
                usage=usage,
                tool_calls=calls,
                error=error,
            )
        )

    # -- the batch of calls ---------------------------------------------------

    async def batch(
        self,
        assistant: AssistantMessage,
        calls: list[ToolCall],
        *,
        any_ok: bool,
        decision: Decision | None = None,
        approval: PendingApproval | None = None,
    ) -> Step:
        i = 0
        while i < len(calls):
            end = self.calls.parallel_group(calls, i)
            outcomes: list[Outcome]
            if end - i > 1:
                outcomes = await self.calls.run_parallel(calls[i:end])
            else:
                end = i + 1
                got = await self.calls.run_one(
                    calls[i], reason=assistant.content, decision=decision, approval=approval
                )
                decision, approval = None, None
                if isinstance(got, Paused):
                    return await self.pause(assistant, calls[i:], got.approval, any_ok)
                outcomes = [got]
            stop: Finish | None = None
            for outcome in outcomes:  # every call of the group ran: record them all
                recorded = self.record(outcome)
                stop = stop or recorded
                any_ok = any_ok or not outcome.is_error
            if stop is not None:
                self.skip(calls[end:], stop)
                await self.checkpoint()
                return stop
            i = end
        self.state.error_streak = 0 if any_ok else self.state.error_streak + 1
        await self.checkpoint()
        return Next()

    def record(self, outcome: Outcome) -> Finish | None:
        call = outcome.call
        text = outcome.text
        verdict = self.detector.observe(call.name, outcome.canonical_args, outcome.real)
        if verdict is not LoopVerdict.OK:
            count = self.detector.window.count(self.detector.window[-1])
            text = LOOP_MESSAGE.format(count=count)
        self.append(
            ToolMessage(
                tool_call_id=call.id,
                name=call.name,
                content=text,
                is_error=outcome.is_error or verdict is not LoopVerdict.OK,
                confirmed_by=outcome.confirmed_by,
                artifact=outcome.artifact,
            )
        )
        if outcome.abort is not None:
            reason = _ABORT_REASON[outcome.abort]
            detail = (
                "deadline reached during a tool call"
                if reason is StopReason.LIMIT_DEADLINE
                else self.cancel_reason()
            )
            if reason is StopReason.LIMIT_DEADLINE:
                self.emit(LimitReached(reason=reason, detail=detail))
            return Finish(reason=reason, output=self.last_text, error=detail)
        if verdict is LoopVerdict.STOP:
            return Finish(
                reason=StopReason.LOOP,
                output=self.last_text,
                error=f"the same call to {call.name} kept returning the same result",
            )
        if (stop := self.cancelled()) is not None:
            return stop
        return None

    def skip(self, calls: Sequence[ToolCall], stop: Finish) -> None:
        """Answer calls that will not run, so the history stays well-formed."""
        for call in calls:
            self.append(
                ToolMessage(
                    tool_call_id=call.id,
                    name=call.name,
                    content=f"Error: not run: the job stopped ({stop.reason.value})",
                    is_error=True,
                )
            )

    async def pause(
        self,
        assistant: AssistantMessage,
        remaining: list[ToolCall],
        approval: PendingApproval,
        any_ok: bool,
    ) -> Finish:
        self.state.pending = PendingBatch(
            message=assistant, remaining=remaining, approval=approval, any_ok=any_ok
        )
        await self.checkpoint()
        self.emit(ApprovalRequested(approval=approval))
        return Finish(reason=StopReason.AWAITING_APPROVAL, output=self.last_text, approval=approval)
