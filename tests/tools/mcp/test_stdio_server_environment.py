"""A stdio server starts with a clean environment (as command tools do) plus its
declared ``env``, whose ``${NAME}`` references read the bot's environment; the bot's
credentials never reach it."""

from __future__ import annotations

import json
import os

from bot.agent.tools import CallContext
from tests.tools.mcp.conftest import Connect


async def test_clean_environment_with_declared_env(
    connect: Connect, everything_server: list[str]
) -> None:
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": "/home/opsloop",
        "SLACK_BOT_TOKEN": "xoxb-secret-token",
        "KUBECONFIG": "/etc/kube/config",
    }
    catalog = await connect(
        f"""
        mcp_servers:
          - name: every
            command: {json.dumps(everything_server)}
            env: {{KUBECONFIG: "${{KUBECONFIG}}", MODE: "plain"}}
        """,
        environ=environ,
    )
    tool = catalog.tools["every_get-env"]
    out = str(
        await tool.execute(tool.args_model.model_validate({}), CallContext(job_id="j", call_id="c"))
    )
    env = json.loads(out[out.index("{") :])
    assert set(env) == {"PATH", "HOME", "LANG", "KUBECONFIG", "MODE"}
    assert env["KUBECONFIG"] == "/etc/kube/config"
    assert env["MODE"] == "plain"
    assert env["HOME"] == "/home/opsloop"
    assert "xoxb-secret-token" not in out


async def test_an_unset_reference_is_reported(
    connect: Connect, everything_server: list[str]
) -> None:
    catalog = await connect(
        f"""
        mcp_servers:
          - name: every
            command: {json.dumps(everything_server)}
            env: {{TOKEN: "${{NOT_SET_ANYWHERE}}"}}
        """,
        environ={"PATH": os.environ["PATH"]},
    )
    [report] = catalog.mcp_reports
    assert report.error is not None and "${NOT_SET_ANYWHERE} is not set" in report.error
