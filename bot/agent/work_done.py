"""Whether a final answer is the end of the work: the stop predicate every job runs
(``bot/turns/runner.py`` sets it), and the facts it decides from.

"The model stopped calling tools" is not "the work is done":

- **Blocked.** The model says it cannot go on (it needs a person, access, or information
  no tool gives it) with the closing line the system prompt documents
  (``bot/prompts/incident.md``): the answer's last non-empty line starts with exactly
  ``BLOCKED:`` and says what is missing. Parsed strictly: anywhere else, or written
  otherwise (``Blocked:``, ``**BLOCKED:**``), it is ordinary text. The job ends
  ``incomplete`` with what is missing as its reason, and the answer is shown without the
  line (the ending says it).
- **A change nobody checked.** After a change ran (a mutating or destructive call whose
  result is not an error: it ran, it was not refused, denied or failed), the job ends
  ``completed`` only if a read-only call returned a result after it. If the model
  answers without one, it is asked once per job, as a ``user`` message, to verify the
  change with a read-only check before it concludes; if it answers again without one,
  the job ends ``incomplete``: the change was not verified.

The loop records the facts in ``RunState`` (``note_call`` for every call's result,
``asked`` for the one question), so they survive a pause for approval and a resume in
another process. An answer cut off at the output limit never gets here: the loop asks
for the rest first and judges the whole answer (``run.py``).

Not here: anything the loop must do whatever the predicate (limits, the loop detector,
``stalled``), and what a tool is allowed to do (``calls.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.agent.config import AskAgain, StopCheck, StopVerdict
from bot.agent.state import RunState, StopReason
from bot.agent.tools import Tool

BLOCKED_PREFIX = "BLOCKED:"
"""How the answer's last non-empty line starts when the model cannot go on."""

VERIFY = "verify_change"  # the key of the one verification question (``RunState.asked``)
VERIFY_MESSAGE = (
    "Before you conclude: a change ran ({tool}) and nothing has checked it since. Verify "
    "with a read-only tool that it had the effect you expected, then give your answer."
)
NOT_VERIFIED = "the change was not verified: no read-only check ran after {tool}"
NOT_A_CHECK = frozenset({"read_artifact"})
"""Read-only tools that look at what the job already has, not at the system: reading
back a cut output (DESIGN's built-in ``read_artifact``) checks nothing."""
NOT_SAID = "it did not say what is missing"


@dataclass(frozen=True, slots=True)
class Blocked:
    """An answer that ends with the ``BLOCKED:`` line."""

    missing: str  # what the line says is missing
    answer: str  # the answer without the line (may be empty)


def blocked(output: str | None) -> Blocked | None:
    """The ``BLOCKED:`` line of ``output``, only as its last non-empty line and only
    with that exact prefix at the line's start; ``None`` for any other answer."""
    lines = (output or "").rstrip().splitlines()
    if not lines or not lines[-1].startswith(BLOCKED_PREFIX):
        return None
    missing = lines[-1][len(BLOCKED_PREFIX) :].strip() or NOT_SAID
    return Blocked(missing=missing, answer="\n".join(lines[:-1]).rstrip())


def note_call(state: RunState, tool: Tool | None, *, ok: bool) -> None:
    """Record what one call's result means for verification: a change that ran makes
    its tool the unverified change; a read-only result after it verifies it. ``ok``:
    the tool ran (or its recorded run was replayed) and its result is not an error."""
    if tool is None or not ok:
        return  # refused, denied, failed or unknown: it changed nothing and checked nothing
    if tool.category != "read_only":
        state.unverified_change = tool.name
    elif tool.name not in NOT_A_CHECK:
        state.unverified_change = None


async def work_done(check: StopCheck) -> StopVerdict | AskAgain | None:
    """The stop predicate: ``None`` (completed) unless the final answer is blocked or a
    change ran that nothing checked (asked once, then ``incomplete``)."""
    if not check.final:
        return None
    state = check.state
    unverified = state.unverified_change
    if (stuck := blocked(check.output)) is not None:
        # The model says it cannot go on: no question, whatever else is open.
        missing = [f"blocked: {stuck.missing}"]
        if unverified is not None:
            missing.append(NOT_VERIFIED.format(tool=unverified))
        return StopVerdict(
            reason=StopReason.INCOMPLETE, message="; ".join(missing), output=stuck.answer
        )
    if unverified is None:
        return None
    if VERIFY not in state.asked:
        return AskAgain(key=VERIFY, message=VERIFY_MESSAGE.format(tool=unverified))
    return StopVerdict(reason=StopReason.INCOMPLETE, message=NOT_VERIFIED.format(tool=unverified))
