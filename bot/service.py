"""The composition root: it builds the running service from settings and hands each part
what it needs through its constructor.

``Service.open`` makes, in dependency order and with constructor arguments only (nothing
is patched in afterwards): Redis, the model HTTP client and fallback chain, the system
prompt, the tool catalogue (MCP servers connected), the Slack Web API client, the paced
``chat.update`` budget, the metrics; then every store (``Stores.build``, with the caps
and the new-jobs gate this module builds from the settings: one ``Stores`` value that
every part receives; the CLI's commands get theirs the same way, through
``bot.cli.parts``), the Slack edge's ``SlackNotifier`` (how a job shows itself), the
jobs side in its parts (``build_turns``: the receiver, the runner, the cards, the
controls, each given the stores and, where it shows something, the notifier), the
process's ``Tasks`` (which take ``Turns``), the buttons' ``Interactions`` and the
message listeners (which take ``Turns`` and ``Tasks.schedule``), the ``Scanner`` (with
the card hooks of ``Interactions``) and the bolt app. ``start`` spawns the long-lived
loops; ``stopping`` begins the shutdown (no new job, the paced edit budget no longer
waited for, a bound of ``OPSLOOP_DRAIN_S`` + 5 s on the exit, forced if need be) and
``close`` drains and closes in reverse order within that bound.

``serve`` and ``socket_mode`` are ``opsloop serve`` and ``opsloop socket``: the service
behind one of the Slack edge's transports (``bot.slack.http``, ``bot.slack.socket``).
What belongs elsewhere: reading the environment (``bot.settings``), the Slack edge's
behaviour (``bot.slack``), running jobs (``bot.turns``).
"""

from __future__ import annotations

import asyncio
import gc
import importlib.metadata
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Unpack

import aiohttp
import httpx
import redis.asyncio as aioredis
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)

from bot.alerts.routes import Routes, configured
from bot.llm.chain import build_chain
from bot.llm.condense import ModelCondenser
from bot.llm.http import make_http_client
from bot.llm.prices import pricing_for
from bot.metrics import Metrics, watch_loop
from bot.otel.tracing import Tracing, TracingOptions, open_tracing
from bot.prompts import load_system_prompt
from bot.scrub import Scrubber
from bot.settings import BotSettings, LLMSettings, ToolSettings, load_otel_settings
from bot.slack import http
from bot.slack.actions import Interactions
from bot.slack.alert_poster import AlertClicks, SlackAlertPoster
from bot.slack.alert_webhook import AlertWebhook
from bot.slack.app import Messages, bolt_app
from bot.slack.assistant import PaneConfig
from bot.slack.audit_channel import AuditChannel
from bot.slack.channels import ChannelDirectory
from bot.slack.client import ScrubbingWebClient
from bot.slack.identity import BotIdentity
from bot.slack.names import Names
from bot.slack.notifier import SlackNotifier
from bot.slack.policy import ApproverPolicy
from bot.slack.progress import budget_sender
from bot.slack.redelivery import deliver_ending
from bot.slack.task_cards import TASK_CARDS
from bot.slack.updates import UpdateBudget
from bot.store.audit import AuditLog
from bot.store.connection import RedisTarget, connect, durability
from bot.store.jobs import JobLimits
from bot.store.keys import Keys
from bot.store.parts import Stores
from bot.store.quota import DailyCaps, JobAdmission, JobRate
from bot.store.replicas import Replication
from bot.turns.alerts import AlertDesk
from bot.turns.audit import AuditPublisher
from bot.turns.background import Tasks
from bot.turns.cards import Cards
from bot.turns.controls import Controls
from bot.turns.knowledge import Knowledge, Workspace
from bot.turns.parts import Turns
from bot.turns.receive import Receiver
from bot.turns.run import JobRunner, RunnerParts, TurnSettings, process_name
from bot.turns.scanner import Scanner
from bot.turns.spend import WorkspaceSpend
from tools.netpolicy import AddressPolicy
from tools.packs import PackConfig
from tools.page_text import PageReader
from tools.registry import Catalog, open_catalog

log = logging.getLogger(__name__)


def daily_caps(redis: aioredis.Redis, keys: Keys, bot: BotSettings) -> DailyCaps | None:
    """``OPSLOOP_DAILY_TOKEN_BUDGET`` and ``OPSLOOP_DAILY_COST_USD``; None when neither is set."""
    if bot.daily_token_budget is None and bot.daily_cost_usd is None:
        return None
    return DailyCaps(redis, keys, tokens=bot.daily_token_budget, cost_usd=bot.daily_cost_usd)


def job_admission(
    redis: aioredis.Redis, keys: Keys, bot: BotSettings, *, caps: DailyCaps | None = None
) -> JobAdmission | None:
    """The ack path's check of new jobs (the daily caps, ``OPSLOOP_JOBS_PER_USER_HOUR``);
    None when neither is on. Pass the process's ``caps`` to share its scripts."""
    caps = caps if caps is not None else daily_caps(redis, keys, bot)
    per_hour = bot.jobs_per_user_hour
    if caps is None and per_hour <= 0:
        return None
    rate = JobRate(redis, keys, per_hour=per_hour) if per_hour > 0 else None
    return JobAdmission(redis, keys, caps=caps, rate=rate)


def build_turns(
    stores: Stores,
    *,
    settings: TurnSettings,
    audit: AuditPublisher | None = None,
    **parts: Unpack[RunnerParts],
) -> Turns:
    """The jobs side of a process from its parts (``bot.turns.parts``): the runner gets
    ``parts`` (no ``notifier``: jobs run headless; no ``consumer``: the process is named
    by host and pid in the inject streams)."""
    cards = Cards(stores, parts.get("notifier"))
    return Turns(
        stores=stores,
        receiver=Receiver(stores, settings.limits, knowledge=parts.get("knowledge")),
        runner=JobRunner(stores=stores, settings=settings, cards=cards, **parts),
        cards=cards,
        controls=Controls(stores.approvals, stores.jobs),
        audit=audit,
    )


def alert_desk(
    bot: BotSettings,
    stores: Stores,
    turns: Turns,
    *,
    poster: SlackAlertPoster,
    schedule: Callable[[str], None],
    metrics: Metrics,
) -> AlertDesk | None:
    """Alerts in (``bot.turns.alerts``), when ``OPSLOOP_ALERTS_TOKEN`` turns the webhook on:
    its routes (a bad routes file stops the start, naming the line), the storm limit
    with the daily caps, and the Slack poster. Without routes every group is refused 422."""
    if not bot.alerts_token:
        return None
    routes = configured(bot.alerts_file, bot.alerts_channel) or Routes()
    rate = JobRate(stores.redis, stores.keys, per_hour=bot.alert_investigations_per_hour)
    return AlertDesk(
        knowledge=turns.runner.knowledge,
        stores=stores,
        groups=stores.alert_groups,
        routes=routes,
        limits=turns.settings.limits,
        receiver=turns.receiver,
        storm=JobAdmission(stores.redis, stores.keys, caps=stores.caps, rate=rate),
        per_hour=bot.alert_investigations_per_hour,
        poster=poster,
        schedule=schedule,
        owner=process_name(),
        on_investigation=lambda outcome: metrics.alert_investigations.labels(outcome=outcome).inc(),
    )


def team_knowledge(
    bot: BotSettings, tools: ToolSettings, stores: Stores, workspace: Workspace | None
) -> Knowledge:
    """The team's knowledge (``bot.turns.knowledge``): the runbooks folder when
    ``OPSLOOP_RUNBOOKS`` is set, pages outside it under ``OPSLOOP_HTTP_ALLOW``'s policy, the
    incident records kept ``OPSLOOP_INCIDENT_RETENTION_DAYS``, channel privacy from Slack."""
    runbooks = None
    if bot.runbooks_dir:
        from bot.knowledge.runbooks import Runbooks  # noqa: PLC0415 (only when set)

        runbooks = Runbooks(Path(bot.runbooks_dir), base_url=bot.runbooks_url)
        summary = runbooks.summary()
        log.info(
            "runbooks: %d files, %d sections from %s",
            summary.files,
            summary.sections,
            bot.runbooks_dir,
        )
    return Knowledge(
        incidents=stores.incidents,
        retention_s=bot.incident_retention_days * 86400.0,
        runbooks=runbooks,
        pages=PageReader(AddressPolicy.from_setting(tools.http_allow)),
        workspace=workspace,
        alert_groups=stores.alert_groups,
    )


def turn_settings(bot: BotSettings, llm: LLMSettings) -> TurnSettings:
    """The job limits and run options every job of this process gets."""
    return TurnSettings(
        limits=JobLimits(
            max_iterations=bot.max_iterations,
            deadline_s=bot.deadline_s,
            token_budget=bot.token_budget,
        ),
        max_output_tokens=llm.max_output_tokens,
        condense_at_tokens=llm.condense_at_tokens,
        stream=llm.stream,
        approval_ttl_s=bot.approval_ttl_s,
        approval_remind_s=bot.approval_remind_s,
    )


def slack_client(
    bot: BotSettings, llm: LLMSettings, session: aiohttp.ClientSession
) -> ScrubbingWebClient:
    """The one Slack Web API client: every payload scrubbed of the bot's secrets,
    connection errors, 5xx and 429 retried by slack-sdk."""
    assert bot.slack_bot_token is not None  # required
    return ScrubbingWebClient(
        scrubber=Scrubber([*bot.secret_values(), *llm.secret_values()]),
        token=bot.slack_bot_token,
        base_url=bot.slack_api_url,
        session=session,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(),
            AsyncServerErrorRetryHandler(max_retry_count=2),
            AsyncRateLimitErrorRetryHandler(max_retry_count=2),
        ],
    )


def read_tools_yml(path: str | None) -> str | None:
    """tools.yml as it was read at start-up (for the audit log's hash of it)."""
    if path is None:
        return None
    try:
        return Path(path).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return None


def catalogue_of(catalog: Catalog) -> list[dict[str, object]]:
    """What the model is offered, for the audit log's hash: each tool's name, category
    and input schema."""
    return [
        {
            "name": tool.name,
            "category": tool.category,
            "source": catalog.sources.get(tool.name, ""),
            "schema": tool.args_model.model_json_schema(),
        }
        for tool in sorted(catalog.tools.values(), key=lambda t: t.name)
    ]


def tracing_for(bot: BotSettings, llm: LLMSettings, metrics: Metrics) -> Tracing | None:
    """The process's OpenTelemetry tracer when the ``OTEL_*`` environment asks for one
    (``OtelSettings.enabled``); None, and nothing of the SDK imported, otherwise."""
    otel = load_otel_settings()
    try:
        version = importlib.metadata.version("opsloop")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    options = TracingOptions(
        capture_content=otel.capture_content,
        provider=llm.provider,
        service_version=version,
        scrub=Scrubber([*bot.secret_values(), *llm.secret_values()]),
        on_dropped=metrics.otel_spans_dropped.inc,
    )
    tracing = open_tracing(otel.enabled, options)
    if tracing is not None:
        log.info("OpenTelemetry traces on (GenAI semantic conventions 1.41.0)")
    return tracing


def require(bot: BotSettings, *, socket: bool) -> None:
    """``ConfigError`` unless the settings name what the transport needs."""
    if socket:  # Socket Mode: no request URL, so no signing secret
        bot.require("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "REDIS_URL")
    else:
        bot.require("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "REDIS_URL")


EXIT_AFTER_DRAIN_S = 5.0  # SIGTERM to exit, beyond OPSLOOP_DRAIN_S (cut off, close)
CLOSE_S = 1.5  # of which closing the clients, at the end
FORCE_MARGIN_S = 0.5  # the process is ended by force this long before that bound


def exit_by(seconds: float) -> threading.Timer:
    """End the process by force ``seconds`` from now unless it ended first: a shutdown
    stuck past its bound (a thread, so a busy event loop cannot hold it up)."""

    def force() -> None:
        log.error("the shutdown ran past %gs: exiting now", seconds)
        logging.shutdown()
        os._exit(1)

    timer = threading.Timer(seconds, force)
    timer.daemon = True
    timer.start()
    return timer


@dataclass(kw_only=True)
class Service:
    """One process serving one workspace: ``await Service.open(...)``, ``start()``,
    ``web_app()``, ``stopping()`` (optional, as the shutdown begins), ``await close()``."""

    settings: BotSettings
    socket: bool
    redis: aioredis.Redis
    model_http: httpx.AsyncClient
    catalog: Catalog
    session: aiohttp.ClientSession
    client: ScrubbingWebClient
    budget: UpdateBudget
    metrics: Metrics
    turns: Turns
    tasks: Tasks
    scanner: Scanner
    app: AsyncApp
    tracing: Tracing | None = None
    alerts: AlertWebhook | None = None  # POST /alerts/alertmanager (404 when off)
    _stop_by: float | None = field(default=None, init=False)  # monotonic: exit by then

    @classmethod
    async def open(
        cls, bot: BotSettings, llm: LLMSettings, tools: ToolSettings, *, socket: bool = False
    ) -> Service:
        """Build every part from the settings (see the module docstring)."""
        require(bot, socket=socket)
        assert bot.redis_url is not None
        redis = connect(RedisTarget.of(bot))
        setting = await durability(redis)
        if setting is not None and not setting.every_write:
            log.warning("Redis durability: %s", setting.describe())
        model_http = make_http_client(llm)
        resolver = build_chain(llm, model_http)
        pricing = pricing_for(bot.prices_file, llm)  # OPSLOOP_PRICES: a bad file stops here
        prompt = load_system_prompt(bot.system_prompt_file)
        catalog = await open_catalog(  # MCP servers connected, when configured
            pack_names=tools.pack_names,
            pack_config=PackConfig.from_settings(tools),
            tools_file=tools.tools_file,
        )
        session = aiohttp.ClientSession()
        client = slack_client(bot, llm, session)
        budget = UpdateBudget(budget_sender(client))
        TASK_CARDS.configure(bot.task_display)  # OPSLOOP_TASK_DISPLAY, the process's
        metrics = Metrics()
        tracing = tracing_for(bot, llm, metrics)
        identity = BotIdentity(client)
        names = Names.of(client)  # people and channels by name, cached for the process
        policy = ApproverPolicy(
            bot.approver_ids,
            client,
            bot_user=lambda: identity.user,
            home_team=identity.home_team,
        )
        keys = Keys(bot.redis_prefix)
        audit = AuditPublisher(
            AuditLog(redis, keys, retention_days=bot.audit_retention_days),
            on_chained=AuditChannel(client, bot.audit_channel) if bot.audit_channel else None,
        )
        audit.configured(
            tools_yml=read_tools_yml(tools.tools_file),
            catalogue=catalogue_of(catalog),
            approvers=bot.approver_ids,
        )
        caps = daily_caps(redis, keys, bot)  # OPSLOOP_DAILY_TOKEN_BUDGET / _COST_USD
        stores = Stores.build(
            redis,
            keys,
            replication=Replication(min_replicas=bot.redis_min_replicas),
            on_audit=audit.staged,
            audit_log=audit.log,
            caps=caps,
            admission=job_admission(redis, keys, bot, caps=caps),
        )
        knowledge = team_knowledge(bot, tools, stores, ChannelDirectory(client))
        turns = build_turns(
            stores,
            knowledge=knowledge,
            resolver=resolver,
            catalog=catalog,
            system_prompt=prompt,
            settings=turn_settings(bot, llm),
            pricing=pricing,
            spend=WorkspaceSpend(caps) if caps is not None else None,
            condense=ModelCondenser.from_settings(
                resolver.chain()[0], system_prompt=prompt, settings=llm
            ),
            notifier=SlackNotifier(
                client=client,
                budget=budget,
                identity=identity,
                approvers=policy.approvers,
                approval_channel=bot.approval_channel,
                metrics=metrics,
                names=names,
                keep_tools=stores.jobs.keep_tools,  # the tool lines, for a redelivered ending
            ),
            tracing=tracing,
            audit=audit,
        )
        tasks = Tasks(
            turns,
            drain_s=bot.drain_s,
            max_running=bot.max_running_jobs,  # OPSLOOP_MAX_RUNNING_JOBS
            on_left_queued=metrics.queued_for_room.inc,
        )
        metrics.watch_jobs(tasks.counts)
        alert_poster = SlackAlertPoster(client)
        desk = alert_desk(
            bot,
            stores,
            turns,
            poster=alert_poster,
            schedule=tasks.schedule,
            metrics=metrics,
        )
        interactions = Interactions(
            client=client,
            budget=budget,
            turns=turns,
            policy=policy,
            schedule=tasks.resume,  # a click resumes a job under way (bot.turns.background)
            background=tasks.spawn,
            approval_channel=bot.approval_channel,
            caps=caps,
            escalate=bot.escalate_ids,
        )
        messages = Messages(
            client=client,
            turns=turns,
            identity=identity,
            schedule=tasks.schedule,
            allowed_bots=bot.allowed_bot_ids,
            approvers=policy.approvers,
            background=tasks.spawn,
        )
        scanner = Scanner(
            turns,
            schedule=tasks.schedule,
            resume=tasks.resume,
            waits=tasks.waits,
            on_expired=interactions.card_expired,
            on_remind=interactions.remind,
            on_card=interactions.redo_card,
            on_replies=interactions.refresh_card,
            on_alerts=desk.scan if desk is not None else None,
            on_ending=lambda record: deliver_ending(
                client, record, bot_user=identity.user, names=names
            ),
        )
        app = bolt_app(
            client=client,
            signing_secret=bot.slack_signing_secret,
            socket=socket,
            messages=messages,
            interactions=interactions,
            metrics=metrics,
            pane=PaneConfig(tuple(bot.suggested_prompt_list), bot.approval_channel),
            names=names,
            alert_clicks=AlertClicks(
                desk=desk,
                policy=policy,
                poster=alert_poster,
                background=tasks.spawn,
                approvers=policy.approvers,
            )
            if desk is not None
            else None,
        )
        return cls(
            settings=bot,
            socket=socket,
            redis=redis,
            model_http=model_http,
            catalog=catalog,
            session=session,
            client=client,
            budget=budget,
            metrics=metrics,
            turns=turns,
            tasks=tasks,
            scanner=scanner,
            app=app,
            tracing=tracing,
            alerts=AlertWebhook(
                token=bot.alerts_token, desk=desk, metrics=metrics, background=tasks.spawn
            ),
        )

    def start(self) -> None:
        """Spawn the long-lived loops: the scanner, the stop listener, the lag probe."""
        self.tasks.spawn(self.scanner.run(), "scanner")
        stop_signalled = self.turns.runner.stop_signalled
        self.tasks.spawn(self.turns.stores.listen_for_stops(stop_signalled), "stop signals")
        self.tasks.spawn(watch_loop(self.metrics), "loop lag")
        if self.turns.audit is not None:
            self.tasks.spawn(self.turns.audit.record_start(), "audit: process started")

    def web_app(self) -> web.Application:
        """``/healthz`` and ``/metrics``, and ``/slack/events`` unless over Socket Mode."""
        return http.web_app(
            app=self.app,
            turns=self.turns,
            metrics=self.metrics,
            signing_secret=None if self.socket else self.settings.slack_signing_secret,
            alerts=self.alerts,
        )

    def stopping(self, *, force_exit: bool = False) -> None:
        """The shutdown begins (SIGTERM): no job starts here any more, and nobody waits
        for the paced ``chat.update`` budget (``UpdateBudget.hand_over``: an ended job's
        edits still queued there leave its ending owed, for another process's scanner).
        ``close`` ends within ``OPSLOOP_DRAIN_S`` + ``EXIT_AFTER_DRAIN_S`` from now; with
        ``force_exit`` (the process is ``serve``'s or ``socket``'s), the process itself
        does, by force (``exit_by``) if the shutdown gets stuck. Idempotent."""
        if self._stop_by is not None:
            return
        bound = self.settings.drain_s + EXIT_AFTER_DRAIN_S
        self._stop_by = time.monotonic() + bound
        self.turns.runner.drain()
        self.budget.hand_over()
        if force_exit:
            exit_by(bound - FORCE_MARGIN_S)

    async def close(self) -> None:
        """Shut down (SIGTERM, a deploy): drain the jobs (``bot.turns.background``), then close
        every client; all of it within the bound ``stopping`` set."""
        self.stopping()
        assert self._stop_by is not None
        try:
            async with asyncio.timeout(self._stop_by - FORCE_MARGIN_S - CLOSE_S - time.monotonic()):
                await self.tasks.close()
        except TimeoutError:  # what is left is resumed elsewhere once its lease expires
            log.warning("jobs still running at the end of the drain were cut off")
        try:
            async with asyncio.timeout(self._stop_by - FORCE_MARGIN_S - time.monotonic()):
                await self._close_clients()
        except TimeoutError:
            log.warning("closing the clients ran past the shutdown's bound; left open")

    async def _close_clients(self) -> None:
        if self.turns.audit is not None:  # the entries the last jobs staged
            await self.turns.audit.aclose()
        await self.budget.aclose()
        await self.catalog.aclose()
        await self.session.close()
        await self.model_http.aclose()
        await self.redis.aclose()
        if self.tracing is not None:  # the last spans, within its bounded wait
            await asyncio.to_thread(self.tracing.close)


def serve(bot: BotSettings, llm: LLMSettings, tools: ToolSettings) -> None:
    """Run ``opsloop serve`` until interrupted."""
    require(bot, socket=False)

    async def opened() -> web.Application:
        service = await Service.open(bot, llm, tools)
        service.start()
        app = service.web_app()
        # Everything built so far lives as long as the process: keep it out of the
        # collector's full passes, whose pauses hold up every request.
        gc.collect()
        gc.freeze()

        async def shutdown(_: web.Application) -> None:  # SIGTERM: before in-flight requests end
            service.stopping(force_exit=True)

        async def cleanup(_: web.Application) -> None:
            await service.close()

        app.on_shutdown.append(shutdown)
        app.on_cleanup.append(cleanup)
        return app

    http.run(opened(), host=bot.host, port=bot.port)


def socket_mode(bot: BotSettings, llm: LLMSettings, tools: ToolSettings) -> None:
    """Run ``opsloop socket``: the same app over Socket Mode (``SLACK_APP_TOKEN``), with
    ``GET /healthz`` and ``GET /metrics`` on ``HOST``:``PORT`` as ``serve`` has them (no
    request URL: events and clicks arrive over the websocket). SIGTERM or SIGINT closes
    the connection and stops cleanly; unacknowledged envelopes are redelivered by Slack."""
    from bot.slack import socket  # the websocket client only where it is used

    require(bot, socket=True)
    app_token = bot.slack_app_token
    assert app_token is not None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        service = await Service.open(bot, llm, tools, socket=True)
        service.start()
        try:
            await socket.run(
                app=service.app,
                client=service.client,
                app_token=app_token,
                metrics=service.metrics,
                health=service.web_app(),
                host=bot.host,
                port=bot.port,
                stop=stop,
            )
        finally:
            service.stopping(force_exit=True)
            await service.close()

    asyncio.run(main())
