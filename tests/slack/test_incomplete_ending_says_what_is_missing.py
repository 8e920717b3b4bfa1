"""An ``incomplete`` ending says what is missing: the change that was not verified, or
what the model was blocked on (escaped and on one line like every model-written text);
without a reason it says the answer did not complete the task."""

from __future__ import annotations

from bot.agent.state import StopReason
from bot.agent.work_done import NOT_VERIFIED
from bot.slack.blockkit import validate
from bot.slack.status_blocks import ending_message


def incomplete(error: str | None) -> str:
    message = ending_message(
        StopReason.INCOMPLETE,
        job_id="J1",
        iterations=4,
        max_iterations=20,
        tokens=1_000,
        token_budget=200_000,
        tools_run=2,
        error=error,
    )
    validate(message)
    return message.text


def test_a_change_not_verified() -> None:
    text = incomplete(NOT_VERIFIED.format(tool="supervisor_restart"))
    assert text.startswith(
        "Not done: the change was not verified: no read-only check ran after "
        "supervisor_restart · `incomplete`\n"
    )


def test_what_the_model_was_blocked_on_is_escaped_on_one_line() -> None:
    text = incomplete("blocked: <!channel> to approve\nthe DB login")
    assert text.startswith(
        "Not done: blocked: &lt;!channel&gt; to approve the DB login · `incomplete`\n"
    )


def test_without_a_reason() -> None:
    assert incomplete(None).startswith(
        "Stopped: the answer did not complete the task · `incomplete`\n"
    )
