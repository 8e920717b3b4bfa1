"""The agent loop: one ``run`` over one ``AgentConfig``, always returning a ``RunResult``.

Per iteration: save the previous step and fetch injects → limits pre-check (with
reservation) → model call (recovery: fallback, condense, empty retries) → account usage,
append the assistant message → final answer if no tool calls → save the response, its
usage and the iteration with the batch as ``pending`` → the batch of calls
(``calls.py``), each result through the loop detector → stop predicate. Two saves per
iteration, so two store round trips when the store saves and fetches in one
(``AgentConfig.on_checkpoint_and_fetch``). A confirm answering "pending" ends the run as
``awaiting_approval`` with a resumable state; ``run(config, state, decision)`` picks the
batch up where it paused, and ``run(config, state)`` one that a crash interrupted (its
``pending`` has no approval: the calls without a result run, a write the ledger already
holds is answered from it).

An answer without tool calls that was cut off at the output limit is not final: the
model is asked (a ``user`` message) to go on from where it stopped, and the final answer
is the parts joined as written, without a separator (a cut falls mid-sentence, even
mid-word). Each continuation is an iteration like any other, so the job's limits bound
them. The final answer then goes to the stop predicate, which may end the job
``incomplete`` or ask the model once more (``AskAgain``; see ``work_done.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from bot.agent.calls import CallRunner, Outcome, Paused
from bot.agent.config import AgentConfig, AskAgain, StopCheck, StopVerdict
from bot.agent.cost import charge
from bot.agent.events import (
    ApprovalRequested,
    CondenseDone,
    CondenseFailed,
    Event,
    InjectedMessages,
    LimitReached,
    RunEnd,
)
from bot.agent.guard import guarded
from bot.agent.limits import reservation
from bot.agent.messages import (
    AnyMessage,
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from bot.agent.model_step import ABORT_REASON, Finish, Next, Step, model_step
from bot.agent.ports import Decision, Injected
from bot.agent.redact import redact_secrets
from bot.agent.repeated_calls import LOOP_MESSAGE, LoopDetector, LoopVerdict
from bot.agent.reply_order import decided_call, with_order
from bot.agent.responses import cut_off, message_chars
from bot.agent.state import (
    DecidedCall,
    PendingApproval,
    PendingBatch,
    RunResult,
    RunState,
    StopReason,
)
from bot.agent.tools import canonical_json, tool_spec
from bot.agent.work_done import note_call
from bot.errors import HandedOver, StoreError

log = logging.getLogger(__name__)

STALL_ITERATIONS = 5
CONTINUE_MESSAGE = (
    "Your answer was cut off at the output limit. Continue it exactly where it stopped, "
    "without repeating anything you already wrote."
)


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
        self.condense_used = state.condensed  # once per job: a resumed run does not again
        self.started = 0.0
        self.active_before = state.active_time_s
        # The step that ended the last iteration is not saved yet: the next iteration
        # saves it, with its inject fetch when the store can do both in one round trip.
        self.unsaved = False
        # The summary a history starts with, and the same summary with the job's facts.
        self.with_facts: tuple[AnyMessage, UserMessage] | None = None

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
            if self.unsaved:
                await self.checkpoint()
            elif step.reason is not StopReason.AWAITING_APPROVAL:
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
        result = RunResult.of(
            self.state, step.reason, output=step.output, error=step.error, approval=step.approval
        )
        self.emit(RunEnd(result))
        return result

    async def iteration(self) -> Step:
        if (stop := self.cancelled()) is not None:
            return stop  # ``execute`` saves the previous step
        if self.config.hand_over is not None and self.config.hand_over():
            await self.save()
            raise HandedOver(
                f"job {self.config.job_id} handed over after iteration {self.state.iterations}"
            )
        items = await self.save_and_fetch()
        decided, self.state.decided = self.state.decided, None  # one fetch after a resume
        if (stop := self.cancelled()) is not None:
            # The save heard a Stop. Replies fetched with it stay unacknowledged: the
            # job's end finds them pending and a follow-up job takes them in.
            return stop
        await self.take_injected(items, decided)
        got = await self.model_step()
        if isinstance(got, Finish):
            return got
        response = got
        if not response.tool_calls:
            self.append(AssistantMessage(content=response.content))
            return await self.answered(response)
        self.state.answer_so_far = None  # the text before the calls was a note, not an answer
        if response.content and response.content.strip():
            self.last_text = response.content
        assistant = AssistantMessage(content=response.content, tool_calls=response.tool_calls)
        self.append(assistant)
        # Before any tool runs, the response, its usage and the iteration are saved, with
        # the batch as the calls still to run: a crash during a tool resumes the batch
        # (the ledger answers a write that already ran) instead of asking the model again
        # without counting this call.
        self.state.pending = PendingBatch(message=assistant, remaining=list(assistant.tool_calls))
        await self.checkpoint()
        step = await self.batch(assistant, list(assistant.tool_calls), any_ok=False)
        if isinstance(step, Finish):
            return step
        return await self.after_step()

    async def answered(self, response: ModelResponse) -> Step:
        """A response without tool calls: the rest asked for when it was cut off, else
        the final answer (the parts so far and this one), judged by the stop predicate."""
        answer = (self.state.answer_so_far or "") + (response.content or "")
        if answer.strip():
            self.last_text = answer
        if cut_off(response):
            self.state.answer_so_far = answer
            self.append(UserMessage(content=CONTINUE_MESSAGE))
            self.unsaved = True
            return await self.after_step()
        self.state.answer_so_far = None
        verdict = await self.judge(final=True, output=answer)
        if isinstance(verdict, AskAgain):
            return await self.ask(verdict)
        await self.checkpoint()
        if verdict is None:
            return Finish(reason=StopReason.COMPLETED, output=answer)
        shown = answer if verdict.output is None else verdict.output
        done = verdict.reason is StopReason.COMPLETED
        return Finish(reason=verdict.reason, output=shown, error=None if done else verdict.message)

    async def judge(self, *, final: bool, output: str | None) -> StopVerdict | AskAgain | None:
        if self.config.stop is None:
            return None
        return await self.config.stop(StopCheck(final=final, output=output, state=self.state))

    async def ask(self, verdict: AskAgain) -> Next:
        """The predicate's question enters the history; the model is called again."""
        self.state.asked.append(verdict.key)
        self.append(UserMessage(content=verdict.message))
        self.unsaved = True
        return Next()

    async def after_step(self) -> Step:
        verdict = await self.judge(final=False, output=self.last_text)
        if isinstance(verdict, AskAgain):
            return await self.ask(verdict)
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
        """Go on with a batch: one paused for a decision, or one a crash interrupted
        (saved before its tools ran; ``remaining`` are the calls without a result)."""
        if (stop := self.cancelled()) is not None:  # Stop won the race with the decision
            self.state.pending = None
            self.skip(pending.remaining, stop)
            await self.checkpoint()
            return stop
        if pending.approval is not None:
            # The replies taken in at the next fetch are told in their true order
            # against this decision (``reply_order``); saved with the batch's checkpoint.
            self.state.decided = decided_call(pending.approval.tool, self.decision)
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

    async def save(self) -> None:
        """Save the step that ended the last iteration, if it is not saved yet."""
        if self.unsaved:
            self.unsaved = False
            await self.checkpoint()

    async def save_and_fetch(self) -> Sequence[Injected]:
        """``save`` and the inject fetch, in one round trip when the store offers it."""
        inject = self.config.inject
        both = self.config.on_checkpoint_and_fetch
        if inject is not None and both is not None and self.unsaved:
            self.unsaved = False
            self.state.active_time_s = self.active()
            return await both(self.state)
        await self.save()
        return await inject.fetch() if inject is not None else ()

    async def take_injected(
        self, items: Sequence[Injected], decided: DecidedCall | None = None
    ) -> None:
        inject = self.config.inject
        if inject is None or not items:
            return
        # A person spoke: what the model says next answers them, not the rest of a cut answer.
        self.state.answer_so_far = None
        for item in items:
            # A credential pasted in the channel is not passed on to the model provider.
            said = redact_secrets(item.text)
            text = f"<@{item.author}>: {said}" if item.author else said
            text = with_order(text, item, decided)
            self.append(UserMessage(content=text, source_id=item.id))
        if (both := self.config.on_flush_and_ack) is not None:
            await both(items)  # durable before anyone sees an ack, in one round trip
        else:
            await self.config.memory.flush()  # durable before anyone sees an ack
            await inject.ack(items)
        self.emit(InjectedMessages(ids=tuple(i.id for i in items)))

    async def condense(self) -> bool:
        """Condense history once per job (``RunState.condensed``, saved with the job);
        False (and an event) when it fails."""
        self.condense_used = self.state.condensed = True
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
            if outcome.usage.paid:  # the summary's own model call, priced like any other
                charge(self.state, self.config.pricing, client.name, outcome.usage)
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
            messages=await self.messages(),
            max_output_tokens=self.config.limits.max_output_tokens,
            stream=self.config.stream,
            time_left=self.deadline_in(),
        )

    async def messages(self) -> Sequence[AnyMessage]:
        """The history to send: a leading summary followed by the job's facts."""
        history = await self.config.memory.history()
        facts = self.config.facts
        if facts is None or not history:
            return history
        summary = history[0]
        if not isinstance(summary, UserMessage) or not summary.summary:
            return history
        if self.with_facts is None or self.with_facts[0] is not summary:
            # Read once per summary: at this run's first request, and after condensing.
            text = await facts()
            content = f"{summary.content}\n\n{text}" if text else summary.content
            self.with_facts = (summary, summary.model_copy(update={"content": content}))
        return [self.with_facts[1], *history[1:]]

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
        return await model_step(self)

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
                self.state.pending = None
                self.skip(calls[end:], stop)
                await self.checkpoint()
                return stop
            i = end
        self.state.pending = None
        self.state.error_streak = 0 if any_ok else self.state.error_streak + 1
        self.unsaved = True  # saved by the next iteration's fetch, or at the run's end
        return Next()

    def record(self, outcome: Outcome) -> Finish | None:
        call = outcome.call
        text = outcome.text
        ok = not outcome.is_error and outcome.abort is None
        note_call(self.state, self.calls.tool(call.name), ok=ok)
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
            reason = ABORT_REASON[outcome.abort]
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
