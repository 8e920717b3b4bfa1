"""A destructive call in a job an alert started needs two different approvers
(``Controls.decide``): the first Approve is recorded, not a decision; the same person's
Approve again is refused; a different approver's Approve decides it once, with them as
``confirmed_by``; Deny decides at once. A mutating call there, and a destructive call a
person asked for, need one approval as always."""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from bot.agent import StopReason, ToolMessage
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.alerts.text import REQUESTER as ALERTMANAGER
from bot.service import build_turns
from bot.store.approvals import ApprovalRecord
from bot.store.jobs import JobStatus
from bot.store.keys import Keys, Thread
from bot.store.parts import Stores
from bot.store.receipt import Receipt
from bot.turns.controls import SECOND_APPROVER, Accepted, FirstApproval, Refused
from bot.turns.parts import Turns
from bot.turns.run import TurnSettings
from tests.agent.conftest import echo_tool
from tools.registry import Catalog

from .notifier import Notes, card_ts
from .test_approvals_stop_continue import LIMITS, TS


async def allowed(approval: ApprovalRecord) -> str | None:
    return None


def make_turns(redis: aioredis.Redis, keys: Keys, model: ScriptedModel) -> tuple[Turns, Notes]:
    notes = Notes()
    tools = [
        echo_tool(),
        echo_tool("restart", category="mutating"),
        echo_tool("delete_pod", category="destructive"),
    ]
    turns = build_turns(
        Stores.build(redis, keys),
        resolver=model,
        catalog=Catalog(tools={t.name: t for t in tools}, sources={t.name: "test" for t in tools}),
        system_prompt="You are opsloop.",
        settings=TurnSettings(limits=LIMITS, approval_ttl_s=3600),
        notifier=notes,
        consumer="test-process",
    )
    return turns, notes


async def paused_on(
    redis: aioredis.Redis,
    keys: Keys,
    thread: Thread,
    tool: str,
    *,
    requester: str = ALERTMANAGER,
) -> tuple[Turns, str, ScriptedModel]:
    """A job started by ``requester`` whose model calls ``tool`` (and checks it in the
    same batch, so the answer completes the job), paused on its card."""
    change_and_check = calls(call(tool, "c1", host="web-03"), call("check", host="web-03"))
    model = ScriptedModel([change_and_check, text("done")])
    turns, notes = make_turns(redis, keys, model)
    receipt = await turns.receiver.receive(thread, ts=TS, user=requester, text="HighCPU web-03")
    assert isinstance(receipt, Receipt) and receipt.job_id is not None
    paused = await turns.runner.run_job(receipt.job_id)
    assert paused is not None and paused.stop_reason is StopReason.AWAITING_APPROVAL
    assert [(c.tool, c.requester) for c in notes.cards] == [(tool, requester)]
    return turns, receipt.job_id, model


async def approve(turns: Turns, job_id: str, by: str) -> Accepted | FirstApproval | Refused:
    return await turns.controls.decide(
        job_id, "c1", outcome="approved", by=by, card_ts=card_ts(1), authorize=allowed
    )


async def test_two_different_approvers_decide_it_once(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, job_id, model = await paused_on(redis, keys, thread, "delete_pod")

    first = await approve(turns, job_id, "U0FIRST1")
    assert isinstance(first, FirstApproval)
    assert first.record.status == "pending" and first.record.first_approver == "U0FIRST1"
    assert await turns.runner.run_job(job_id) is None  # nothing decided: nothing resumes

    second = await approve(turns, job_id, "U0SECOND")
    assert isinstance(second, Accepted)
    decided = second.record
    assert (decided.status, decided.decided_by, decided.first_approver) == (
        "approved",
        "U0SECOND",
        "U0FIRST1",
    )
    late = await approve(turns, job_id, "U0THIRD1")
    assert late == Refused("decided", "already approved by <@U0SECOND>")

    ended = await turns.runner.run_job(job_id)
    assert ended is not None and ended.stop_reason is StopReason.COMPLETED
    results = [m for m in model.requests[-1].messages if isinstance(m, ToolMessage)]
    assert [m.content for m in results] == ["ok web-03", "ok web-03"]
    # The decision's audit entry names both approvers.
    entries = [json.loads(e) for e in await redis.lrange(keys.audit_outbox(thread.tag), 0, -1)]
    [decision] = [e for e in entries if e["kind"] == "approval_decided"]
    assert decision["actor"] == "U0SECOND" and decision["outcome"] == "approved"
    assert decision["detail"]["first_approver"] == "U0FIRST1"


async def test_the_first_approver_alone_never_decides_it(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, job_id, _ = await paused_on(redis, keys, thread, "delete_pod")

    assert isinstance(await approve(turns, job_id, "U0FIRST1"), FirstApproval)
    again = await approve(turns, job_id, "U0FIRST1")

    assert again == Refused("not_allowed", SECOND_APPROVER)
    stored = await turns.stores.approvals.get(job_id, "c1")
    assert stored is not None and stored.status == "pending" and stored.decided_by is None
    record = await turns.stores.jobs.get(job_id)
    assert record is not None and record.status is JobStatus.AWAITING_APPROVAL


async def test_deny_decides_at_once(redis: aioredis.Redis, keys: Keys, thread: Thread) -> None:
    turns, job_id, _ = await paused_on(redis, keys, thread, "delete_pod")
    await approve(turns, job_id, "U0FIRST1")

    denied = await turns.controls.decide(
        job_id, "c1", outcome="denied", by="U0SECOND", card_ts=card_ts(1), authorize=allowed
    )

    assert isinstance(denied, Accepted)
    assert (denied.record.status, denied.record.decided_by) == ("denied", "U0SECOND")


async def test_deny_as_the_first_click_decides_at_once(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, job_id, _ = await paused_on(redis, keys, thread, "delete_pod")

    denied = await turns.controls.decide(
        job_id, "c1", outcome="denied", by="U0FIRST1", card_ts=card_ts(1), authorize=allowed
    )

    assert isinstance(denied, Accepted) and denied.record.status == "denied"
    assert denied.record.first_approver is None


async def test_a_mutating_call_needs_one_approver(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, job_id, _ = await paused_on(redis, keys, thread, "restart")

    verdict = await approve(turns, job_id, "U0FIRST1")

    assert isinstance(verdict, Accepted) and verdict.record.decided_by == "U0FIRST1"
    assert verdict.record.first_approver is None


async def test_a_destructive_call_a_person_asked_for_needs_one_approver(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, job_id, _ = await paused_on(redis, keys, thread, "delete_pod", requester="U0ALICE")

    verdict = await approve(turns, job_id, "U0FIRST1")

    assert isinstance(verdict, Accepted) and verdict.record.status == "approved"
    assert verdict.record.first_approver is None
