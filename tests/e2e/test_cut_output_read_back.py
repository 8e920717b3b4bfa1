"""A long tool output is cut for the model, and the model reads the rest back through
Slack's job: `opsloop serve` as a process, a real command tool printing a long log, the
cut result's last line naming `read_artifact(ref="REF")`, the model's `read_artifact` call
answered from Redis with the numbered matching lines, counted like every tool run."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack

from .approvals_kit import texts, wait_until
from .conftest import StartBot
from .harness import ScriptedModel, mention
from .test_metrics import scrape, value

LOG_SCRIPT = """\
for n in range(1, 1001):
    print(f"{n:05d} " + ("ERROR 502 from upstream api-2" if n % 250 == 0 else "GET /healthz 200"))
"""
ERRORS = [250, 500, 750, 1000]  # the cut shows about 170 lines
NOTE = re.compile(r'read_artifact\(ref="([^"]+)"\)\]$')


def tools_yml(tmp_path: Path) -> str:
    script = tmp_path / "log.py"
    script.write_text(LOG_SCRIPT)
    path = tmp_path / "tools.yml"
    path.write_text(
        f"""\
tools:
  - name: web_log
    description: The web service's log.
    params:
      host: {{type: string, pattern: "^[a-z0-9-]+$", description: Host name}}
    run: ["{sys.executable}", "{script}", "{{host}}"]
"""
    )
    return str(path)


def tool_results(request: ScriptedRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m.get("role") == "tool"]


async def test_the_model_reads_the_errors_of_a_cut_log(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    def policy(request: ScriptedRequest) -> Reply:
        results = tool_results(request)
        if not results:
            return Reply(
                content="Reading the log.",
                tool_calls=[ScriptedCall("web_log", {"host": "web-03"})],
            )
        if len(results) == 1:
            found = NOTE.search(results[0].splitlines()[-1])
            assert found is not None, results[0][-300:]
            args = {"ref": found[1], "contains": "ERROR"}
            return Reply(
                content="Looking for errors.", tool_calls=[ScriptedCall("read_artifact", args)]
            )
        return Reply(content=f"{len(results[1].splitlines()) - 1} errors in the log.")

    model.policy = policy  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools_yml(tmp_path))
    event = mention("C1", "U1", "why does web-03 return 502s?")

    assert (await serve.send(event))[0] == 200
    await slack.wait_for(
        lambda: "4 errors in the log." in texts(slack, "C1", event["ts"]), timeout=30
    )

    first, second, third = model.requests
    cut = tool_results(second)[0]
    assert cut.startswith("00001 GET /healthz 200\n") and "ERROR" not in cut
    assert NOTE.search(cut.splitlines()[-1])
    read = tool_results(third)[1].splitlines()
    assert read[0].endswith(
        '4 lines contain "ERROR" (case-insensitive, searched from line 1 of 1000); 4 shown'
    )
    assert read[1:] == [f"{n}: {n:05d} ERROR 502 from upstream api-2" for n in ERRORS]
    # Offered from the first request, before anything was cut; the tools block is fixed.
    names = [t["function"]["name"] for t in first.tools]
    assert sorted(names) == ["read_artifact", "search_past_incidents", "web_log"]
    assert first.tools == second.tools == third.tools

    async def counted() -> bool:  # the one tool path: metrics like every tool run
        samples = await scrape(serve)
        return (
            value(samples, "opsloop_tool_executions_total", tool="read_artifact", outcome="ok") == 1
        )

    await wait_until(counted, timeout=10, what="read_artifact counted")
