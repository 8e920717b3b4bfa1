"""Executing one assistant message's tool calls.

Per call, in order: allowlist → argument validation → confirm (dry run first for
destructive tools) → ledger → execute under timeout/deadline/cancel → bound the output.
A call stored well-formed in place of what the model wrote (``ToolCall.malformed``,
see ``responses.py``) is refused at the first two steps, never run with ``{}``.
Only ``read_only`` + ``parallel`` tools run concurrently (consecutive ones, under a
semaphore); everything else runs alone, in call order. Results keep the call order.
Every failure becomes an ``Error: …`` observation; nothing here raises into the loop
except the store's own failures (memory, artifacts, ledger, confirm). A ledger that
could not make its claim count (``NotClaimed``) means the call did not start: its
result says it was not run, never "outcome unknown".
An approved call's outcome (run, or answered by the ledger) carries its approver as
``confirmed_by``; the tool receives it, and the history writes it into the call's stored
arguments in place of whatever the model put there (``memory.record_approver``).
An approval with edits (``Approved.arguments``) runs the call with the approver's
arguments, validated again here, and its result starts with what changed
(``approved with edits by <@U1>: replicas 5 → 3``, ``bot.agent.edits``).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ValidationError

from bot.agent.config import AgentConfig
from bot.agent.edits import edit_note
from bot.agent.events import Event, ToolEnd, ToolProgress, ToolStart
from bot.agent.guard import Aborted, AbortKind, guarded
from bot.agent.messages import ToolCall, parse_arguments
from bot.agent.observe import (
    ERROR_PREFIX,
    READ_ARTIFACT,
    summary_line,
    to_text,
    truncation_note,
)
from bot.agent.ports import Approved, ConfirmRequest, Decision, Denied, Pending
from bot.agent.redact import redact_secrets, redact_secrets_in_turns
from bot.agent.state import PendingApproval, RunState
from bot.agent.tools import (
    CONFIRMED_BY,
    CallContext,
    Previewable,
    Tool,
    canonical_json,
    has_dry_run,
    needs_confirm,
    runs_in_parallel,
)
from bot.errors import NotClaimed, ToolError

log = logging.getLogger(__name__)

MAX_ARGUMENT_CHARS = 100_000
PREVIEW_TIMEOUT_S = 3.0  # a preview that asks its backend (Previewable)
APPROVER = "<approver>"  # ``confirmed_by`` in a preview, before anyone approved
MAX_ERROR_DETAILS = 10
PROGRESS_SCAN_CHARS = 1000  # of a progress message, read before it is cut to one line


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """One call's result: what the model sees and what the loop detector hashes."""

    call: ToolCall
    text: str  # bounded, for the model
    real: str  # the tool's real output (the loop detector hashes this)
    is_error: bool
    canonical_args: str
    confirmed_by: str | None = None
    artifact: str | None = None
    abort: AbortKind | None = None  # the run must end after recording this


@dataclass(frozen=True, slots=True, kw_only=True)
class Paused:
    """The call awaits a human decision."""

    approval: PendingApproval


NOT_A_TOOL_NAME = "not a valid tool name (1 to 64 letters, digits, '_' or '-')"


def _display(name: str) -> str:
    return repr(name[:64] + ("…" if len(name) > 64 else ""))


def args_hash(canonical_args: str) -> str:
    return hashlib.sha256(canonical_args.encode("utf-8", "surrogatepass")).hexdigest()


def _validation_details(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:MAX_ERROR_DETAILS]:
        loc = ".".join(str(p) for p in item["loc"]) or "(arguments)"
        parts.append(f"{loc}: {item['msg']}")
    more = error.error_count() - MAX_ERROR_DETAILS
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


class CallRunner:
    """Runs calls for one run; shares the run's state, clock, cancel and event sink."""

    def __init__(
        self,
        config: AgentConfig,
        state: RunState,
        *,
        emit: Callable[[Event], None],
        deadline_in: Callable[[], float],
    ) -> None:
        self._config = config
        self._state = state
        self._emit = emit
        self._deadline_in = deadline_in
        self._tools: dict[str, Tool] = {t.name: t for t in config.tools}
        self._semaphore = asyncio.Semaphore(max(1, config.max_parallel))

    def tool(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def _available(self) -> str:
        return ", ".join(sorted(self._tools)) or "none"

    def parallel_group(self, calls: Sequence[ToolCall], start: int) -> int:
        """End index of the run of parallel-safe calls beginning at ``start``."""
        end = start
        while end < len(calls):
            tool = self._tools.get(calls[end].name)
            if tool is None or calls[end].malformed is not None or not runs_in_parallel(tool):
                break
            end += 1
        return end

    async def run_parallel(self, calls: Sequence[ToolCall]) -> list[Outcome]:
        async def one(call: ToolCall) -> Outcome:
            async with self._semaphore:
                result = await self.run_one(call, reason=None)
            assert isinstance(result, Outcome)  # read-only calls never pause
            return result

        return list(await asyncio.gather(*(one(c) for c in calls)))

    def _refused(
        self,
        call: ToolCall,
        text: str,
        canonical_args: str = "",
        *,
        is_error: bool = True,
        confirmed_by: str | None = None,
    ) -> Outcome:
        """A call answered without running the tool (unknown, invalid, declined, replayed;
        ``confirmed_by`` when it was approved: a replay the ledger answered)."""
        self._emit(
            ToolEnd(
                call_id=call.id,
                tool=call.name,
                ran=False,
                is_error=is_error,
                duration_s=0.0,
                output_chars=len(text),
                confirmed_by=confirmed_by,
                # Why it did not run, in one line ("Error: declined: denied by <@U…>",
                # "… approval expired"): the resumed run's task card says it.
                summary=" ".join(text.split())[:200],
            )
        )
        return Outcome(
            call=call,
            text=text,
            real=text,
            is_error=is_error,
            canonical_args=canonical_args,
            confirmed_by=confirmed_by,
        )

    def _validate(self, tool: Tool, call: ToolCall) -> tuple[BaseModel, str] | str:
        invalid = f"Error: invalid arguments for tool {_display(tool.name)}: "
        if call.malformed is not None and call.malformed.error is not None:
            return invalid + call.malformed.error  # stored as {}, not as the model wrote it
        raw = call.arguments.strip() if call.arguments else ""
        if len(raw) > MAX_ARGUMENT_CHARS:
            return invalid + f"{len(raw)} chars is more than the {MAX_ARGUMENT_CHARS} allowed"
        value: dict[str, Any] | str = parse_arguments(raw)
        if isinstance(value, str):
            return invalid + value
        value.pop(CONFIRMED_BY, None)  # only a human decision may set it
        field = tool.args_model.model_fields.get(CONFIRMED_BY)
        if field is not None and field.is_required():
            # Filled from the decision before the call runs (empty during a dry run).
            value[CONFIRMED_BY] = ""
        try:
            model = tool.args_model.model_validate(value)
        except ValidationError as exc:
            return (
                f"Error: invalid arguments for tool {_display(tool.name)}: "
                f"{_validation_details(exc)}"
            )
        dumped = model.model_dump(mode="json", exclude={CONFIRMED_BY})
        return model, canonical_json(dumped)

    async def run_one(
        self,
        call: ToolCall,
        *,
        reason: str | None,
        decision: Decision | None = None,
        approval: PendingApproval | None = None,
    ) -> Outcome | Paused:
        """Run one call; ``decision``/``approval`` come from a resumed pause."""
        if call.malformed is not None and call.malformed.name is not None:
            # Stored under a placeholder; the model is told about the name it wrote.
            return self._refused(
                call,
                f"Error: unknown tool {_display(call.malformed.name)}: {NOT_A_TOOL_NAME}; "
                f"available tools: {self._available()}",
            )
        tool = self._tools.get(call.name)
        if tool is None:
            return self._refused(
                call,
                f"Error: unknown tool {_display(call.name)}; available tools: {self._available()}",
            )
        checked = self._validate(tool, call)
        if isinstance(checked, str):
            return self._refused(call, checked)
        model, canonical = checked
        if not needs_confirm(tool):
            return await self._execute(tool, model, call, canonical, confirmed_by=None)
        return await self._confirmed(tool, model, call, canonical, reason, decision, approval)

    async def _confirmed(
        self,
        tool: Tool,
        model: BaseModel,
        call: ToolCall,
        canonical: str,
        reason: str | None,
        decision: Decision | None,
        approval: PendingApproval | None,
    ) -> Outcome | Paused:
        digest = args_hash(canonical)
        if approval is not None and (approval.tool != tool.name or approval.args_hash != digest):
            approval, decision = None, None  # a different call: ask afresh
        dry_run_output = approval.dry_run_output if approval is not None else None
        if tool.category == "destructive" and approval is None and has_dry_run(tool):
            dry = await self._execute(tool, model, call, canonical, confirmed_by=None, dry_run=True)
            if dry.abort is not None:
                return dry
            if dry.is_error:
                return self._refused(
                    call, f"Error: dry run failed, not asking for approval: {dry.text}", canonical
                )
            dry_run_output = dry.text
        arguments: dict[str, object] = json.loads(canonical)
        if decision is None:
            if self._config.confirm is None:
                return self._refused(
                    call,
                    "Error: declined: this tool changes things and needs an approval, "
                    "but no one can approve in this context",
                    canonical,
                )
            decision = await self._config.confirm(
                ConfirmRequest(
                    job_id=self._config.job_id,
                    call_id=call.id,
                    tool=tool.name,
                    category="destructive" if tool.category == "destructive" else "mutating",
                    arguments=arguments,
                    args_hash=digest,
                    reason=reason,
                    dry_run_output=dry_run_output,
                    preview=await self._preview(tool, model, call),
                )
            )
        match decision:
            case Pending():
                return Paused(
                    approval=PendingApproval(
                        call_id=call.id,
                        tool=tool.name,
                        args_hash=digest,
                        arguments=arguments,
                        dry_run_output=dry_run_output,
                    )
                )
            case Denied(reason=why):
                return self._refused(call, f"Error: declined: {why}", canonical)
            case Approved(
                confirmed_by=who, tool=bound_tool, args_hash=bound_hash, arguments=edited
            ):
                if (bound_tool is not None and bound_tool != tool.name) or (
                    bound_hash is not None and bound_hash != digest
                ):
                    return self._refused(
                        call, "Error: declined: the approval was for a different call", canonical
                    )
                if not who:
                    return self._refused(call, "Error: declined: approval without an approver")
                if edited is not None:
                    return await self._edited(tool, call, canonical, who, edited)
                return await self._ledgered(tool, model, call, canonical, digest, who)

    async def _edited(
        self, tool: Tool, call: ToolCall, canonical: str, who: str, edited: dict[str, object]
    ) -> Outcome:
        """The call as its approver edited it: validated again by the tool's model, run
        once with the edited arguments, its result starting with the edit
        (``bot.agent.edits``)."""
        edited_call = call.model_copy(update={"arguments": json.dumps(edited), "malformed": None})
        checked = self._validate(tool, edited_call)
        if isinstance(checked, str):
            why = checked.removeprefix("Error: ")
            return self._refused(
                call, f"Error: declined: the edited call is not valid: {why}", canonical
            )
        model, edited_canonical = checked
        proposed: dict[str, object] = json.loads(canonical)
        if edited_canonical == canonical:
            return await self._ledgered(tool, model, call, canonical, args_hash(canonical), who)
        note = edit_note(who, proposed, json.loads(edited_canonical))
        return await self._ledgered(
            tool,
            model,
            call,
            edited_canonical,
            args_hash(edited_canonical),
            who,
            note=note,
            proposed=proposed,
        )

    async def _preview(self, tool: Tool, model: BaseModel, call: ToolCall) -> str | None:
        """What the call will run, as its tool tells it (``confirmed_by`` not known yet);
        one that asks its backend is bounded by ``PREVIEW_TIMEOUT_S`` and the deadline."""
        if not isinstance(tool, Previewable):
            return None
        ctx = CallContext(job_id=self._config.job_id, call_id=call.id, confirmed_by=APPROVER)
        try:
            got = tool.preview(model, ctx)
            if inspect.isawaitable(got):
                got = await guarded(
                    got,
                    clock=self._config.clock,
                    deadline_in=self._deadline_in(),
                    time_limit=PREVIEW_TIMEOUT_S,
                    cancel=self._config.cancel,
                )
            return got
        except Exception:  # a preview is a courtesy: the card goes out without it (Aborted too)
            log.warning("tool %s: no preview", tool.name, exc_info=True)
            return None

    async def _ledgered(
        self,
        tool: Tool,
        model: BaseModel,
        call: ToolCall,
        canonical: str,
        digest: str,
        who: str,
        *,
        note: str | None = None,
        proposed: dict[str, object] | None = None,
    ) -> Outcome:
        """Claim the call in the ledger, run it, record its output. ``note``: the line an
        edited call's result starts with (``proposed``: the arguments the model wrote)."""
        lead = f"{note}\n" if note else ""
        ledger = self._config.ledger
        key = f"{self._config.job_id}:{call.id}"
        if ledger is not None:
            try:
                prior = await ledger.begin(key, tool.name, digest)
            except NotClaimed as why:
                # The claim was never acknowledged, so the call did not start: it is not
                # run, and the model is told so (never "outcome unknown").
                return self._refused(call, f"Error: not run: {why}", canonical, confirmed_by=who)
            if prior is not None:
                if prior.state == "done" and prior.output is not None:
                    return self._refused(
                        call,
                        f"{lead}(already executed; recorded result)\n{prior.output}",
                        canonical,
                        is_error=prior.output.startswith(ERROR_PREFIX),
                        confirmed_by=who,
                    )
                return self._refused(
                    call,
                    "Error: outcome unknown: this call was started before an interruption and "
                    "its result was never recorded; check the system before trying again",
                    canonical,
                    confirmed_by=who,
                )
        outcome = await self._execute(
            tool, model, call, canonical, confirmed_by=who, proposed=proposed
        )
        if ledger is not None:
            await ledger.finish(key, outcome.real)
        if lead:
            outcome = replace(outcome, text=lead + outcome.text, real=lead + outcome.real)
        return outcome

    async def _execute(
        self,
        tool: Tool,
        model: BaseModel,
        call: ToolCall,
        canonical: str,
        *,
        confirmed_by: str | None,
        dry_run: bool = False,
        proposed: dict[str, object] | None = None,
    ) -> Outcome:
        if confirmed_by is not None and CONFIRMED_BY in type(model).model_fields:
            model = model.model_copy(update={CONFIRMED_BY: confirmed_by})

        def progress(message: str) -> None:
            # A tool's own words (an MCP server's): one line, bounded, scrubbed.
            line = summary_line(redact_secrets(to_text(message[:PROGRESS_SCAN_CHARS])))
            if line:
                self._emit(ToolProgress(call_id=call.id, tool=tool.name, message=line))

        ctx = CallContext(
            job_id=self._config.job_id,
            call_id=call.id,
            confirmed_by=confirmed_by,
            dry_run=dry_run,
            progress=progress,
        )
        interruptible = tool.category == "read_only" or dry_run
        token = self._config.cancel
        if interruptible and token is not None and token.cancelled:
            # Stopped while this call waited for its turn: it never starts.
            stopped = "Error: not run: the job was stopped"
            return replace(self._refused(call, stopped, canonical), abort="cancel")
        shown_args: dict[str, object] = json.loads(canonical)
        if confirmed_by is not None:
            shown_args[CONFIRMED_BY] = confirmed_by
        self._emit(
            ToolStart(
                call_id=call.id,
                tool=tool.name,
                arguments=shown_args,
                dry_run=dry_run,
                proposed=proposed,
            )
        )
        clock = self._config.clock
        started = clock.monotonic()
        # Stop and the deadline interrupt reads; a write is let finish (bounded by its timeout).
        abort: AbortKind | None = None
        try:
            raw = await guarded(
                tool.execute(model, ctx),
                clock=clock,
                deadline_in=self._deadline_in() if interruptible else None,
                time_limit=tool.timeout,
                cancel=token if interruptible else None,
            )
            text = to_text(raw)
        except Aborted as exc:
            if exc.kind == "timeout":
                text = f"Error: timed out after {tool.timeout:g}s"
            else:
                abort = exc.kind
                text = "Error: interrupted: " + (
                    "the job was stopped" if exc.kind == "cancel" else "the job's deadline passed"
                )
        except ToolError as exc:
            text = f"Error: {to_text(str(exc))}"
        except Exception as exc:
            log.warning("tool %s raised", tool.name, exc_info=True)
            text = f"Error: {type(exc).__name__}: {to_text(str(exc))}"
        duration = clock.monotonic() - started
        text = await redact_secrets_in_turns(text)  # before anything keeps or shows it
        is_error = text.startswith(ERROR_PREFIX)
        if not dry_run:
            self._state.tool_executions += 1
            if tool.name not in self._state.tools_used:
                self._state.tools_used.append(tool.name)
        shown, artifact = text, None
        if len(text) > tool.output_bound:
            artifact = await self._config.artifacts.put(self._config.job_id, call.id, text)
            readable = READ_ARTIFACT in self._tools  # the note names it only if offered
            note = truncation_note(text, tool.output_bound, artifact, readable=readable)
            shown = text[: max(tool.output_bound, 0)] + note
        self._emit(
            ToolEnd(
                call_id=call.id,
                tool=tool.name,
                ran=True,
                is_error=is_error,
                duration_s=duration,
                output_chars=len(text),
                dry_run=dry_run,
                confirmed_by=confirmed_by,
                summary=summary_line(text),
            )
        )
        return Outcome(
            call=call,
            text=shown,
            real=text,
            is_error=is_error,
            canonical_args=canonical,
            confirmed_by=confirmed_by,
            artifact=artifact,
            abort=abort,
        )
