"""The job's facts, rendered by code from Redis for a condensed history.

Once a job's history was condensed, the model knows its earlier part only from an
LLM-written summary. What carries authority must not live only there, so every request
whose history starts with the summary also gets this block (the core's
``AgentConfig.facts``, read at each run's first request and after condensing):

- the request and who asked: the job's record (``requester``, ``request_ts``) and the
  request message in the history's originals (condensing never removes them);
- every approval with its decision and who made it: the approval records of the job's
  calls (``RunState.call_ids``);
- every write with its outcome: the ledger (``done``, or ``started`` with no result:
  the outcome is unknown, the process running it was interrupted);
- limits raised and by whom: the job's record (``raises``);
- corrections people typed in the thread since the request: the injected messages of
  the originals (not the thread context read before the request).

Everything is bounded (each item and each list) and scrubbed of credentials like every
input, and what a person or a tool wrote is quoted as data. One round trip: the
approvals and the ledger are read in one pipeline each way they are stored.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from bot.agent.messages import AnyMessage, UserMessage
from bot.agent.observe import summary_line
from bot.agent.redact import redact_secrets
from bot.agent.tools import CONFIRMED_BY
from bot.store.approvals import ApprovalRecord, Approvals
from bot.store.jobs import JobRecord
from bot.store.ledger import LedgerRecord, RedisLedger, split_key
from bot.turns.context import CONTEXT_SUFFIX

HEADING = (
    "Facts of this job from the bot's own records (not from the summary; where the "
    "summary differs, these hold):"
)
MAX_ITEMS = 20  # per list; the most recent are kept
MAX_QUOTE_CHARS = 300
MAX_ARGS_CHARS = 200
_LIMIT_UNITS = {"iterations": "", "tokens": " tokens", "deadline": " s"}


async def job_facts(
    record: JobRecord,
    originals: Sequence[AnyMessage],
    approvals: Approvals,
    ledger: RedisLedger,
) -> str:
    """The facts block of ``record``'s job as it stands in Redis now."""
    decided = await approvals.of_calls(record.id, record.progress.call_ids)
    writes = await ledger.entries(record.id)
    return render(record, originals, decided, writes)


def render(
    record: JobRecord,
    originals: Sequence[AnyMessage],
    approvals: Sequence[ApprovalRecord],
    writes: dict[str, LedgerRecord],
) -> str:
    lines = [HEADING, f"- Request by <@{record.requester}>: {_request(record, originals)}"]
    by_call = {a.call_id: a for a in approvals}
    lines += _section(
        "Approvals (decided by the person named)",
        [_approval(a) for a in approvals],
        none="none asked",
    )
    lines += _section(
        "Changes run (approved writes)",
        [
            _write(key, entry, by_call)
            for key, entry in sorted(writes.items(), key=lambda kv: kv[1].started_at or 0.0)
            if entry.state != "withdrawn"  # claimed, never confirmed, taken back: not run
        ],
        none="none",
    )
    lines += _section(
        "Limits raised",
        [
            f"{r.limit} +{_amount(r.amount)}{_LIMIT_UNITS[r.limit]} by <@{r.by}>"
            for r in record.raises
        ],
        none="none",
    )
    lines += _section(
        "Corrections people typed in the thread",
        _corrections(record, originals),
        none="none",
    )
    return "\n".join(lines)


def _section(title: str, items: list[str], *, none: str) -> list[str]:
    if not items:
        return [f"- {title}: {none}."]
    shown = items[-MAX_ITEMS:]
    head = f"- {title}:"
    if len(items) > len(shown):
        head = f"- {title} ({len(items) - len(shown)} earlier not shown):"
    return [head, *(f"  - {item}" for item in shown)]


def _quote(text: str, limit: int = MAX_QUOTE_CHARS) -> str:
    clean = " ".join(redact_secrets(text).split())
    if len(clean) > limit:
        clean = clean[: limit - 1] + "…"
    return json.dumps(clean, ensure_ascii=False)


def _arguments(arguments: dict[str, object]) -> str:
    """The call's arguments without ``confirmed_by``: who approved is said beside them
    (what the model wrote there is not the approver)."""
    shown = {k: v for k, v in arguments.items() if k != CONFIRMED_BY}
    text = json.dumps(shown, ensure_ascii=False, sort_keys=True, default=str)
    text = redact_secrets(text)
    return text if len(text) <= MAX_ARGS_CHARS else text[: MAX_ARGS_CHARS - 1] + "…"


def _request(record: JobRecord, originals: Sequence[AnyMessage]) -> str:
    if record.request_ts is not None:
        for message in originals:
            if isinstance(message, UserMessage) and message.source_id == record.request_ts:
                return _quote(str(message.content))
    return "(the thread's replies that started this job)"


def _approval(approval: ApprovalRecord) -> str:
    what = f"{approval.tool} {_arguments(approval.arguments)}"
    match approval.status:
        case "pending":
            return f"{what}: waiting for a decision"
        case "expired":
            return f"{what}: expired, no one decided"
        case status:
            by = f" by <@{approval.decided_by}>" if approval.decided_by else ""
            return f"{what}: {status}{by}"


def _write(key: str, entry: LedgerRecord, by_call: dict[str, ApprovalRecord]) -> str:
    _, call_id = split_key(key)
    approval = by_call.get(call_id)
    tool = entry.tool or (approval.tool if approval is not None else "a tool")
    what = tool if approval is None else f"{tool} {_arguments(approval.arguments)}"
    if entry.state == "done":
        said = summary_line(entry.output or "")
        return f"{what}: done" + (f", it said {_quote(said, 160)}" if said else "")
    return f"{what}: outcome unknown (interrupted while it ran; verify before relying on it)"


def _corrections(record: JobRecord, originals: Sequence[AnyMessage]) -> list[str]:
    start = 0
    if record.request_ts is not None:
        for i, message in enumerate(originals):
            if isinstance(message, UserMessage) and message.source_id == record.request_ts:
                start = i + 1
                break
    out: list[str] = []
    for message in originals[start:]:
        if not isinstance(message, UserMessage) or not message.source_id:
            continue
        if message.source_id.endswith(CONTEXT_SUFFIX) or message.summary:
            continue
        out.append(_quote(str(message.content)))
    return out


def _amount(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
