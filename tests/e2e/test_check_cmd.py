"""``opsloop check`` as a real process against real parts: the fake Slack Web API, the
scripted model server, a real redis-server, a real Alertmanager and supervisord. It
reports each backend in one line (``ok``, ``warn``, ``FAIL``), exits 0, 1 or 2, changes
nothing, and never prints a token, key or password."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio as aioredis

from bot.agent.redact import REDACTED
from bot.emulator.kube_api import FakeKube
from bot.emulator.postgres_server import PASSWORDS, PgCluster
from bot.emulator.redis_server import ManagedRedis, free_port
from bot.emulator.slack import FakeSlack
from bot.settings import PURPOSES
from tests.tools.packs.backends import (  # noqa: F401  (alertmanager_server is a fixture)
    AlertmanagerServer,
    alertmanager_server,
)
from tests.tools.packs.kube_backend import kube_fixture  # noqa: F401  (the ``kube`` fixture)
from tests.tools.packs.postgres_backend import pg_cluster  # noqa: F401  (a fixture)
from tests.tools.packs.supervisor_backend import ManagedSupervisor

from .approvals_kit import tools_yml
from .harness import BOT_TOKEN, LLM_API_KEY, LLM_MODEL, SIGNING_SECRET, ScriptedModel, bot_env

CHECK_TIMEOUT_S = 60.0  # a hang guard for the whole process
APP_TOKEN = "xapp-1-A0OPSLOOP-1-0123456789abcdef"
SUPERVISOR_PASSWORD = "sup-pw-0123456789"
REDIS_PASSWORD = "redis-pw-0123456789"


@dataclass(frozen=True)
class Checked:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    def line(self, name: str) -> str:
        """The one line of the check ``name`` (``redis``, ``pack supervisor``)."""
        found = [line for line in self.lines if line[6:].startswith(f"{name}: ")]
        assert len(found) == 1, self.out
        return found[0]

    def shows_no(self, *secrets: str) -> None:
        text = self.out + self.err
        for secret in secrets:
            assert secret not in text, text
        assert REDACTED not in text, text  # nothing secret was even about to be printed


async def opsloop_check(env: Mapping[str, str], *args: str, cwd: Path) -> Checked:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "check",
        *args,
        env=dict(env),
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=CHECK_TIMEOUT_S)
    assert proc.returncode is not None
    return Checked(proc.returncode, out.decode(), err.decode())


def environment(
    slack: FakeSlack, redis: ManagedRedis, model: ScriptedModel, **extra: str | None
) -> dict[str, str]:
    # The scripted model lists its model and knows the test's key: a real endpoint.
    model.server.models = [LLM_MODEL]
    model.server.api_key = model.server.api_key or LLM_API_KEY
    return bot_env(slack, redis, model, extra=extra)


async def test_everything_answers_so_every_check_passes(
    slack: FakeSlack,
    redis_server: ManagedRedis,
    model: ScriptedModel,
    alertmanager_server: AlertmanagerServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    tools, _ = tools_yml(tmp_path)
    (tmp_path / "logs").mkdir()
    with ManagedSupervisor(tmp_path / "sup", [], auth=("ops", SUPERVISOR_PASSWORD)) as sup:
        checked = await opsloop_check(
            environment(
                slack,
                redis_server,
                model,
                OPSLOOP_TOOLS=tools,
                OPSLOOP_PACKS="host,http,alertmanager,supervisor",
                OPSLOOP_LOG_DIRS=str(tmp_path / "logs"),
                ALERTMANAGER_URL=alertmanager_server.url,
                SUPERVISOR_URL=sup.url,
            ),
            cwd=tmp_path,
        )
    assert checked.code == 0, checked
    assert all(line[:6] in ("ok    ", "warn  ") for line in checked.lines[:-1]), checked.out
    assert checked.lines[-1] == f"all {len(checked.lines) - 1} checks passed"
    assert checked.line("settings") == (
        "ok    settings: serve has SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, REDIS_URL, LLM_MODEL"
    )
    assert checked.line("redis").startswith("ok    redis: redis ")
    assert checked.line("redis").endswith(f" at 127.0.0.1:{redis_server.port}, appendfsync always")
    assert checked.line("slack") == "ok    slack: auth.test as @opsloop (UBOT) in T1"
    assert checked.line("model") == (
        f"ok    model: {LLM_MODEL} at {model.base_url} answered GET /models (200)"
    )
    assert checked.line("tools") == (
        "ok    tools: 16 tools (host: 5, http: 1, alertmanager: 4, supervisor: 3, tools.yml: 3)"
    )
    assert checked.line("pack host").startswith("ok    pack host: log directories present: ")
    assert checked.line("pack alertmanager") == (
        f"ok    pack alertmanager: {alertmanager_server.url} ready"
    )
    assert checked.line("pack supervisor") == (
        f"ok    pack supervisor: http://127.0.0.1:{sup.port}/RPC2: supervisord RUNNING"
    )
    # Nothing was changed and no tokens were spent: one auth.test, one model list.
    assert [call.method for call in slack.calls] == ["auth.test"]
    assert [(r.path, r.headers.get("authorization")) for r in model.requests] == [
        ("/v1/models", f"Bearer {LLM_API_KEY}")
    ]
    checked.shows_no(BOT_TOKEN, LLM_API_KEY, SIGNING_SECRET, SUPERVISOR_PASSWORD)


async def test_the_kubernetes_and_postgres_packs_are_probed_read_only(
    slack: FakeSlack,
    redis_server: ManagedRedis,
    model: ScriptedModel,
    kube: FakeKube,
    pg_cluster: PgCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    kubeconfig = kube.kubeconfig(tmp_path / "kube" / "config")
    checked = await opsloop_check(
        environment(
            slack,
            redis_server,
            model,
            OPSLOOP_PACKS="kubernetes,postgres",
            KUBECONFIG=str(kubeconfig),
            OPSLOOP_K8S_NAMESPACES="web,payments",
            POSTGRES_URL=pg_cluster.url(),
        ),
        cwd=tmp_path,
    )
    assert checked.line("pack kubernetes") == (
        f"ok    pack kubernetes: context kind-prod, {kube.url}: server v1.29.4, "
        "namespaces web,payments"
    )
    assert checked.line("pack postgres").startswith("ok    pack postgres: "), checked.out
    assert "PostgreSQL 15" in checked.line("pack postgres")
    assert checked.line("tools") == "ok    tools: 14 tools (kubernetes: 7, postgres: 7)"
    assert not kube.received("PATCH") and not kube.received("DELETE")
    checked.shows_no(BOT_TOKEN, LLM_API_KEY, SIGNING_SECRET, PASSWORDS["opsloop_ro"])


async def test_a_redis_that_never_answers_is_a_failed_check_not_a_hang(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    """A server that accepts the connection and says nothing: the probe's own bound
    ends it (the line says so), not the test's hang guard."""
    accepted: list[asyncio.StreamWriter] = []

    async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        env = environment(slack, redis_server, model, REDIS_URL=f"redis://127.0.0.1:{port}/0")
        checked = await opsloop_check(env, cwd=tmp_path)
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()
    assert accepted, "the check never connected"
    assert checked.code == 1, checked
    assert checked.line("redis") == (
        f"FAIL  redis: 127.0.0.1:{port}: no answer to PING within 2s"
    ), checked.out


async def test_redis_down_is_a_failed_check(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    port = free_port()  # nothing listens there
    env = environment(slack, redis_server, model, REDIS_URL=f"redis://127.0.0.1:{port}/0")
    checked = await opsloop_check(env, cwd=tmp_path)
    assert checked.code == 1, checked
    assert checked.line("redis").startswith(f"FAIL  redis: 127.0.0.1:{port}: "), checked.out
    assert checked.lines[-1] == "1 check failed"


async def test_redis_password_is_never_shown(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    locked = ManagedRedis(tmp_path / "redis").start()
    try:
        client = aioredis.Redis.from_url(locked.url)
        try:
            await client.config_set("requirepass", REDIS_PASSWORD)
        finally:
            await client.aclose()
        url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:{locked.port}/0"
        checked = await opsloop_check(
            environment(slack, redis_server, model, REDIS_URL=url), cwd=tmp_path
        )
        assert checked.code == 0, checked
        assert checked.line("redis").endswith(f" at 127.0.0.1:{locked.port}, appendfsync always")
        checked.shows_no(REDIS_PASSWORD)

        wrong = "wrong-pw-0123456789"
        bad = f"redis://:{wrong}@127.0.0.1:{locked.port}/0"
        checked = await opsloop_check(
            environment(slack, redis_server, model, REDIS_URL=bad), cwd=tmp_path
        )
        assert checked.code == 1, checked
        assert checked.line("redis").startswith(f"FAIL  redis: 127.0.0.1:{locked.port}: ")
        checked.shows_no(wrong)
    finally:
        locked.stop()


async def test_weaker_or_unknown_redis_durability_is_a_warning(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    weak = ManagedRedis(tmp_path / "redis", fsync="everysec").start()
    try:
        checked = await opsloop_check(
            environment(slack, redis_server, model, REDIS_URL=weak.url), cwd=tmp_path
        )
        assert checked.code == 0, checked
        assert checked.line("redis").startswith("warn  redis: redis ")
        assert checked.line("redis").endswith(
            f" at 127.0.0.1:{weak.port}; AOF appendfsync everysec: a crash of the machine "
            "may lose about 1 s of writes"
        )

        # A user without CONFIG (managed Redis services often deny it): unknown, not a FAIL.
        client = aioredis.Redis.from_url(weak.url)
        try:
            await client.acl_setuser(
                "bot",
                enabled=True,
                passwords=[f"+{REDIS_PASSWORD}"],
                keys=["*"],
                commands=["+@all", "-config"],
            )
        finally:
            await client.aclose()
        url = f"redis://bot:{REDIS_PASSWORD}@127.0.0.1:{weak.port}/0"
        checked = await opsloop_check(
            environment(slack, redis_server, model, REDIS_URL=url), cwd=tmp_path
        )
        assert checked.code == 0, checked
        assert checked.line("redis").endswith(
            f" at 127.0.0.1:{weak.port}; durability unknown (CONFIG not allowed)"
        )
        checked.shows_no(REDIS_PASSWORD)
    finally:
        weak.stop()


async def test_a_bad_slack_token_fails_naming_slacks_error(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    token = "not-a-bot-token-0123456789"
    env = environment(slack, redis_server, model, SLACK_BOT_TOKEN=token)
    checked = await opsloop_check(env, cwd=tmp_path)
    assert checked.code == 1, checked
    assert checked.line("slack") == (
        "FAIL  slack: auth.test refused: invalid_auth (check SLACK_BOT_TOKEN)"
    )
    assert checked.lines[-1] == "1 check failed"
    checked.shows_no(token)


async def test_the_model_endpoint_refusing_the_key_fails(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    model.server.api_key = "sk-the-right-key-0123456789"
    checked = await opsloop_check(environment(slack, redis_server, model), cwd=tmp_path)
    assert checked.code == 1, checked
    assert checked.line("model") == (
        f"FAIL  model: {LLM_MODEL} at {model.base_url}: authentication refused (401); "
        "check LLM_API_KEY"
    )
    checked.shows_no(LLM_API_KEY, "sk-the-right-key-0123456789")


async def test_a_model_the_endpoint_does_not_list_or_no_list_is_a_warning(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    env = environment(slack, redis_server, model, LLM_FALLBACK_MODELS="other-model")
    checked = await opsloop_check(env, cwd=tmp_path)
    assert checked.code == 0, checked
    assert checked.line("model") == (
        f"warn  model: {LLM_MODEL}, other-model at {model.base_url} answered GET /models (200), "
        "but LLM_FALLBACK_MODELS other-model not listed by the endpoint"
    )
    assert checked.lines[-1].startswith("all ")

    no_list = f"{model.server.root_url}/elsewhere"
    env = environment(slack, redis_server, model, LLM_BASE_URL=no_list)
    checked = await opsloop_check(env, cwd=tmp_path)
    assert checked.code == 0, checked
    assert checked.line("model") == (
        f"warn  model: {LLM_MODEL} at {no_list}: endpoint has no /models (404); not verified"
    )


async def test_anthropic_and_fallback_endpoints_are_each_checked_with_their_own_key(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    closed = free_port()  # nothing listens there
    env = environment(
        slack,
        redis_server,
        model,
        LLM_PROVIDER="anthropic",
        LLM_BASE_URL=model.server.root_url,
        LLM_FALLBACK_MODELS=f"{LLM_MODEL}-small,openai:gpt-x",
        OPENAI_BASE_URL=f"http://127.0.0.1:{closed}/v1",
        OPENAI_API_KEY="sk-openai-fallback-0123456789",
    )
    checked = await opsloop_check(env, cwd=tmp_path)
    assert checked.code == 1, checked
    assert checked.line("model") == (
        f"warn  model: {LLM_MODEL}, {LLM_MODEL}-small at {model.server.root_url} answered "
        f"GET /v1/models (200), but LLM_FALLBACK_MODELS {LLM_MODEL}-small not listed by the "
        "endpoint"
    )
    assert checked.line("model openai:gpt-x") == (
        f"FAIL  model openai:gpt-x: gpt-x at http://127.0.0.1:{closed}/v1: "
        "cannot connect (connection refused)"
    )
    (listing,) = model.requests
    assert listing.path == "/v1/models" and listing.headers["x-api-key"] == LLM_API_KEY
    assert listing.headers["anthropic-version"] == "2023-06-01"
    checked.shows_no(LLM_API_KEY, "sk-openai-fallback-0123456789")

    model.server.api_key = "sk-ant-the-right-key-0123456789"
    env = environment(
        slack, redis_server, model, LLM_PROVIDER="anthropic", LLM_BASE_URL=model.server.root_url
    )
    checked = await opsloop_check(env, cwd=tmp_path)
    assert checked.code == 1, checked
    assert checked.line("model") == (
        f"FAIL  model: {LLM_MODEL} at {model.server.root_url}: authentication refused (401); "
        "check LLM_API_KEY"
    )


async def test_a_missing_variable_exits_2_naming_it(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    env = environment(slack, redis_server, model, SLACK_SIGNING_SECRET=None)
    checked = await opsloop_check(env, cwd=tmp_path)
    assert (checked.code, checked.out) == (2, "")
    assert checked.err.splitlines()[:2] == [
        "opsloop: 1 setting to fix before `opsloop serve` can start:",
        f"  SLACK_SIGNING_SECRET: required — {PURPOSES['SLACK_SIGNING_SECRET']}",
    ]

    env = environment(slack, redis_server, model, OPSLOOP_MAX_ITERATIONS="many", LLM_MODEL=None)
    checked = await opsloop_check(env, cwd=tmp_path)
    assert (checked.code, checked.out) == (2, "")
    assert checked.err.startswith("opsloop: 2 settings to fix"), checked.err
    assert "  LLM_MODEL: required — " in checked.err, checked.err
    assert "  OPSLOOP_MAX_ITERATIONS: " in checked.err, checked.err
    assert slack.calls == [] and model.requests == []  # nothing else was checked


async def test_socket_mode_needs_the_app_token_not_the_signing_secret(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    socket = {"SLACK_SIGNING_SECRET": None, "SLACK_APP_TOKEN": APP_TOKEN}
    env = environment(slack, redis_server, model, **socket)
    checked = await opsloop_check(env, "--mode", "socket", cwd=tmp_path)
    assert checked.code == 0, checked
    assert checked.line("settings") == (
        "ok    settings: socket has SLACK_BOT_TOKEN, SLACK_APP_TOKEN, REDIS_URL, LLM_MODEL"
    )
    assert checked.line("slack app").startswith("ok    slack app: SLACK_APP_TOKEN is an app-level")
    assert "apps.connections.open" not in [call.method for call in slack.calls]
    checked.shows_no(APP_TOKEN, BOT_TOKEN)

    env = environment(slack, redis_server, model, **{**socket, "SLACK_APP_TOKEN": "xoxb-2-wrong"})
    checked = await opsloop_check(env, "--mode", "socket", cwd=tmp_path)
    assert checked.code == 0, checked
    assert checked.line("slack app").startswith("warn  slack app: SLACK_APP_TOKEN does not start")

    env = environment(slack, redis_server, model, SLACK_SIGNING_SECRET=None)
    checked = await opsloop_check(env, "--mode", "socket", cwd=tmp_path)
    assert checked.code == 2, checked
    assert checked.err.splitlines()[1].startswith("  SLACK_APP_TOKEN: required — "), checked


async def test_pack_backends_down_fail_each_in_its_own_line(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    prometheus, supervisor = free_port(), free_port()  # nothing listens there
    env = environment(
        slack,
        redis_server,
        model,
        OPSLOOP_PACKS="host,prometheus,supervisor",
        OPSLOOP_LOG_DIRS=str(tmp_path / "no-such-dir"),
        PROMETHEUS_URL=f"http://ops:{SUPERVISOR_PASSWORD}@127.0.0.1:{prometheus}",
        SUPERVISOR_URL=f"http://ops:{SUPERVISOR_PASSWORD}@127.0.0.1:{supervisor}",
    )
    checked = await opsloop_check(env, cwd=tmp_path)
    assert checked.code == 1, checked
    assert checked.line("tools") == "ok    tools: 12 tools (host: 5, prometheus: 4, supervisor: 3)"
    assert checked.line("pack host") == (
        f"warn  pack host: OPSLOOP_LOG_DIRS names missing directories {tmp_path / 'no-such-dir'}"
    )
    assert checked.line("pack prometheus") == (
        f"FAIL  pack prometheus: http://127.0.0.1:{prometheus}: connection refused"
    )
    assert checked.line("pack supervisor") == (
        f"FAIL  pack supervisor: supervisor at http://127.0.0.1:{supervisor}/RPC2 is "
        "unreachable: Connection refused"
    )
    assert checked.lines[-1] == "2 checks failed"
    checked.shows_no(SUPERVISOR_PASSWORD)


async def test_a_pack_without_its_backend_url_fails_the_tools(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    env = environment(slack, redis_server, model, OPSLOOP_PACKS="prometheus")
    checked = await opsloop_check(env, cwd=tmp_path)
    assert checked.code == 1, checked
    assert checked.line("tools") == (
        "FAIL  tools: PROMETHEUS_URL is required for the prometheus pack"
    )
    assert not any(line[6:].startswith("pack prometheus") for line in checked.lines)


async def test_no_approvers_is_a_warning_that_anyone_may_approve(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    checked = await opsloop_check(environment(slack, redis_server, model), cwd=tmp_path)
    assert checked.code == 0, checked  # a warning: the exit status is unchanged
    assert checked.line("approvers") == (
        "warn  approvers: OPSLOOP_APPROVERS is not set: anyone in the workspace may approve "
        "a change (set it to the user ids U… and user group ids S… who may)"
    )
    assert checked.lines[-1] == f"all {len(checked.lines) - 1} checks passed"

    env = environment(slack, redis_server, model, OPSLOOP_APPROVERS="U0BOB, S0ONCALL")
    checked = await opsloop_check(env, cwd=tmp_path)
    assert checked.code == 0, checked
    assert checked.line("approvers") == (
        "ok    approvers: only U0BOB, S0ONCALL may approve a change"
    )


async def test_alert_routes_are_read_and_every_mistake_named_by_line(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    routes = tmp_path / "alerts.yml"
    routes.write_text(
        "routes:\n"
        "  - match: {severity: critical}\n"
        "    channel: C0INCIDENTS\n"
        "  - match: {team: /pay.*/}\n"
        "    channel: C0PAYMENTS\n"
        "    investigate: read_only\n"
        "default_channel: C0ALERTS\n"
    )
    token = "alert-token-0123456789"
    env = environment(
        slack, redis_server, model, OPSLOOP_ALERTS_TOKEN=token, OPSLOOP_ALERTS=str(routes)
    )
    checked = await opsloop_check(env, cwd=tmp_path)
    assert checked.code == 0, checked
    assert checked.line("alerts") == (
        "ok    alerts: POST /alerts/alertmanager on: 2 routes, default C0ALERTS; channels "
        "C0INCIDENTS, C0PAYMENTS, C0ALERTS; at most 20 investigations an hour"
    )
    checked.shows_no(token)

    routes.write_text(
        "routes:\n  - match: {severity: '/[/'}\n    channel: general\n    investigate: maybe\n"
    )
    checked = await opsloop_check(env, cwd=tmp_path)
    assert checked.code == 1, checked
    line = checked.line("alerts")
    assert line.startswith("FAIL  alerts: OPSLOOP_ALERTS: ")
    for where in (f"{routes}:2", f"{routes}:3", f"{routes}:4"):
        assert where in line, line

    no_routes = environment(slack, redis_server, model, OPSLOOP_ALERTS_TOKEN=token)
    checked = await opsloop_check(no_routes, cwd=tmp_path)
    assert checked.code == 1 and "no OPSLOOP_ALERTS or" in checked.line("alerts"), checked


async def test_runbooks_are_counted_with_the_alerts_they_cover_and_skipped_files_named(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    folder = tmp_path / "runbooks"
    (folder / "web").mkdir(parents=True)
    (folder / "web" / "errors.md").write_text(
        "---\ntitle: Web errors\nalerts: [WebErrorRateHigh, Web5xx]\n---\n# Web errors\n\n"
        "## Triage\n1. Check health.\n\n## Restart\n1. Propose it.\n"
    )
    (folder / "disk.md").write_text("---\nalerts: [DiskFull]\n---\n# Disk\n\n## Free space\n")
    (folder / "broken.md").write_text("---\ntitle: [unclosed\n---\n# Broken\n")
    env = environment(slack, redis_server, model, OPSLOOP_RUNBOOKS=str(folder))
    checked = await opsloop_check(env, cwd=tmp_path)
    assert checked.code == 0, checked
    line = checked.line("runbooks")
    assert line.startswith(
        f"warn  runbooks: 2 runbooks, 5 sections indexed from {folder}; alerts covered: "
        "DiskFull, Web5xx, WebErrorRateHigh; skipped broken.md:3 (front matter is not valid YAML"
    ), line
    (folder / "broken.md").unlink()
    checked = await opsloop_check(env, cwd=tmp_path)
    assert checked.line("runbooks").startswith("ok    runbooks: 2 runbooks"), checked

    missing = environment(slack, redis_server, model, OPSLOOP_RUNBOOKS=str(tmp_path / "none"))
    checked = await opsloop_check(missing, cwd=tmp_path)
    assert checked.code == 1 and "not a directory" in checked.line("runbooks"), checked
