"""``investigate: read_only`` in the ``OPSLOOP_ALERTS`` routes: the job an alert group of
that route starts is offered only the read-only tools; a group of a route that
investigates fully is offered every tool, each in its routed channel."""

from __future__ import annotations

from pathlib import Path

from bot.emulator.scripted import Reply, ScriptedRequest
from bot.emulator.slack import FakeSlack

from .alerts_kit import ANSWER, TOKEN, notification, post_alert, replies, roots
from .approvals_kit import tools_yml
from .conftest import StartBot
from .harness import ScriptedModel

WRITES = {"restart_service", "delete_pod"}  # tools_yml's mutating and destructive tools
ROUTES = """\
routes:
  - match: {team: payments}
    channel: C0PAYMENTS
    investigate: read_only
  - match: {team: /web|edge/}
    channel: C0WEB
default_channel: C0ALERTS
"""


def offered(request: ScriptedRequest) -> set[str]:
    return {tool["function"]["name"] for tool in request.tools}


def asked_about(requests: list[ScriptedRequest], name: str) -> ScriptedRequest:
    [found] = [r for r in requests if name in str(r.messages)]
    return found


async def test_a_read_only_route_offers_its_job_only_read_only_tools(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, _ = tools_yml(tmp_path)
    routes = tmp_path / "alerts.yml"
    routes.write_text(ROUTES)
    model.policy = lambda _: Reply(content=ANSWER)
    serve = await bot(OPSLOOP_ALERTS_TOKEN=TOKEN, OPSLOOP_ALERTS=str(routes), OPSLOOP_TOOLS=tools)

    payments = notification(("pay-01", "firing"), name="PaymentsLatency", team="payments")
    web = notification(("web-03", "firing"), name="WebErrors", team="web")
    for body in (payments, web):
        status, answer = await post_alert(serve, body)
        assert (status, answer.get("outcome")) == (200, "opened")
    await model.wait_for(lambda requests: len(requests) == 2, timeout=30)

    full = offered(asked_about(model.requests, "WebErrors"))
    read_only = offered(asked_about(model.requests, "PaymentsLatency"))
    assert {"check_host", *WRITES} <= full
    assert read_only == full - WRITES  # every tool but those that change something

    def answered(channel: str) -> bool:
        return any(r.text == ANSWER for m in roots(slack, channel) for r in replies(slack, m))

    await slack.wait_for(lambda: answered("C0PAYMENTS") and answered("C0WEB"), timeout=30)
    assert len(roots(slack, "C0PAYMENTS")) == len(roots(slack, "C0WEB")) == 1
    assert roots(slack) == []  # nothing fell through to the default channel
