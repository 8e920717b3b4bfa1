"""An answer that says the model cannot go on ends the job ``incomplete``, saying what
is missing.

The signal is the closing line the system prompt documents: ``BLOCKED: <what is
missing>`` as the answer's last non-empty line, with exactly that prefix at the line's
start. The job's error names what is missing and the answer is shown without the line
(the ending says it, once). Anywhere else or written otherwise, the line is ordinary
text and the answer completes the job.
"""

from __future__ import annotations

import pytest

from bot.agent import Approved, ConfirmRequest, Decision, StopReason, run
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.agent.work_done import BLOCKED_PREFIX, blocked, work_done
from bot.prompts import default_prompt

from .conftest import echo_tool, make_config

FOUND = "db-01 refuses connections from web-03; its pg_hba.conf needs an entry."


async def test_a_blocked_answer_ends_incomplete_with_what_is_missing() -> None:
    answer = f"{FOUND}\n\nBLOCKED: someone with root on db-01 to edit pg_hba.conf\n\n"
    model = ScriptedModel([text(answer)])

    result = await run(make_config(model, stop=work_done))

    assert result.stop_reason is StopReason.INCOMPLETE
    assert result.error == "blocked: someone with root on db-01 to edit pg_hba.conf"
    assert result.output == FOUND  # the line is in the ending, not shown twice
    model.assert_done()  # nobody asks the model again


async def test_an_answer_that_is_only_the_line_shows_no_answer() -> None:
    model = ScriptedModel([text("BLOCKED: VPN access to the prod network")])

    result = await run(make_config(model, stop=work_done))

    assert result.stop_reason is StopReason.INCOMPLETE
    assert result.output == ""
    assert result.error == "blocked: VPN access to the prod network"


@pytest.mark.parametrize(
    "answer",
    [
        f"BLOCKED: nothing, it was a false alarm\n{FOUND}",  # not the last line
        f"{FOUND}\nBlocked: credentials",  # not the exact prefix
        f"{FOUND}\n**BLOCKED:** credentials",
        f"{FOUND}\n  BLOCKED: credentials",  # not at the line's start
        f"{FOUND} BLOCKED: credentials",  # not a line of its own
    ],
    ids=["not-last", "case", "bold", "indented", "inline"],
)
async def test_the_line_is_parsed_strictly(answer: str) -> None:
    model = ScriptedModel([text(answer)])

    result = await run(make_config(model, stop=work_done))

    assert result.stop_reason is StopReason.COMPLETED
    assert result.output == answer


def test_a_line_that_names_nothing_still_blocks() -> None:
    found = blocked(f"{FOUND}\nBLOCKED:")
    assert found is not None and found.missing == "it did not say what is missing"


async def test_blocked_after_an_unverified_change_says_both_and_asks_nothing() -> None:
    restart = echo_tool("restart", category="mutating")

    async def approve(request: ConfirmRequest) -> Decision:
        return Approved(confirmed_by="U0123ABC")

    model = ScriptedModel(
        [calls(call("restart", host="web-03")), text("Restarted.\nBLOCKED: a login to check it")]
    )

    result = await run(make_config(model, tools=[restart], confirm=approve, stop=work_done))

    assert result.stop_reason is StopReason.INCOMPLETE
    assert result.error == (
        "blocked: a login to check it; "
        "the change was not verified: no read-only check ran after restart"
    )
    model.assert_done()


def test_the_system_prompt_documents_the_exact_line() -> None:
    prompt = default_prompt()
    assert f"\n{BLOCKED_PREFIX} <what is missing>\n" in prompt
