"""An audit entry and its texts: the record (``AuditEntry``), the canonical JSON it is
hashed and staged as, a bounded result, and the one line an audit channel gets.

``bot.store.audit`` chains entries and re-exports these names; writers import them from
there. Pure: no Redis here.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from bot.agent.redact import redact_secrets
from bot.errors import StoreError
from bot.store.keys import thread_of

AuditKind = Literal[
    "approval_requested",
    "approval_decided",
    "write_started",
    "write_finished",
    "write_unknown",
    "write_withdrawn",  # a claim no replica confirmed, taken back: the write never started
    "limit_raised",
    "job_stopped",
    "cli_run",
    "process_started",
    "daily_cap_raised",
    "corrupt",  # an outbox element that could not be read, kept in the log as found
]

ACTOR_BOT = "opsloop"
GENESIS = "0" * 64
OUTBOX_TTL_S = 30 * 24 * 3600
RESULT_CHARS = 2_000  # a write's result as recorded (the ledger keeps more)
LINE_CHARS = 300  # one audit line posted to a channel
CHAINED = frozenset({"seq", "prev", "hash"})  # what chaining adds


class AuditEntry(BaseModel):
    """One fact with authority, as staged (no seq/prev/hash) or chained."""

    # A newer writer's fields are kept as they are, so they still verify and show.
    model_config = ConfigDict(extra="allow")

    v: int = 1
    id: str  # unique per fact: the dedupe key, e.g. "approval_decided:{job_id}:{call_id}"
    kind: AuditKind
    at: float
    actor: str  # raw Slack user id, "cli:<user>", or ACTOR_BOT
    job_id: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    tool: str | None = None
    call_id: str | None = None
    args_hash: str | None = None
    arguments: dict[str, Any] | None = None
    outcome: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)
    seq: int | None = None
    prev: str | None = None
    hash: str | None = None


@dataclass(frozen=True, slots=True)
class Stored:
    """A chained entry as it is in the stream: its id there, its exact JSON, and the
    entry (``kind="corrupt"`` when the JSON cannot be read as one)."""

    stream_id: str
    raw: str
    entry: AuditEntry


# -- the entry's text ------------------------------------------------------------------


def canonical(obj: Mapping[str, object]) -> str:
    """The one JSON text of an entry: sorted keys, no whitespace, non-ASCII kept."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def entry_hash(body: Mapping[str, object]) -> str:
    """sha256 hex of the canonical JSON of ``body`` without its ``hash``."""
    text = canonical({k: v for k, v in body.items() if k != "hash"})
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def staged_json(entry: AuditEntry) -> str:
    """What a writer RPUSHes: the canonical JSON without seq/prev/hash, None left out."""
    return canonical(entry.model_dump(mode="json", exclude_none=True, exclude=set(CHAINED)))


def bound_result(text: str, limit: int = RESULT_CHARS) -> str:
    """``text`` cut to ``limit`` characters with a note (never half a character)."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    if head and "\ud800" <= head[-1] <= "\udbff":  # half of a surrogate pair
        head = head[:-1]
    return f"{head}\n… [cut: {len(text):,} chars in all, first {len(head):,} kept]"


def tag_of_job(job_id: str) -> str:
    """The hash tag a job's facts (and so their outbox) live under."""
    return thread_of(job_id).tag


class JobFields(TypedDict):
    """An entry's fields that name a job and its thread."""

    job_id: str
    channel: str
    thread_ts: str


def job_fields(job_id: str) -> JobFields:
    """The fields of an entry about ``job_id``: the job, and the thread it runs in (from
    its id), as ``AuditEntry(..., **job_fields(job_id))``."""
    thread = thread_of(job_id)
    return JobFields(job_id=job_id, channel=thread.channel, thread_ts=thread.thread_ts)


def parse_head(text: str | None) -> tuple[int, str]:
    """``(seq, hash)`` of a head/anchor value; ``(0, GENESIS)`` for none."""
    if not text:
        return 0, GENESIS
    seq, _, digest = text.partition(":")
    try:
        return int(seq), digest
    except ValueError as exc:
        raise StoreError(f"corrupt audit head {text!r}") from exc


# -- one line for a channel ----------------------------------------------------------------

_LABELS: Mapping[str, str] = {
    "approval_requested": "Approval requested",
    "approval_decided": "Approval",
    "write_started": "Write started",
    "write_finished": "Write finished",
    "write_unknown": "Write outcome unknown",
    "write_withdrawn": "Write not started (claim not replicated)",
    "limit_raised": "Limit raised",
    "job_stopped": "Job stopped",
    "cli_run": "CLI run",
    "process_started": "Process started",
    "daily_cap_raised": "Daily cap raised",
    "corrupt": "Unreadable audit entry",
}
_USER_ID = re.compile(r"^[UW][A-Z0-9]+$")
_MENTION = re.compile(r"^<@([UW][A-Z0-9]+)>$")


def bare_user(user: str) -> str:
    found = _MENTION.match(user.strip())
    return found.group(1) if found else user.strip()


def _escape(text: str) -> str:
    """Slack mrkdwn control characters, and whitespace folded onto one line."""
    text = " ".join(text.split())
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _who(actor: str) -> str:
    return f"<@{actor}>" if _USER_ID.match(actor) else f"`{_escape(actor)}`"


def audit_line(entry: AuditEntry) -> str:
    """One readable mrkdwn line for ``OPSLOOP_AUDIT_CHANNEL`` (scrubbed, bounded)."""
    parts = [f"*{_LABELS.get(entry.kind, entry.kind)}*"]
    if entry.tool:
        parts.append(f"`{_escape(entry.tool)}`")
    if entry.outcome:
        parts.append(_escape(entry.outcome))
    parts.append(f"by {_who(entry.actor)}")
    head = " ".join(parts)
    tail: list[str] = []
    if entry.job_id:
        tail.append(f"job `{_escape(entry.job_id)}`")
    if short := short_detail(entry):
        tail.append(_escape(short))
    line = redact_secrets(" · ".join([head, *tail]))
    if len(line) > LINE_CHARS:
        line = re.sub(r"&[a-z]*$", "", line[: LINE_CHARS - 1]) + "…"  # no half entity
    return line


def short_detail(entry: AuditEntry, chars: int = 120) -> str:
    """The one thing of the kind-specific detail worth a glance, on one line (unscrubbed:
    the callers scrub)."""
    d = entry.detail
    text = ""
    if "limit" in d:
        text = f"{d['limit']} +{d.get('amount', '?')}"
        if "from" in d and "to" in d:
            text += f" ({d['from']} → {d['to']})"
    elif entry.kind == "daily_cap_raised":
        caps = [f"{d['tokens']} tokens" if d.get("tokens") is not None else ""]
        caps.append(f"${d['cost_usd']}" if d.get("cost_usd") is not None else "")
        text = f"{d.get('day', 'today')}: " + ", ".join(c for c in caps if c)
    elif entry.kind == "process_started":
        tools = d.get("tools")
        count = f", {len(tools)} tools" if isinstance(tools, list) else ""
        text = f"opsloop {d.get('version', '?')} on {d.get('host', '?')}{count}"
    else:
        for key in ("result", "error", "reason", "dry_run_output", "preview", "while", "raw"):
            value = d.get(key)
            if isinstance(value, str) and value.strip():
                text = f"while {value}" if key == "while" else value
                break
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: chars - 1] + "…"
