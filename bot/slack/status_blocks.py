"""Block Kit messages from our state: the live status message and endings.

Every builder is a pure function of our state returning a :class:`~bot.slack.blockkit.Message`:
the plain ``text`` (always set — notifications and the fallback) and the ``blocks``. Text from
people, the model or tools that lands in a ``mrkdwn`` field or in ``text`` is escaped, so it
can never form a mention (``<!channel>``, ``<@U…>``) or a link. The action and block ids of
the buttons the bot shows are defined here; approval cards are built in ``bot.slack.cards``.

The parts these are made of (Slack's limits, ``Message``, escaping, block constructors,
``validate``) are in ``bot.slack.blockkit``; the model's answer, split into messages, is in
``bot.slack.answers``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from bot.agent.ports import WORKSPACE_CAP
from bot.agent.run import STALL_ITERATIONS
from bot.agent.state import StopReason
from bot.alerts.text import REQUESTER as ALERT_REQUESTER
from bot.llm.prices import cost_text
from bot.slack.blockkit import (
    Block,
    Message,
    actions_block,
    button_element,
    context_block,
    duration,
    escaped,
    mention,
    one_line,
    plural,
    section_block,
)

ACTION_STOP = "opsloop_stop"
ACTION_CONTINUE = "opsloop_continue"
ACTION_APPROVE = "opsloop_approve"
ACTION_DENY = "opsloop_deny"
STATUS_ACTIONS_BLOCK = "opsloop_status_actions"
ENDING_ACTIONS_BLOCK = "opsloop_ending_actions"

MAX_TOOL_LINES = 8  # finished tools shown on the status message (the latest ones)
TOOL_RESULT_CHARS = 150
ERROR_CHARS = 500


# -- status --------------------------------------------------------------------------------


class ToolLine(NamedTuple):
    """A finished tool call on the status message."""

    tool: str
    result: str  # one line; longer text is cut
    ok: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """What the live status message shows."""

    job_id: str
    iteration: int
    max_iterations: int
    tokens_used: int
    token_budget: int
    active_s: float
    model: str | None = None
    current_tool: str | None = None
    current_note: str | None = None  # the running tool's latest progress, one line
    finished: Sequence[ToolLine] = ()
    stopping: bool = False
    awaiting: str | None = None  # the tool whose approval card is pending
    handed_over: bool = False  # this process let the job go: another resumes it
    # Named only when no person asked (an alert started the job): a person's request is
    # the message right above the status in the thread.
    requester: str | None = None


def status_message(progress: Progress, *, final: bool = False, stop_button: bool = True) -> Message:
    """The status message: counters, tools, and a ``Stop`` button while running (unless
    ``stop_button`` is off); "requested by Alertmanager" for a job an alert started."""
    p = progress
    state = "Finished" if final else ("Stopping…" if p.stopping else "Working")
    if p.awaiting and not final and not p.stopping:
        state = "Waiting for approval"
    if p.handed_over and not final:
        state = "Resuming…"
    stats = (
        f"iteration {p.iteration}/{p.max_iterations} · "
        f"{p.tokens_used:,}/{p.token_budget:,} tokens · {duration(p.active_s)}"
    )
    context = [f"*{state}* · {stats}"]
    if p.model:
        context.append(f"`{escaped(p.model, 200)}`")
    if p.requester == ALERT_REQUESTER:
        context.append(f"requested by {mention(p.requester)}")
    blocks: list[Block] = [context_block(*context)]
    lines = tool_lines(p.finished)
    running = p.current_tool if not final else None
    if running:
        note = f" {escaped(one_line(p.current_note), TOOL_RESULT_CHARS)}" if p.current_note else ""
        lines.append(f":hourglass_flowing_sand: `{escaped(running, 80)}` running…{note}")
    if p.awaiting and not final:
        lines.append(f":raised_hand: `{escaped(p.awaiting, 80)}` needs an approval: see the card")
    if p.handed_over and not final:
        lines.append(":arrows_counterclockwise: this process stopped; the job resumes where it was")
    if lines:
        blocks.append(section_block("\n".join(lines)))
    if stop_button and not final and not p.stopping:
        blocks.append(
            actions_block(STATUS_ACTIONS_BLOCK, button_element("Stop", ACTION_STOP, p.job_id))
        )
    text = f"{state}: {stats}"
    if running:
        text += f" · running {escaped(running, 80)}"
    return Message(text=text, blocks=blocks)


def tool_lines(finished: Sequence[ToolLine]) -> list[str]:
    """Each finished tool with its result in one line (the last ``MAX_TOOL_LINES``)."""
    shown = list(finished)[-MAX_TOOL_LINES:]
    lines = []
    if hidden := len(finished) - len(shown):
        lines.append(f"_{plural(hidden, 'earlier tool call')}_")
    for t in shown:
        icon = ":white_check_mark:" if t.ok else ":x:"
        result = escaped(one_line(t.result), TOOL_RESULT_CHARS)
        lines.append(f"{icon} `{escaped(t.tool, 80)}` {result}".rstrip())
    return lines


NARRATION_CHARS = 300


def with_narration(message: Message, narration: str) -> Message:
    """``message`` (the status message) with the model's short note before its tool calls
    as a last context line, escaped and on one line; ``text`` is left as it is."""
    line = escaped(one_line(narration), NARRATION_CHARS)
    if not line:
        return message
    return Message(message.text, [*message.blocks, context_block(f":speech_balloon: {line}")])


# -- endings -------------------------------------------------------------------------------

_LIMITS = frozenset(
    {StopReason.LIMIT_ITERATIONS, StopReason.LIMIT_TOKENS, StopReason.LIMIT_DEADLINE}
)


def ending_message(
    reason: StopReason,
    *,
    job_id: str,
    iterations: int,
    max_iterations: int,
    tokens: int,
    token_budget: int,
    tools_run: int,
    error: str | None = None,
    continue_label: str | None = None,
    continue_seq: int = 0,
    by: str | None = None,
    active_s: float | None = None,
    deadline_s: float | None = None,
    tools: Sequence[ToolLine] = (),
    trace_id: str | None = None,
    cost_usd: float | None = None,
    unpriced_calls: int = 0,
) -> Message:
    """What happened, in words, with the stop reason code in ``text`` (not for ``completed``).

    ``error`` says what failed (``failed``) or what is missing (``incomplete``: a change
    not verified, what the model was blocked on); ``by`` names who pressed Stop
    (``cancelled``); ``continue_label`` (e.g. ``Continue (+20 iterations)``) adds the
    ``Continue`` button on a limit ending. ``tools`` (what ran, with its result in one
    line) stay listed; the context names the job id ``opsloop trace`` takes, for the
    review after the incident, and the job's OpenTelemetry ``trace_id`` when it is traced.
    ``cost_usd`` (what the job's model calls cost; None when none was priced) shows beside
    the tokens, as a lower bound (``≥ $0.04``) when ``unpriced_calls`` had no price. A
    ``limit_tokens`` ending whose ``error`` names the workspace's daily cap says so
    instead of naming the job's budget.
    """
    R = StopReason
    deadline = ""
    if active_s is not None and deadline_s is not None:
        deadline = f" ({duration(active_s)}/{duration(deadline_s)})"
    headline = {
        R.COMPLETED: "Done",
        R.INCOMPLETE: f"Not done: {escaped(one_line(error), ERROR_CHARS)}"
        if error
        else "Stopped: the answer did not complete the task",
        R.AWAITING_APPROVAL: "Paused: waiting for approval",
        R.LIMIT_ITERATIONS: f"Stopped: iteration limit reached ({iterations}/{max_iterations})",
        R.LIMIT_TOKENS: f"Stopped: {escaped(one_line(error), ERROR_CHARS)}"
        if error and WORKSPACE_CAP in error
        else f"Stopped: token budget reached ({tokens:,}/{token_budget:,} tokens)",
        R.LIMIT_DEADLINE: f"Stopped: time limit reached{deadline}",
        R.LOOP: "Stopped: the same call kept returning the same result",
        R.STALLED: f"Stopped: every tool call failed {STALL_ITERATIONS} times in a row",
        R.NO_ACTION: "Stopped: the model returned empty responses",
        R.FAILED: f"Failed: {escaped(one_line(error or 'unknown error'), ERROR_CHARS)}",
        R.CANCELLED: f"Cancelled by {mention(by)}" if by else "Cancelled",
    }[reason]
    # The code goes in ``text`` (DESIGN: every ending names it); the headline people read
    # says it once: "Cancelled by @alice", not "Cancelled by @alice · cancelled".
    shown = headline
    if reason is not R.COMPLETED:
        headline += f" · `{reason.value}`"
        if reason is not R.CANCELLED:
            shown = headline
    cost = cost_text(cost_usd, unpriced_calls)
    stats = (
        f"iterations {iterations}/{max_iterations} · tokens {tokens:,}/{token_budget:,} · "
        + (f"{cost} · " if cost else "")
        + f"{plural(tools_run, 'tool')} run"
    )
    blocks = [section_block(shown)]
    if lines := tool_lines(tools):
        blocks.append(section_block("\n".join(lines)))
    job_line = f"{stats} · job `{escaped(job_id, 200)}`"
    if trace_id:
        job_line += f" · trace `{escaped(trace_id, 64)}`"
    blocks.append(context_block(job_line))
    if reason in _LIMITS and continue_label:
        value = f"{job_id}|{continue_seq}"
        button = button_element(continue_label, ACTION_CONTINUE, value, style="primary")
        blocks.append(actions_block(ENDING_ACTIONS_BLOCK, button))
    return Message(text=f"{headline}\n{stats}", blocks=blocks)
