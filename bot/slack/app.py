"""``opsloop serve``: the bolt app on aiohttp, the ack path, health and metrics.

A listener persists what must not be lost (the message into the thread's inject
stream, a ``queued`` job) and schedules the job with ``asyncio.create_task``; bolt runs
with ``process_before_response=True``, so the HTTP answer goes out only after the
write, and a Redis failure becomes a 503 that Slack retries. Duplicates (Slack's
retries, and a mention that also arrives as a ``message``) are recognised by the
message's channel and ts, marked only after the message was persisted.

Nothing reaches bolt before ``bot.slack.gate`` has checked it: the body's size (413), its
signature on the raw bytes (401) and its shape (a signed but malformed payload gets 400 or
200, never a 5xx); a listener's ``StoreError`` is the one 503. See that module for the
split.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import signal
import time
from collections.abc import Sequence
from typing import Any

import aiohttp
import httpx
import redis.asyncio as aioredis
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)

from bot.agent.events import Event, ModelRequestEnd, RunEnd, ToolEnd
from bot.agent.ports import Injected
from bot.agent.state import StopReason
from bot.errors import StoreError
from bot.llm.chain import build_chain
from bot.llm.condense import ModelCondenser
from bot.llm.http import make_http_client
from bot.prompts import load_system_prompt
from bot.scrub import Scrubber
from bot.settings import BotSettings, LLMSettings, ToolSettings
from bot.slack.actions import Interactions
from bot.slack.blocks import (
    ACTION_APPROVE,
    ACTION_CONTINUE,
    ACTION_DENY,
    ACTION_STOP,
)
from bot.slack.client import ScrubbingWebClient
from bot.slack.gate import MAX_BODY_BYTES, Answer, Gate, acknowledged, attach, judge
from bot.slack.policy import ApproverPolicy
from bot.slack.progress import JobProgress, budget_sender
from bot.slack.updates import UpdateBudget
from bot.store.connection import connect, durability, translated
from bot.store.history import holds_conversation
from bot.store.inject import InjectQueue
from bot.store.jobs import JobLimits, JobRecord
from bot.store.keys import Keys, Thread
from bot.turns.runner import Turns, TurnSettings
from bot.turns.scanner import Scanner
from tools.registry import open_catalog

log = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 2.0
SHUTDOWN_TIMEOUT_S = 5.0
LAG_PROBE_S = 0.05
FINISH_TIMEOUT_S = 60.0  # posting the answer and the ending
CONTEXT_TIMEOUT_S = 1.5  # a slow Slack must not hold up the ack
CONTEXT_MESSAGES = 50
CONTEXT_CHARS = 2_000
HUMAN_SUBTYPES = frozenset({None, "thread_broadcast", "file_share"})


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.jobs = Counter(
            "opsloop_jobs", "Jobs by final status", ["status"], registry=self.registry
        )
        self.model_calls = Counter("opsloop_model_calls", "Model calls", registry=self.registry)
        self.model_errors = Counter(
            "opsloop_model_errors",
            "Model calls that failed (after the client's own retries)",
            ["model"],
            registry=self.registry,
        )
        self.model_seconds = Histogram(
            "opsloop_model_seconds",
            "Time of each model call, to its last byte",
            ["model"],
            buckets=(0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120),
            registry=self.registry,
        )
        self.model_tokens = Counter(
            "opsloop_model_tokens",
            "Tokens the provider reported: prompt (cached included), cached, completion",
            ["model", "kind"],
            registry=self.registry,
        )
        self.tools = Counter(
            "opsloop_tool_executions",
            "Tool executions",
            ["tool", "outcome"],
            registry=self.registry,
        )
        self.tool_seconds = Histogram(
            "opsloop_tool_seconds",
            "Time of each tool run",
            ["tool"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=self.registry,
        )
        self.redis_up = Gauge(
            "opsloop_redis_up", "1 when Redis answered this scrape", registry=self.registry
        )
        # Read from Redis at each scrape (the whole workspace, every process); absent
        # when Redis does not answer rather than a stale figure.
        self.live = CollectorRegistry()
        self.live_jobs = Gauge(
            "opsloop_live_jobs",
            "Jobs queued, running or awaiting approval",
            registry=self.live,
        )
        self.pending_approvals = Gauge(
            "opsloop_pending_approvals", "Approval cards waiting for a decision", registry=self.live
        )
        self.ack = Histogram(
            "opsloop_ack_seconds",
            "Time to answer Slack",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=self.registry,
        )
        self.loop_lag = Histogram(
            "opsloop_event_loop_lag_seconds",
            "How late a 50 ms timer fires (time everything waits for the event loop)",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=self.registry,
        )


AWAITING = StopReason.AWAITING_APPROVAL


class _Reporter:
    """A job's progress plus the process metrics, as the runner's ``JobSink``."""

    def __init__(self, progress: JobProgress, metrics: Metrics) -> None:
        self.progress = progress
        self.metrics = metrics
        self.ended = False  # the run ended (rather than being abandoned on a store error)

    def __call__(self, event: Event) -> None:
        metrics = self.metrics
        if isinstance(event, ToolEnd) and event.ran and not event.dry_run:
            metrics.tools.labels(event.tool, "error" if event.is_error else "ok").inc()
            metrics.tool_seconds.labels(event.tool).observe(event.duration_s)
        elif isinstance(event, ModelRequestEnd):
            metrics.model_calls.inc()
            metrics.model_seconds.labels(event.model).observe(event.duration_s)
            if event.usage is None:
                metrics.model_errors.labels(event.model).inc()
            else:
                tokens = metrics.model_tokens
                tokens.labels(event.model, "prompt").inc(event.usage.prompt_tokens)
                tokens.labels(event.model, "cached").inc(event.usage.cached_tokens)
                tokens.labels(event.model, "completion").inc(event.usage.completion_tokens)
        elif isinstance(event, RunEnd):
            self.ended = True
            if event.result.stop_reason is not AWAITING:
                metrics.jobs.labels(event.result.stop_reason.value).inc()
        self.progress(event)

    @property
    def status_ts(self) -> str | None:
        return self.progress.status_ts

    async def aclose(self) -> None:
        if not self.ended:
            return  # abandoned: whoever resumes the job reports on it
        try:
            await asyncio.wait_for(self.progress.done.wait(), timeout=FINISH_TIMEOUT_S)
        except TimeoutError:
            log.warning("job %s: the ending was not shown in time", self.progress.record.id)


class SlackBot:
    """One process serving one workspace: ``await start()``, ``web_app()``, ``close()``."""

    def __init__(
        self, bot: BotSettings, llm: LLMSettings, tools: ToolSettings, *, socket: bool = False
    ) -> None:
        if socket:  # Socket Mode: no request URL, so no signing secret
            bot.require("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "REDIS_URL")
        else:
            bot.require("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "REDIS_URL")
        self.socket = socket
        self.settings = bot
        self.llm_settings = llm
        self.tool_settings = tools
        self.keys = Keys(bot.redis_prefix)
        self.metrics = Metrics()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.job_tasks: set[asyncio.Task[Any]] = set()  # the jobs among ``tasks``
        self.scheduled: set[str] = set()
        self.bot_user: str | None = None
        self.bot_bot_id: str | None = None  # this app's bot id (``B…``), from auth.test
        self.allowed_bots = bot.allowed_bot_ids
        self.team_id: str | None = None  # the workspace (auth.test), for chat streaming

    async def start(self) -> None:
        settings = self.settings
        assert settings.redis_url is not None and settings.slack_bot_token is not None
        self.redis: aioredis.Redis = connect(settings.redis_url)
        setting = await durability(self.redis)
        if setting is not None and not setting.every_write:
            log.warning("Redis durability: %s", setting.describe())
        self.http: httpx.AsyncClient = make_http_client(self.llm_settings)
        resolver = build_chain(self.llm_settings, self.http)
        prompt = load_system_prompt(settings.system_prompt_file)
        self.catalog = await open_catalog(  # MCP servers connected, when configured
            pack_names=self.tool_settings.pack_names,
            pack_config=self.tool_settings.pack_config(),
            tools_file=self.tool_settings.tools_file,
        )
        self.session = aiohttp.ClientSession()
        self.client = ScrubbingWebClient(
            scrubber=Scrubber([*settings.secret_values(), *self.llm_settings.secret_values()]),
            token=settings.slack_bot_token,
            base_url=settings.slack_api_url,
            session=self.session,
            retry_handlers=[
                AsyncConnectionErrorRetryHandler(),
                AsyncServerErrorRetryHandler(max_retry_count=2),
                AsyncRateLimitErrorRetryHandler(max_retry_count=2),
            ],
        )
        self.budget = UpdateBudget(budget_sender(self.client))
        self.turns = Turns(
            redis=self.redis,
            keys=self.keys,
            resolver=resolver,
            catalog=self.catalog,
            system_prompt=prompt,
            settings=TurnSettings(
                limits=JobLimits(
                    max_iterations=settings.max_iterations,
                    deadline_s=settings.deadline_s,
                    token_budget=settings.token_budget,
                ),
                max_output_tokens=self.llm_settings.max_output_tokens,
                condense_at_tokens=self.llm_settings.condense_at_tokens,
                stream=self.llm_settings.stream,
                approval_ttl_s=settings.approval_ttl_s,
                approval_remind_s=settings.approval_remind_s,
            ),
            condense=ModelCondenser.from_settings(
                resolver.chain()[0], system_prompt=prompt, settings=self.llm_settings
            ),
            on_visible_ack=self._eyes,
            progress=self._open_progress,
        )
        self.actions = Interactions(
            client=self.client,
            budget=self.budget,
            turns=self.turns,
            policy=ApproverPolicy(
                settings.approver_ids,
                self.client,
                bot_user=lambda: self.bot_user,
                home_team=self._home_team,
            ),
            schedule=self._schedule,
            background=self._background,
        )
        self.turns.on_paused = self.actions.post_card
        self.turns.on_unknown_outcome = self.actions.tell_unknown
        self.scanner = Scanner(
            self.turns,
            schedule=self._schedule,
            on_expired=self.actions.card_expired,
            on_remind=self.actions.remind,
            on_card=self.actions.redo_card,
        )
        self.app = AsyncApp(
            client=self.client,
            signing_secret=settings.slack_signing_secret,
            process_before_response=True,
            request_verification_enabled=not self.socket,
        )
        self.app.event("app_mention")(self._on_mention)
        self.app.event("message")(self._on_message)
        self.app.action(ACTION_APPROVE)(self.actions.on_approve)
        self.app.action(ACTION_DENY)(self.actions.on_deny)
        self.app.action(ACTION_STOP)(self.actions.on_stop)
        self.app.action(ACTION_CONTINUE)(self.actions.on_continue)
        self._background(self.scanner.run(), "scanner")
        self._background(self.turns.listen_for_stops(), "stop signals")
        self._background(self._watch_loop(), "loop lag")

    async def _watch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(LAG_PROBE_S)
            self.metrics.loop_lag.observe(max(0.0, loop.time() - started - LAG_PROBE_S))

    def _background(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def close(self) -> None:
        """Shut down (SIGTERM, a deploy): start nothing new; let each running job reach
        its next step boundary — a change in flight finishes and is recorded — and hand
        it over (lease released, due now for another process's scan), for at most
        ``OPSLOOP_DRAIN_S``; then cut off what is left, which another process resumes
        from its last step once its lease expires. Nothing acknowledged is lost."""
        self.turns.drain()
        for task in list(self.tasks - self.job_tasks):
            task.cancel()  # the scanner, the stop listener, the loop probe
        if self.job_tasks:
            log.info("draining %d job(s), at most %gs", len(self.job_tasks), self.settings.drain_s)
            await asyncio.wait(self.job_tasks, timeout=self.settings.drain_s)
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=SHUTDOWN_TIMEOUT_S)
        await self.budget.aclose()
        await self.catalog.aclose()
        await self.session.close()
        await self.http.aclose()
        await self.redis.aclose()

    # -- HTTP -----------------------------------------------------------------------

    def web_app(self, *, events: bool = True) -> web.Application:
        """The HTTP app: ``/slack/events`` (unless ``events`` is off, for Socket Mode),
        ``/healthz`` and ``/metrics``. With events, requests pass ``bot.slack.gate``
        before bolt, and bolt's listener errors become the statuses the gate defines."""
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        if events:
            assert self.settings.slack_signing_secret is not None  # required for serve
            self.gate = Gate(self.settings.slack_signing_secret)
            self.gate.attach(self.app)
            app.router.add_post("/slack/events", self._events)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _events(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        admitted = await self.gate.admit(request)
        if isinstance(admitted, Answer):
            if admitted.signed:  # Slack's request, answered by the gate
                self.metrics.ack.observe(time.perf_counter() - started)
            return admitted.response()
        response = acknowledged(await self.app.async_dispatch(admitted.request), admitted)
        self.metrics.ack.observe(time.perf_counter() - started)
        return await to_aiohttp_response(response)

    async def _healthz(self, request: web.Request) -> web.Response:
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_S), translated("health check"):
                await self.redis.ping()
        except (StoreError, TimeoutError):
            return web.json_response({"ok": False, "redis": "unavailable"}, status=503)
        return web.json_response({"ok": True})

    async def _metrics(self, request: web.Request) -> web.Response:
        metrics = self.metrics
        body = b""
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_S), translated("metrics"):
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.zcard(self.keys.active_jobs())
                    pipe.zcard(self.keys.approval_expiries())
                    live, pending = await pipe.execute()
        except (StoreError, TimeoutError):
            metrics.redis_up.set(0)
        else:
            metrics.redis_up.set(1)
            metrics.live_jobs.set(live)
            metrics.pending_approvals.set(pending)
            body = generate_latest(metrics.live)
        return web.Response(
            body=generate_latest(metrics.registry) + body, content_type="text/plain"
        )

    # -- listeners --------------------------------------------------------------------

    async def _bot_id(self) -> str | None:
        if self.bot_user is None or self.team_id is None:
            auth = await self.client.auth_test()
            self.bot_user = str(auth.get("user_id"))
            self.bot_bot_id = str(auth.get("bot_id") or "") or None
            self.team_id = str(auth.get("team_id") or "") or None
        return self.bot_user

    async def _author(self, event: dict[str, Any]) -> str | None:
        """Who a message that may start or enter a job is from, or ``None`` when it must
        be ignored: bots (``bot_id`` set, or ``subtype: bot_message``) start nothing and
        enter nothing — no bot-to-bot loops, no integration spending model budget or
        proposing writes — unless listed in ``OPSLOOP_ALLOWED_BOTS`` (never this bot
        itself); edits, deletions and other subtypes are not people talking."""
        subtype = event.get("subtype")
        bot_id = event.get("bot_id")
        if bot_id or subtype == "bot_message":
            if not isinstance(bot_id, str) or bot_id not in self.allowed_bots:
                log.info("ignored a message from bot %s", bot_id or "(no bot_id)")
                return None
            await self._bot_id()
            if bot_id == self.bot_bot_id:
                return None
            if subtype not in HUMAN_SUBTYPES and subtype != "bot_message":
                return None
            user = event.get("user")
            return user if isinstance(user, str) and user else bot_id
        if subtype not in HUMAN_SUBTYPES:
            return None
        user = event.get("user")
        return user if isinstance(user, str) and user else None

    async def _home_team(self) -> str | None:
        """The installing workspace (auth.test's ``team_id``), or None if Slack can't say."""
        if self.team_id is None:
            try:
                async with asyncio.timeout(CONTEXT_TIMEOUT_S):
                    await self._bot_id()
            except Exception:
                log.warning("auth.test failed: the clicker's workspace is not known", exc_info=True)
        return self.team_id

    async def _on_mention(self, event: dict[str, Any]) -> None:
        channel, ts = event.get("channel"), event.get("ts")
        if not (isinstance(channel, str) and isinstance(ts, str) and channel and ts):
            return
        user = await self._author(event)
        if user is None:
            return
        thread_ts = event.get("thread_ts")
        thread = Thread(channel, thread_ts if isinstance(thread_ts, str) and thread_ts else ts)
        await self._take(thread, ts, user, str(event.get("text") or ""))

    async def _on_message(self, event: dict[str, Any]) -> None:
        channel, ts = event.get("channel"), event.get("ts")
        thread_ts = event.get("thread_ts")
        if not all(isinstance(v, str) and v for v in (channel, ts, thread_ts)) or thread_ts == ts:
            return
        user = await self._author(event)
        if user is None:
            return
        text = str(event.get("text") or "")
        bot = await self._bot_id()
        if bot and re.search(rf"<@{re.escape(bot)}(\|[^>]*)?>", text):
            return  # the app_mention listener takes it
        await self._take(Thread(str(channel), str(thread_ts)), str(ts), str(user), text, reply=True)

    async def _take(
        self, thread: Thread, ts: str, user: str, text: str, *, reply: bool = False
    ) -> None:
        """The ack path: persist (one script), index, schedule. Raises on a store
        failure, so Slack gets a 503 and retries."""
        if not reply and thread.thread_ts != ts:
            # Mentioned inside a thread: if the bot has not been part of it, the earlier
            # human messages come first, as context.
            if not await holds_conversation(self.redis, self.keys, thread):
                context = await self._thread_context(thread, before=ts)
                if context:
                    await InjectQueue(self.redis, self.keys, thread).receive(
                        ts=f"{ts}:context", text=context, author=None
                    )
        receipt = await self.turns.receive(thread, ts=ts, user=user, text=text, reply=reply)
        if receipt.needs_run and receipt.job_id is not None:
            self._schedule(receipt.job_id)

    async def _thread_context(self, thread: Thread, *, before: str) -> str | None:
        """The thread's earlier human messages (bounded), or None if Slack can't say."""
        try:
            async with asyncio.timeout(CONTEXT_TIMEOUT_S):
                reply = await self.client.conversations_replies(
                    channel=thread.channel, ts=thread.thread_ts, limit=CONTEXT_MESSAGES
                )
        except Exception:
            log.info("no thread context for %s", thread, exc_info=True)
            return None
        lines = []
        cutoff = _ts_value(before)
        for message in reply.get("messages") or []:
            if not isinstance(message, dict):
                continue
            if message.get("bot_id") or message.get("subtype") not in HUMAN_SUBTYPES:
                continue
            if cutoff is None or (_ts_value(message.get("ts")) or 0.0) >= cutoff:
                continue
            text = str(message.get("text") or "").strip()
            if text:
                lines.append(f"<@{message.get('user')}>: {text[:CONTEXT_CHARS]}")
        if not lines:
            return None
        return "Earlier in this thread (for context):\n" + "\n".join(lines)

    def _schedule(self, job_id: str) -> None:
        """Run (or resume) the job in the background, unless it is already scheduled
        here; the thread's lease keeps other processes out."""
        if job_id in self.scheduled:
            return
        self.scheduled.add(job_id)
        task = asyncio.create_task(self._run(job_id), name=f"job {job_id}")
        self.tasks.add(task)
        self.job_tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(self.job_tasks.discard)

    async def _run(self, job_id: str) -> None:
        try:
            await self.turns.run_job(job_id)
        except Exception:
            # A store outage or a lost lease: the job stays live in Redis and the
            # scanner resumes it from its last step.
            log.exception("job %s failed outside the loop", job_id)
        finally:
            self.scheduled.discard(job_id)

    async def _open_progress(self, record: JobRecord) -> _Reporter:
        """The job's face in the thread, opened once this process holds its lease."""
        try:
            await self._bot_id()
        except Exception:
            log.info("auth.test failed; answers are shown without chat streaming", exc_info=True)
        progress = JobProgress(self.client, self.budget, record, team_id=self.team_id)
        try:
            if record.meta.get("status_ts"):  # resumed: take its status message over
                progress.status_ts = record.meta["status_ts"]
                progress.refresh()
            else:
                await progress.start()
        except Exception:
            log.warning("no status message for job %s", record.id, exc_info=True)
        return _Reporter(progress, self.metrics)

    async def _eyes(self, thread: Thread, items: Sequence[Injected]) -> None:
        for item in items:
            try:
                await self.client.reactions_add(
                    channel=thread.channel, timestamp=item.id, name="eyes"
                )
            except Exception:
                log.info("could not react to %s", item.id, exc_info=True)


def _ts_value(ts: object) -> float | None:
    """A Slack ts as a number to compare, or None when it is not one."""
    try:
        return float(str(ts))
    except ValueError:
        return None


def serve(bot: BotSettings, llm: LLMSettings, tools: ToolSettings) -> None:
    """Run ``opsloop serve`` until interrupted."""
    slack = SlackBot(bot, llm, tools)

    async def make() -> web.Application:
        await slack.start()
        app = slack.web_app()
        # Everything built so far lives as long as the process: keep it out of the
        # collector's full passes, whose pauses hold up every request.
        gc.collect()
        gc.freeze()

        async def cleanup(_: web.Application) -> None:
            await slack.close()

        app.on_cleanup.append(cleanup)
        return app

    web.run_app(
        make(),
        host=bot.host,
        port=bot.port,
        print=None,
        access_log=None,
        shutdown_timeout=SHUTDOWN_TIMEOUT_S,
    )


def socket_mode(bot: BotSettings, llm: LLMSettings, tools: ToolSettings) -> None:
    """Run ``opsloop socket``: the same app over Socket Mode (``SLACK_APP_TOKEN``), with
    ``GET /healthz`` and ``GET /metrics`` on ``HOST``:``PORT`` as ``serve`` has them (no
    request URL: events and clicks arrive over the websocket). SIGTERM or SIGINT closes
    the connection and stops cleanly; unacknowledged envelopes are redelivered by Slack."""
    from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
    from slack_bolt.adapter.socket_mode.async_internals import (
        run_async_bolt_app,
        send_async_response,
    )
    from slack_bolt.response import BoltResponse
    from slack_sdk.socket_mode.aiohttp import SocketModeClient
    from slack_sdk.socket_mode.request import SocketModeRequest

    slack = SlackBot(bot, llm, tools, socket=True)

    class TimedHandler(AsyncSocketModeHandler):
        """bolt's handler, with each envelope's time to its ack in ``opsloop_ack_seconds``."""

        async def handle(self, client: SocketModeClient, req: SocketModeRequest) -> None:  # type: ignore[override]  # as bolt types it
            """bolt's ``handle``, with the gate's shape checks first: an envelope our
            listeners can never act on, or none takes, is acknowledged (one log line)
            rather than left for Slack to redeliver forever; a listener's ``StoreError``
            still leaves it unacknowledged, so Slack redelivers it."""
            started = time.perf_counter()
            verdict = judge(req.payload)
            if verdict is not None:
                status, why = verdict
                log.warning("socket mode %s envelope: %s; acknowledged", req.type, why)
                response = BoltResponse(status=200, body="")
            else:
                response = await run_async_bolt_app(self.app, req)
                if response.status == 404:
                    log.info("socket mode %s envelope: no listener; acknowledged", req.type)
                    response = BoltResponse(status=200, body="")
            await send_async_response(client, req, response, started)
            slack.metrics.ack.observe(time.perf_counter() - started)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await slack.start()
        attach(slack.app)
        runner = web.AppRunner(slack.web_app(events=False), access_log=None)
        await runner.setup()
        handler = TimedHandler(slack.app, bot.slack_app_token, web_client=slack.client)
        try:
            await web.TCPSite(runner, bot.host, bot.port).start()
            gc.collect()
            gc.freeze()
            await handler.connect_async()  # type: ignore[no-untyped-call]  # untyped in bolt
            log.info("connected to Slack over Socket Mode")
            await stop.wait()
        finally:
            await handler.close_async()  # type: ignore[no-untyped-call]
            await runner.cleanup()
            await slack.close()

    asyncio.run(main())
