"""``opsloop trace`` shows a malformed call as the model wrote it: history stores it as
``{}`` / ``invalid_tool_name``, the kept original is what the incident review reads."""

from __future__ import annotations

import json

from bot.agent.messages import Malformed
from bot.cli.trace import JobTrace, Written, render, render_json
from bot.store.jobs import JobLimits, JobRecord
from bot.store.keys import Thread
from bot.store.trace import ToolEntry

T0 = 1_780_000_000.0
THREAD = Thread("C0INC", "1780000000.000100")


def record() -> JobRecord:
    return JobRecord(
        id=THREAD.job_id(1),
        channel=THREAD.channel,
        thread_ts=THREAD.thread_ts,
        requester="UALICE",
        created_at=T0,
        updated_at=T0 + 9,
        limits=JobLimits(max_iterations=20, deadline_s=3600, token_budget=200_000),
    )


def refused(call_id: str, tool: str, *, ran: bool = False) -> ToolEntry:
    return ToolEntry(
        at=T0 + 1,
        call_id=call_id,
        tool=tool,
        ran=ran,
        is_error=True,
        duration_s=0.0,
        output_chars=120,
        arguments='{"host": "web-03"}' if ran else None,
    )


def test_a_bad_name_and_cut_off_arguments_read_as_written() -> None:
    trace = JobTrace(
        record(),
        [refused("c1", "invalid_tool_name"), refused("c2", "check_host")],
        malformed={
            "c1": Written("invalid_tool_name", Malformed(name="check host")),
            "c2": Written(
                "check_host", Malformed(arguments='{"host":\n "web-0', error="not valid JSON (x)")
            ),
        },
    )

    text = render(trace)

    assert "check host · not run: malformed name · 120 chars out" in text
    assert 'check_host {"host": "web-0 · not run: malformed arguments' in text
    calls = json.loads(render_json(trace))["malformed_calls"]
    assert calls == {
        "c1": {"tool": "invalid_tool_name", "name": "check host"},
        "c2": {
            "tool": "check_host",
            "arguments": '{"host":\n "web-0',
            "error": "not valid JSON (x)",
        },
    }


def test_another_jobs_call_with_the_same_id_is_not_taken_for_it() -> None:
    # Call ids are unique within a job only: a call of this job that ran, or one under
    # another name, is not the thread's malformed one.
    malformed = {"c1": Written("check_host", Malformed(arguments="[1]", error="e"))}
    trace = JobTrace(
        record(),
        [refused("c1", "check_host", ran=True), refused("c1", "other")],
        malformed=malformed,
    )

    text = render(trace)

    assert "[1]" not in text and "malformed" not in text
    assert json.loads(render_json(trace))["malformed_calls"] == {}
