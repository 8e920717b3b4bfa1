"""The true order of a reply and a decision: what the runtime says about a reply it
takes in just after a paused call was decided.

A person may reply while a call waits for approval; the reply is shown on the card at
once, but the model reads it only when the job resumes, after the decided call's result
(a provider wants a call's result right after the call). Read plainly, that order says
the reply came after the change. So a reply taken in at the first fetch after a resume is
followed by a note of the runtime, in its own paragraph, stating when it was sent
relative to the request for approval and to the decision, and who decided:

    (opsloop: sent at 16:01:02 UTC while `restart_service` waited for approval;
    <@U0BOB> approved it at 16:01:47 UTC, after this message; the call has run and its
    result is above)

Times come from the reply's own timestamp (``Injected.sent_at``, Slack's ``ts``) and the
decision's (``Approved``/``Denied`` ``asked_at``/``decided_at``), kept in the run's state
(``RunState.decided``) from the resume until the next fetch, so a crash in between loses
nothing. A reply or decision without times gets no note: nothing is claimed that is not
known.
"""

from __future__ import annotations

from datetime import UTC, datetime

from bot.agent.ports import Approved, Decision, Denied, Injected
from bot.agent.state import DecidedCall

NOTE_PREFIX = "(opsloop: "


def decided_call(tool: str | None, decision: Decision | None) -> DecidedCall | None:
    """What a reply can be ordered against: a decided call with its decision's time."""
    if tool is None or not isinstance(decision, Approved | Denied):
        return None
    if decision.decided_at is None:
        return None
    if isinstance(decision, Approved):
        return DecidedCall(
            tool=tool,
            outcome="approved",
            by=decision.confirmed_by,
            asked_at=decision.asked_at,
            decided_at=decision.decided_at,
        )
    return DecidedCall(
        tool=tool,
        outcome=decision.outcome,
        by=decision.by,
        asked_at=decision.asked_at,
        decided_at=decision.decided_at,
    )


def clock(at: float) -> str:
    """``16:01:02 UTC``."""
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S UTC")


def _who(by: str | None) -> str:
    return f"<@{by}>" if by else "someone"


def _decided(decided: DecidedCall, subject: str) -> tuple[str, str]:
    """``("<@U1> approved it at …", "the call has run …")``: the decision of ``subject``
    (``it`` or the tool's name) and what became of the call."""
    at = clock(decided.decided_at)
    match decided.outcome:
        case "approved":
            return (
                f"{_who(decided.by)} approved {subject} at {at}",
                "the call has run and its result is above",
            )
        case "expired":
            what = "the approval" if subject == "it" else f"the approval of {subject}"
            did = f"{what} expired at {at}"
        case "cancelled":
            did = f"{_who(decided.by)} stopped the job at {at}"
        case _:
            did = f"{_who(decided.by)} denied {subject} at {at}"
    return did, "the call did not run"


def order_note(item: Injected, decided: DecidedCall) -> str | None:
    """The runtime's note on when ``item`` was sent, relative to the wait and the
    decision; None when the reply's time is unknown."""
    sent = item.sent_at
    if sent is None:
        return None
    tool = f"`{decided.tool}`"
    if sent >= decided.decided_at:
        did, _ = _decided(decided, tool)
        return f"{NOTE_PREFIX}sent at {clock(sent)}, after {did})"
    did, outcome = _decided(decided, "it")
    asked = decided.asked_at
    if asked is not None and sent < asked:
        return (
            f"{NOTE_PREFIX}sent at {clock(sent)}, before {tool} asked for approval at "
            f"{clock(asked)}; read only now, after {did}; {outcome})"
        )
    return (
        f"{NOTE_PREFIX}sent at {clock(sent)} while {tool} waited for approval; "
        f"{did}, after this message; {outcome})"
    )


def with_order(text: str, item: Injected, decided: DecidedCall | None) -> str:
    """``text`` (the reply as the history holds it) with the order note, if any."""
    if decided is None:
        return text
    note = order_note(item, decided)
    return f"{text}\n\n{note}" if note else text
