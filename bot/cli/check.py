"""``opsloop check``: the pre-flight check before going live (or in a deploy pipeline or an
init container).

It reads the same environment as ``serve`` (or ``socket`` with ``--mode socket``) and
checks, without changing anything: the settings, every problem in them listed at once
(``bot.cli.settings_problems``, exit 2, as ``serve`` lists them), and who may approve
(``OPSLOOP_APPROVERS`` unset is a warning: anyone in the workspace may); Redis (PING,
version, durability); Slack (``auth.test`` with the bot token; in Socket Mode the app
token's shape); each model endpoint of the chain (``GET …/models``, which spends no
tokens); the tool catalogue, built exactly as ``serve`` builds it; and each enabled pack's
backend (a read-only probe). One line per check, ``ok``, ``warn`` or ``FAIL``, then a
summary. Exit 0 when nothing failed, 1 when a check failed, 2 for settings to fix.

What it owns is the checks and their verdicts; how each backend is reached is reused from
its owner (the store's ``connect``, slack-sdk, ``parse_chain`` and ``make_http_client``,
the catalogue, the supervisor pack's client). Every line passes through the bot's
``Scrubber``, and addresses are shown without credentials: no token, key or password is
ever printed.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import re
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal, TypeVar
from urllib.parse import urlsplit

import aiohttp
import httpx
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import logs
from bot.alerts.routes import configured
from bot.cli.settings_problems import REQUIRED, Mode, gather, report
from bot.errors import ConfigError, StoreError, ToolError
from bot.llm import anthropic, openai
from bot.llm.chain import PREFIXES, ModelSpec
from bot.llm.http import make_http_client
from bot.scrub import Scrubber
from bot.settings import BotSettings, LLMSettings, ToolSettings
from bot.store.connection import (
    RedisTarget,
    StoreUnavailable,
    connect,
    durability,
    translated,
)
from tools.packs import PackConfig
from tools.packs.supervisor_rpc import SupervisorClient
from tools.registry import BUILTIN, open_catalog

T = TypeVar("T")

NO_APPROVERS = (
    "OPSLOOP_APPROVERS is not set: anyone in the workspace may approve a change "
    "(set it to the user ids U… and user group ids S… who may)"
)
REDIS_TIMEOUT_S = 2.0
HTTP_TIMEOUT_S = 5.0  # Slack, each model endpoint, each pack backend
PROBE_TIMEOUT_S = 10.0  # a pack's own probe (it bounds its own requests more tightly)
ANTHROPIC_LIST_LIMIT = 1000  # the API's largest page: one request sees every model
BODY_CHARS = 160  # of a backend's answer quoted in a FAIL line
MAX_SKIPPED_SHOWN = 5  # runbook files named in the runbooks line
APP_HINT = "xapp-: Socket Mode needs an app-level token with connections:write"


@dataclass(frozen=True, slots=True)
class Verdict:
    status: Literal["ok", "warn", "FAIL"]
    name: str
    detail: str

    def line(self) -> str:
        return f"{self.status:<6}{self.name}: {self.detail}"


ok = partial(Verdict, "ok")
warn = partial(Verdict, "warn")
fail = partial(Verdict, "FAIL")


@dataclass(frozen=True, slots=True)
class Config:
    mode: Mode
    bot: BotSettings
    llm: LLMSettings
    tools: ToolSettings
    chain: Sequence[ModelSpec] = ()


@dataclass(slots=True)
class Endpoint:
    """One model endpoint of the chain, with every model the chain uses on it."""

    spec: ModelSpec  # the first model on it: URL, key, provider
    key_variable: str
    primary: bool
    models: list[tuple[str, str]] = field(default_factory=list)  # (variable, model name)


def check_settings(config: Config) -> list[Verdict]:
    """What ``main`` found in the settings (every problem stops it before this, exit 2),
    and who may approve: nobody named is a warning, since then anyone may."""
    names = ", ".join(REQUIRED[config.mode])
    found = [ok("settings", f"{config.mode} has {names}")]
    approvers = config.bot.approver_ids
    if approvers:
        found.append(ok("approvers", f"only {', '.join(approvers)} may approve a change"))
    else:
        found.append(warn("approvers", NO_APPROVERS))
    return found


def check_alerts(bot: BotSettings) -> list[Verdict]:
    """``POST /alerts/alertmanager``: off without its token; with it, the routes must read
    (every mistake named with its line) and something must take the alerts."""
    routes_set = bool(bot.alerts_file or bot.alerts_channel)
    if not bot.alerts_token:
        if routes_set:
            return [
                warn("alerts", "routes are set but OPSLOOP_ALERTS_TOKEN is not: alerts are off")
            ]
        return []
    try:
        routes = configured(bot.alerts_file, bot.alerts_channel)
    except ConfigError as exc:
        return [fail("alerts", str(exc))]
    if routes is None:
        return [
            fail(
                "alerts",
                "OPSLOOP_ALERTS_TOKEN is set but no OPSLOOP_ALERTS or "
                "OPSLOOP_ALERTS_CHANNEL says where alerts go (every one would get 422)",
            )
        ]
    default = f", default {routes.default.channel}" if routes.default is not None else ""
    count = len(routes.routes)
    return [
        ok(
            "alerts",
            f"POST /alerts/alertmanager on: {count} route{'s' * (count != 1)}{default}; "
            f"channels {', '.join(routes.channels)}; at most "
            f"{bot.alert_investigations_per_hour} investigations an hour",
        )
    ]


def check_runbooks(bot: BotSettings) -> list[Verdict]:
    """``OPSLOOP_RUNBOOKS``: how many runbooks and sections are indexed, which alert names
    they cover, and every file skipped (named with its line)."""
    if not bot.runbooks_dir:
        return []
    from bot.knowledge.runbooks import Runbooks  # noqa: PLC0415 (only when set)

    root = Path(bot.runbooks_dir)
    if not root.is_dir():
        return [fail("runbooks", f"OPSLOOP_RUNBOOKS={bot.runbooks_dir}: not a directory")]
    summary = Runbooks(root, base_url=bot.runbooks_url).summary()
    alerts = ", ".join(summary.alerts) if summary.alerts else "none"
    detail = (
        f"{summary.files} runbook{'s' * (summary.files != 1)}, {summary.sections} "
        f"section{'s' * (summary.sections != 1)} indexed from {root}; alerts covered: {alerts}"
    )
    if summary.skipped:
        shown = [
            f"{path}:{line} ({reason})" if line else f"{path} ({reason})"
            for path, line, reason in summary.skipped[:MAX_SKIPPED_SHOWN]
        ]
        more = len(summary.skipped) - len(shown)
        detail += "; skipped " + "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
    good = summary.files and not summary.skipped
    return [(ok if good else warn)("runbooks", detail)]


MIN_REDIS = (7, 0)
NEEDS_REDIS = "opsloop needs Redis 7.0 or newer (Stop travels by sharded pub/sub, SPUBLISH)"


def too_old(version: str) -> bool:
    """Whether ``redis X.Y.Z`` (``check_redis``'s text) is older than ``MIN_REDIS``; an
    unknown version is not."""
    found = re.search(r"(\d+)\.(\d+)", version)
    return found is not None and (int(found[1]), int(found[2])) < MIN_REDIS


async def check_redis(url: str | RedisTarget) -> list[Verdict]:
    target = url if isinstance(url, RedisTarget) else RedisTarget(url)
    parts = urlsplit(target.url)
    where = parts.path if parts.scheme == "unix" else address(target.url, default_port=6379)
    if target.mode == "sentinel":
        where = target.where()
    try:
        redis = connect(target, socket_timeout_s=REDIS_TIMEOUT_S, connect_timeout_s=REDIS_TIMEOUT_S)
    except ValueError as exc:
        return [fail("redis", f"REDIS_URL is not a Redis URL ({exc})")]
    try:
        async with asyncio.timeout(REDIS_TIMEOUT_S), translated("PING"):
            await redis.ping()
        try:
            async with translated("INFO server"):
                version = f"redis {(await redis.info('server')).get('redis_version', '?')}"
        except StoreError as exc:
            if isinstance(exc, StoreUnavailable):
                raise
            version = "redis (version unknown)"  # INFO not allowed: no reason to fail
        setting = await durability(redis)
    except TimeoutError:
        return [fail("redis", f"{where}: no answer to PING within {REDIS_TIMEOUT_S:g}s")]
    except StoreError as exc:
        return [fail("redis", f"{where}: {_reason(exc)}")]
    finally:
        await redis.aclose()
    if too_old(version):
        return [fail("redis", f"{version} at {where}: {NEEDS_REDIS}")]
    if setting is None:
        return [warn("redis", f"{version} at {where}; durability unknown (CONFIG not allowed)")]
    if not setting.every_write:
        return [warn("redis", f"{version} at {where}; {setting.describe()}")]
    return [ok("redis", f"{version} at {where}, appendfsync always")]


async def check_slack(config: Config) -> list[Verdict]:
    bot = config.bot
    client = AsyncWebClient(
        token=bot.slack_bot_token, base_url=bot.slack_api_url, timeout=int(HTTP_TIMEOUT_S)
    )
    try:
        async with asyncio.timeout(HTTP_TIMEOUT_S * 2):  # slack-sdk retries a connection once
            answer = await client.auth_test()
        who = f"@{answer.get('user')} ({answer.get('user_id')}) in {answer.get('team_id')}"
        found = [ok("slack", f"auth.test as {who}")]
        if not answer.get("bot_id"):
            found = [warn("slack", f"auth.test as {who}, which is not a bot (no bot_id)")]
    except SlackApiError as exc:
        code = exc.response.get("error") or f"HTTP {exc.response.status_code}"
        found = [fail("slack", f"auth.test refused: {code} (check SLACK_BOT_TOKEN)")]
    except TimeoutError:
        found = [fail("slack", f"{bot.slack_api_url}: no answer to auth.test in time")]
    except (aiohttp.ClientError, OSError) as exc:
        found = [fail("slack", f"cannot reach {bot.slack_api_url}: {_reason(exc)}")]
    if config.mode == "socket":  # only its shape: opening a connection takes a ticket
        if (bot.slack_app_token or "").startswith("xapp-"):
            found.append(ok("slack app", "SLACK_APP_TOKEN is an app-level token (xapp-)"))
        else:
            found.append(warn("slack app", f"SLACK_APP_TOKEN does not start with {APP_HINT}"))
    return found


def model_endpoints(chain: Sequence[ModelSpec]) -> list[Endpoint]:
    """The chain grouped by endpoint (provider, URL, key), in chain order."""
    found: dict[tuple[str, str, str | None], Endpoint] = {}
    for index, spec in enumerate(chain):
        prefix = spec.label.partition(":")[0]
        own_key = index > 0 and prefix in PREFIXES and spec.label != spec.model
        endpoint = found.setdefault(
            (spec.provider, spec.base_url, spec.api_key),
            Endpoint(spec, f"{prefix.upper() if own_key else 'LLM'}_API_KEY", index == 0),
        )
        endpoint.models.append(("LLM_FALLBACK_MODELS" if index else "LLM_MODEL", spec.model))
    return list(found.values())


async def check_model(http: httpx.AsyncClient, endpoint: Endpoint) -> Verdict:
    """``GET …/models`` with the key, formed as ``OpenAIClient`` and ``AnthropicClient``
    form their requests: no tokens spent."""
    spec = endpoint.spec
    base = spec.base_url.rstrip("/")
    headers, params = {"accept": "application/json"}, {}
    if spec.provider == "anthropic":
        path = anthropic.api_url(base, "models").removeprefix(base)
        headers.update(anthropic.auth_headers(spec.api_key))
        params["limit"] = str(ANTHROPIC_LIST_LIMIT)
    else:
        path = "/models"
        headers.update(openai.auth_headers(spec.api_key))
    name = "model" if endpoint.primary else f"model {spec.label}"
    shown = f"{', '.join(m for _, m in endpoint.models)} at {plain_url(base)}"
    try:
        async with asyncio.timeout(HTTP_TIMEOUT_S):
            answer = await http.get(base + path, headers=headers, params=params)
    except (TimeoutError, httpx.TimeoutException):
        return fail(name, f"{shown}: no answer to GET {path} within {HTTP_TIMEOUT_S:g}s")
    except httpx.HTTPError as exc:
        return fail(name, f"{shown}: cannot connect ({_reason(exc)})")
    status = answer.status_code
    if status in (401, 403):
        refused = f"authentication refused ({status}); check {endpoint.key_variable}"
        return fail(name, f"{shown}: {refused}")
    if status in (404, 405):
        return warn(name, f"{shown}: endpoint has no {path} ({status}); not verified")
    if status == 429:
        return warn(name, f"{shown}: rate limited on GET {path} (429); not verified")
    if not 200 <= status < 300:
        return fail(name, f"{shown}: GET {path} answered HTTP {status}")
    try:  # an answer of another shape, or with more pages, cannot tell what is missing
        data = answer.json()
        ids = None if data.get("has_more") else {str(m["id"]) for m in data["data"]}
    except (ValueError, TypeError, KeyError, AttributeError):
        ids = None
    missing = [f"{v} {m}" for v, m in endpoint.models if ids and m not in ids]
    if missing:
        text = "; ".join(f"{m} not listed by the endpoint" for m in missing)
        return warn(name, f"{shown} answered GET {path} ({status}), but {text}")
    return ok(name, f"{shown} answered GET {path} ({status})")


async def check_models(config: Config, chain: Sequence[ModelSpec]) -> list[Verdict]:
    http = make_http_client(config.llm)  # the proxy and TLS settings the bot will use
    try:
        endpoints = model_endpoints(chain)
        return list(await asyncio.gather(*(check_model(http, e) for e in endpoints)))
    finally:
        await http.aclose()


async def check_tools(tools: ToolSettings) -> list[Verdict]:
    """The catalogue exactly as ``Service.open`` (``bot.service``) builds it, counted by source."""
    try:
        catalog = await open_catalog(
            pack_names=tools.pack_names,
            pack_config=PackConfig.from_settings(tools),
            tools_file=tools.tools_file,
        )
    except ConfigError as exc:
        return [fail("tools", str(exc))]
    await catalog.aclose()
    # Each MCP server: connected and its tool count, or why not.
    servers = [
        fail(f"mcp {r.name}", r.error)
        if r.error is not None
        else ok(f"mcp {r.name}", f"{r.tools} tools")
        for r in catalog.mcp_reports
    ]
    if not catalog.tools:
        return [
            warn("tools", "no tools: the model can only talk (OPSLOOP_PACKS, OPSLOOP_TOOLS)"),
            *servers,
        ]
    counts = Counter(
        s.partition(":")[2] if s.startswith(f"{BUILTIN}:") else Path(s).name
        for s in catalog.sources.values()
    )
    by_source = ", ".join(f"{source}: {n}" for source, n in counts.items())
    return [ok("tools", f"{len(catalog.tools)} tools ({by_source})"), *servers]


def check_host(log_dirs: Sequence[str]) -> Verdict:
    if not log_dirs:
        return ok("pack host", "reads this host's /proc; host_tail_log off (no OPSLOOP_LOG_DIRS)")
    missing = [d for d in log_dirs if not os.path.isdir(d)]
    if missing:
        return warn("pack host", f"OPSLOOP_LOG_DIRS names missing directories {', '.join(missing)}")
    unreadable = [d for d in log_dirs if not os.access(d, os.R_OK | os.X_OK)]
    if unreadable:
        return warn("pack host", f"cannot read {', '.join(unreadable)} (OPSLOOP_LOG_DIRS)")
    return ok("pack host", f"log directories present: {', '.join(log_dirs)}")


async def check_ready(pack: str, url: str) -> list[Verdict]:
    """``GET {url}/-/ready``: Prometheus and Alertmanager answer 200 once ready."""
    name = f"pack {pack}"
    try:
        base = httpx.URL(url.strip())
    except httpx.InvalidURL as exc:
        return [fail(name, f"not a URL ({exc})")]
    auth = (base.username, base.password) if base.username or base.password else None
    shown = plain_url(str(base))
    ready = base.copy_with(userinfo=b"", path=base.path.rstrip("/") + "/-/ready")
    try:
        async with (
            asyncio.timeout(HTTP_TIMEOUT_S),
            httpx.AsyncClient(timeout=HTTP_TIMEOUT_S, follow_redirects=False) as http,
        ):
            answer = await http.get(ready, auth=auth, headers={"User-Agent": "opsloop"})
    except (TimeoutError, httpx.TimeoutException):
        return [fail(name, f"{shown}: no answer within {HTTP_TIMEOUT_S:g}s")]
    except httpx.HTTPError as exc:
        return [fail(name, f"{shown}: {_reason(exc)}")]
    status = answer.status_code
    if status == 200:
        return [ok(name, f"{shown} ready")]
    if status in (401, 403):
        return [fail(name, f"{shown} refused the credentials (HTTP {status})")]
    body = " ".join(answer.text.split())[:BODY_CHARS] or "(empty)"
    return [fail(name, f"{shown}/-/ready answered HTTP {status}: {body}")]


async def check_supervisor(url: str) -> list[Verdict]:
    """``supervisor.getState`` through the pack's own client."""
    try:
        client = SupervisorClient(url, connect_timeout=HTTP_TIMEOUT_S)
    except ConfigError as exc:
        return [fail("pack supervisor", str(exc))]
    where = client.endpoint.shown
    try:
        async with asyncio.timeout(HTTP_TIMEOUT_S):
            state = await client.call("supervisor.getState")
    except TimeoutError:
        return [fail("pack supervisor", f"{where}: no answer within {HTTP_TIMEOUT_S:g}s")]
    except ToolError as exc:
        return [fail("pack supervisor", str(exc))]
    finally:
        await client.aclose()
    statename = state.get("statename") if isinstance(state, dict) else state
    if statename == "RUNNING":
        return [ok("pack supervisor", f"{where}: supervisord RUNNING")]
    return [warn("pack supervisor", f"{where}: supervisord is {statename}")]


def pack_checks(tools: ToolSettings) -> list[Awaitable[list[Verdict]]]:
    """A probe per enabled pack with a backend (a missing URL is the catalogue's FAIL)."""
    config = PackConfig.from_settings(tools)
    probes: list[Awaitable[list[Verdict]]] = []
    for pack in dict.fromkeys(tools.pack_names):
        if pack == "host":
            probes.append(_now([check_host(config.log_dirs)]))
        elif pack == "prometheus" and config.prometheus_url:
            probes.append(check_ready(pack, config.prometheus_url))
        elif pack == "alertmanager" and config.alertmanager_url:
            probes.append(check_ready(pack, config.alertmanager_url))
        elif pack == "supervisor" and config.supervisor_url:
            probes.append(check_supervisor(config.supervisor_url))
        elif pack == "kubernetes" or (pack == "postgres" and config.postgres_url):
            probes.append(check_pack_probe(pack, config))
    return probes


async def check_pack_probe(pack: str, config: PackConfig) -> list[Verdict]:
    """A pack's own read-only probe (``probe(config)`` in its module), bounded here too."""
    name = f"pack {pack}"
    try:
        module = importlib.import_module(f"tools.packs.{pack}")
        level, detail = await asyncio.wait_for(module.probe(config), PROBE_TIMEOUT_S)
    except ModuleNotFoundError as exc:
        return [fail(name, f"its client library is not installed ({exc.name})")]
    except TimeoutError:
        return [fail(name, f"no answer within {PROBE_TIMEOUT_S:g}s")]
    except Exception as exc:  # the probe says what it can; anything else is a FAIL line
        return [fail(name, f"{type(exc).__name__}: {exc}")]
    verdict = {"ok": ok, "warn": warn}.get(level, fail)
    return [verdict(name, detail)]


async def run(config: Config, emit: Callable[[str], None]) -> int:
    """Every check started at once, each line emitted in order as soon as it is known;
    the exit status."""
    groups: list[Awaitable[list[Verdict]]] = [
        _now(check_settings(config)),
        _now(check_alerts(config.bot)),
        _now(check_runbooks(config.bot)),
        check_redis(RedisTarget.of(config.bot)),
        check_slack(config),
        check_models(config, config.chain),
        check_tools(config.tools),
        *pack_checks(config.tools),
    ]
    tasks = [asyncio.create_task(_guarded(group)) for group in groups]
    failed = total = 0
    for task in tasks:
        for verdict in await task:
            emit(verdict.line())
            total += 1
            failed += verdict.status == "FAIL"
    emit(f"{failed} check{'s' * (failed != 1)} failed" if failed else f"all {total} checks passed")
    return 1 if failed else 0


async def _now(value: T) -> T:
    return value


async def _guarded(group: Awaitable[list[Verdict]]) -> list[Verdict]:
    """A check that breaks unexpectedly is a FAIL line, not a traceback."""
    try:
        return await group
    except Exception as exc:
        return [fail("check", f"{type(exc).__name__}: {exc}")]


def address(url: str, *, default_port: int | None = None) -> str:
    """``host:port`` of a URL: never its user or password."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    try:
        port = parts.port or default_port
    except ValueError:
        port = default_port
    return (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")


def plain_url(url: str) -> str:
    """``url`` without user, password, query or fragment, and no trailing slash."""
    return f"{urlsplit(url).scheme}://{address(url)}{urlsplit(url).path}".rstrip("/")


def _reason(exc: BaseException) -> str:
    """The OS error at the bottom of a chain (``connection refused``), else the error."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and (seen.errno or seen.strerror):
            text = str(seen.strerror or "")
            if seen.errno and (not text or text.startswith("Connect call failed")):
                text = os.strerror(seen.errno)  # asyncio's wording names no reason
            return text[:1].lower() + text[1:]
        seen = seen.__cause__ or seen.__context__
    return str(exc) or type(exc).__name__


def main(*, mode: Mode = "serve") -> int:
    """``opsloop check``: print the checklist; 0 all passed, 1 a check failed, 2 settings
    (every problem listed at once)."""
    ready = gather(mode)
    if isinstance(ready, list):
        print(report(ready, mode), file=sys.stderr)
        return 2
    bot, llm, tools = ready.bot, ready.llm, ready.tools
    # The last net, as for the bot's logs: its secrets by value (and the packs' passwords).
    secrets = [*bot.secret_values(), *llm.secret_values(), *tools.secret_values()]
    logs.configure(secrets=secrets, level=logging.WARNING)
    scrub = Scrubber(secrets)

    def emit(line: str) -> None:
        print(scrub(line), flush=True)

    return asyncio.run(run(Config(mode, bot, llm, tools, ready.chain), emit))
