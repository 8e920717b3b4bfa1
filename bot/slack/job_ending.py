"""A job's ending from its record and its run's result: the status message's last form.

``ending_for`` gives the Block Kit builder (``bot.slack.status_blocks.ending_message``) what
the record and the result say: the stop reason code, the counters against the job's limits,
its active time, what its model calls cost (beside its tokens, when any was priced), who
pressed Stop, a Continue button for a job stopped by a limit (``continue_step``: what it
adds, the limit's original value in the unit the button names) and the "Full output"
buttons of calls whose output the model saw cut (``bot.slack.outputs``). Both the process
that ran the job (``bot.slack.progress``) and the scanner's redelivery
(``bot.slack.redelivery``) show it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bot.agent.ports import WORKSPACE_CAP
from bot.agent.state import RunResult, StopReason
from bot.otel.meta import trace_id_of
from bot.records import JobRecord
from bot.slack.blockkit import Message
from bot.slack.outputs import with_output_buttons
from bot.slack.status_blocks import ToolLine, ending_message

LIMIT_WORDS = {
    StopReason.LIMIT_ITERATIONS: "iterations",
    StopReason.LIMIT_TOKENS: "tokens",
    StopReason.LIMIT_DEADLINE: "minutes",
}
_STOPPED_BY = re.compile(r"stopped by <@([UW][A-Z0-9]+)>")
_RAISED = {
    StopReason.LIMIT_ITERATIONS: ("iterations", "max_iterations", 1.0),
    StopReason.LIMIT_TOKENS: ("tokens", "token_budget", 1.0),
    StopReason.LIMIT_DEADLINE: ("deadline", "deadline_s", 60.0),  # shown in minutes
}


def stopper(result: RunResult) -> str | None:
    """Who pressed Stop, from a cancelled run's reason (``stopped by <@U…>``)."""
    if result.stop_reason is not StopReason.CANCELLED or not result.error:
        return None
    found = _STOPPED_BY.fullmatch(result.error)
    return found.group(1) if found else None


def continue_step(record: JobRecord, reason: StopReason) -> float | None:
    """What ``Continue`` adds to the limit that stopped the job: its original value
    (before any raise), in the unit the button names."""
    if reason not in _RAISED:
        return None
    name, field, unit = _RAISED[reason]
    current = float(getattr(record.limits, field))
    original = current - sum(r.amount for r in record.raises if r.limit == name)
    return round(original / unit, 1) if original > 0 else None


def continue_label(result: RunResult, step: float | None) -> str | None:
    """The Continue button's words: what it adds, or that it raises the workspace's
    daily cap for today (only an approver's click does)."""
    if result.stop_reason is StopReason.LIMIT_TOKENS and WORKSPACE_CAP in (result.error or ""):
        return "Continue (raise today's cap)"
    return f"Continue (+{step:g} {LIMIT_WORDS[result.stop_reason]})" if step else None


def ending_for(
    record: JobRecord,
    result: RunResult,
    *,
    tools: Sequence[ToolLine] = (),
    cut: Sequence[tuple[str, str]] = (),
) -> Message:
    """The status message's last form: how the job ended (``ending_message``), with its
    Continue button and the "Full output" buttons of ``cut`` calls."""
    limits = record.limits
    step = continue_step(record, result.stop_reason)
    ending = ending_message(
        result.stop_reason,
        job_id=record.id,
        iterations=result.iterations,
        max_iterations=limits.max_iterations,
        tokens=result.usage.paid,
        token_budget=limits.token_budget,
        tools_run=result.tool_executions,
        error=result.error,
        by=stopper(result),
        continue_label=continue_label(result, step),
        continue_seq=len(record.raises),
        active_s=result.state.active_time_s,
        deadline_s=limits.deadline_s,
        tools=tools,
        trace_id=trace_id_of(record),
        cost_usd=result.cost_usd,
        unpriced_calls=result.unpriced_calls,
    )
    return with_output_buttons(ending, record.id, cut)
