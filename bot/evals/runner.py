"""One case, end to end, through the bot's own jobs side.

``Evaluation`` holds what every case of a run shares: a managed ``redis-server`` (each
case gets its own key prefix, so no case sees another's jobs or incidents), the model
chain from the ``LLM_*`` settings, the price table, the system prompt, and the backends
(``BackendPool``: each kind started once, on first use, reset after each case).

``run_case``: start the case's backends, inject its faults (their facts fill the case's
``{{names}}``), build the tool catalogue the packs reach them with (plus the case's
tools.yml and runbooks), then run the opening exactly as the bot does — a mention
through ``Receiver.receive``, an alert through ``AlertDesk`` — with ``JobRunner.run_job``
(the same ``agent.run``, limits, ledger and approval cards, headless). Each card is
answered as the case scripts it, through ``Controls.decide`` with the approver policy
the Slack edge applies (``bot.slack.policy``: the approver list, the two-person rule);
a card nobody decides is expired as the scanner would. Then the faults are healed, the
backends reset, and ``bot.evals.checks`` grades what was observed.

A backend that cannot start, or a fault that cannot be injected, makes the case
``error`` (not ``fail``): it says nothing of the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import redis.asyncio as aioredis
import yaml
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.edits import EditErrors
from bot.agent.events import Event
from bot.agent.ports import ClientResolver, Injected, Pricing
from bot.alerts.payload import Notification, parse
from bot.alerts.routes import single_channel
from bot.emulator.redis_server import ManagedRedis
from bot.evals.backends import Backend, BackendError, Reach, backend_class
from bot.evals.case import CardScript, Case
from bot.evals.checks import CheckResult, grade
from bot.evals.observe import CardSeen, ClickSeen, Observed, calls_of
from bot.knowledge.runbooks import Runbooks
from bot.llm.chain import build_chain
from bot.llm.http import make_http_client
from bot.llm.prices import pricing_for
from bot.prompts import load_system_prompt
from bot.service import build_turns
from bot.settings import LLMSettings
from bot.slack.policy import ApproverPolicy
from bot.store.approvals import ApprovalRecord
from bot.store.connection import connect
from bot.store.jobs import JobLimits, JobRecord, JobStatus
from bot.store.keys import Keys, Thread
from bot.store.ledger import LedgerRecord
from bot.store.parts import Stores
from bot.turns.alerts import AlertDesk
from bot.turns.controls import Accepted, FirstApproval, Refused, Verdict
from bot.turns.knowledge import Knowledge
from bot.turns.parts import Turns
from bot.turns.run import TurnSettings
from tools.netpolicy import AddressPolicy
from tools.packs import PackConfig
from tools.page_text import PageReader
from tools.registry import Catalog, open_catalog

log = logging.getLogger(__name__)

BOT_USER = "U0EVALBOT"
MAX_CARDS = 20  # a job asking for more cards than this is stopped as looping
GRACE_S = 30.0  # beyond the case's deadline, for cards and the ending
Outcome = Literal["pass", "fail", "error"]


@dataclass(slots=True)
class CaseResult:
    """One run of one case."""

    case: str
    title: str
    category: str
    outcome: Outcome
    seconds: float
    checks: list[CheckResult] = field(default_factory=list)
    observed: Observed | None = None
    error: str | None = None
    facts: dict[str, str] = field(default_factory=dict)
    repeat: int = 1
    judge: dict[str, Any] | None = None

    @property
    def met(self) -> int:
        return sum(1 for c in self.checks if c.passed)


class _Sink:
    """A job's progress, kept: every event of every run of the job."""

    def __init__(self, events: list[Event]) -> None:
        self._events = events

    @property
    def status_ts(self) -> str | None:
        return None

    @property
    def delivered(self) -> bool:
        return True

    def __call__(self, event: Event) -> None:
        self._events.append(event)

    async def aclose(self) -> None:
        return None


class EvalNotifier:
    """The ``Notifier`` of a headless case: events kept, cards given a ts."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.cards: list[ApprovalRecord] = []

    async def open_progress(self, record: JobRecord, *, taken_over: bool = False) -> _Sink:
        return _Sink(self.events)

    async def post_card(self, record: JobRecord, approval: ApprovalRecord) -> str:
        self.cards.append(approval)
        return f"{time.time():.6f}"

    async def tell_unknown(self, record: JobRecord, entries: Sequence[LedgerRecord]) -> None:
        return None

    async def acknowledge(self, thread: Thread, items: Sequence[Injected]) -> None:
        return None


class EvalPoster:
    """The ``AlertPoster`` of a case: the alert message is a ts, nothing more."""

    async def post_alert(
        self, channel: str, notification: Notification, *, note: str | None, investigate: str | None
    ) -> str:
        return f"{time.time():.6f}"

    async def post_update(self, thread: Thread, notification: Notification, changed: Any) -> str:
        return f"{time.time():.6f}"

    async def resolve_alert(
        self, thread: Thread, notification: Notification, *, resolved_at: float
    ) -> None:
        return None


class BackendPool:
    """Each kind of backend started once, on first use, under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._started: dict[str, tuple[Backend, Reach]] = {}
        self._failed: dict[str, str] = {}
        self.start_seconds: dict[str, float] = {}

    async def get(self, kind: str) -> tuple[Backend, Reach]:
        if kind in self._failed:
            raise BackendError(self._failed[kind])
        if kind not in self._started:
            began = time.monotonic()
            try:
                backend = backend_class(kind)()
                folder = self.root / kind
                folder.mkdir(parents=True, exist_ok=True)
                reach = await backend.start(folder)
            except Exception as exc:  # noqa: BLE001 (any failure to start is the case's error)
                why = f"backend {kind} could not start: {exc}"
                self._failed[kind] = why
                raise BackendError(why) from None
            self._started[kind] = (backend, reach)
            self.start_seconds[kind] = time.monotonic() - began
        return self._started[kind]

    async def reset(self, kind: str) -> None:
        if kind in self._started:
            await self._started[kind][0].reset()

    async def stop(self) -> None:
        for kind, (backend, _) in reversed(list(self._started.items())):
            try:
                await backend.stop()
            except Exception:  # noqa: BLE001 (stop the others regardless)
                log.warning("backend %s did not stop cleanly", kind, exc_info=True)
        self._started.clear()


@dataclass(frozen=True, slots=True)
class Model:
    """The model every case runs with (``LLM_*``), priced, with the system prompt."""

    settings: LLMSettings
    resolver: ClientResolver
    pricing: Pricing
    prompt: str
    http: httpx.AsyncClient

    @classmethod
    def from_settings(cls, settings: LLMSettings, prompt_file: str | None = None) -> Model:
        http = make_http_client(settings)
        return cls(
            settings=settings,
            resolver=build_chain(settings, http),
            pricing=pricing_for(None, settings),
            prompt=load_system_prompt(prompt_file),
            http=http,
        )

    @property
    def name(self) -> str:
        return self.resolver.chain()[0].name


def merge_reach(reaches: Sequence[Reach]) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """The packs, their config and the tools.yml fragment of several backends together."""
    packs: list[str] = []
    config: dict[str, Any] = {}
    fragment: dict[str, Any] = {}
    for reach in reaches:
        packs += [p for p in reach.packs if p not in packs]
        for key, value in reach.pack_config.items():
            if key == "log_dirs":
                config[key] = (*config.get(key, ()), *value)
            elif key == "http_allow" and config.get(key):
                config[key] = f"{config[key]},{value}"
            else:
                config[key] = value
        fragment = merge_yml(fragment, reach.tools_yml)
    return packs, config, fragment


def merge_yml(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """tools.yml fragments together: lists appended, mappings merged."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, list) and isinstance(merged.get(key), list):
            merged[key] = [*merged[key], *value]
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


class Evaluation:
    """A run of cases: Redis, the model, the backends (see the module docstring)."""

    def __init__(self, model: Model, *, root: Path | None = None, keep: bool = False) -> None:
        self.model = model
        self.keep = keep
        self._tmp = None if root is not None else tempfile.mkdtemp(prefix="opsloop-eval-")
        self.root = root if root is not None else Path(self._tmp or ".")
        self.backends = BackendPool(self.root / "backends")
        self.redis_server: ManagedRedis | None = None
        self.redis: aioredis.Redis | None = None
        self.run_id = f"{int(time.time())}"
        self._serial = 0

    async def __aenter__(self) -> Evaluation:
        server = ManagedRedis(self.root / "redis", fsync="no")
        await asyncio.to_thread(server.start)
        self.redis_server = server
        self.redis = connect(server.url)
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.backends.stop()
        if self.redis is not None:
            await self.redis.aclose()
        if self.redis_server is not None:
            await asyncio.to_thread(self.redis_server.stop)
        await self.model.http.aclose()
        if self._tmp is not None and not self.keep:
            import shutil  # noqa: PLC0415

            shutil.rmtree(self._tmp, ignore_errors=True)

    async def run_case(self, case: Case, *, repeat: int = 1) -> CaseResult:
        began = time.monotonic()
        self._serial += 1
        folder = self.root / "cases" / f"{case.name}-{self._serial}"
        folder.mkdir(parents=True, exist_ok=True)

        def ended(outcome: Outcome, **fields: Any) -> CaseResult:
            return CaseResult(
                case=case.name,
                title=case.title,
                category=case.category,
                outcome=outcome,
                seconds=time.monotonic() - began,
                repeat=repeat,
                **fields,
            )

        try:
            reached = [await self.backends.get(kind) for kind in case.backends]
        except BackendError as exc:
            return ended("error", error=str(exc))
        facts: dict[str, str] = {}
        try:
            async with AsyncExitStack() as stack:
                try:
                    for fault in case.faults:
                        backend, _ = await self.backends.get(fault.backend)
                        if fault.name not in backend.faults:
                            raise BackendError(
                                f"backend {fault.backend} has no fault {fault.name!r} "
                                f"(it has: {', '.join(backend.faults)})"
                            )
                        got = await stack.enter_async_context(
                            backend.fault(fault.name, fault.params)
                        )
                        facts.update(got)
                except Exception as exc:  # noqa: BLE001 (the case's error, not the model's)
                    return ended("error", error=f"fault could not be injected: {exc}", facts=facts)
                filled = case.with_facts(facts)
                catalog = await self._catalog(filled, [r for _, r in reached], folder)
                try:
                    seen = await self._drive(filled, catalog, repeat)
                finally:
                    await catalog.aclose()
        except Exception as exc:  # noqa: BLE001 (report, go on with the next case)
            log.debug("case %s", case.name, exc_info=True)
            detail = "".join(traceback.format_exception_only(exc)).strip()
            return ended("error", error=f"the run failed: {detail}", facts=facts)
        finally:
            for kind in case.backends:
                with contextlib.suppress(Exception):
                    await self.backends.reset(kind)
        checks = grade(filled, seen)
        outcome: Outcome = "pass" if all(c.passed for c in checks) else "fail"
        return ended(outcome, checks=checks, observed=seen, facts=facts)

    async def _catalog(self, case: Case, reaches: Sequence[Reach], folder: Path) -> Catalog:
        packs, config, fragment = merge_reach(reaches)
        for reach in reaches:
            os.environ.update(reach.environ)
        own: dict[str, Any] = {}
        if case.tools is not None:
            loaded = yaml.safe_load((case.folder / case.tools).read_text()) or {}
            if not isinstance(loaded, dict):
                raise BackendError(f"{case.folder / case.tools}: tools.yml is a mapping")
            own = loaded
        merged = merge_yml(own, fragment)
        tools_file: Path | None = None
        if merged:
            tools_file = folder / "tools.yml"
            tools_file.write_text(yaml.safe_dump(merged, sort_keys=False))
        return await open_catalog(
            pack_names=packs,
            pack_config=PackConfig(**config),
            tools_file=tools_file,
        )

    async def _drive(self, case: Case, catalog: Catalog, repeat: int) -> Observed:
        assert self.redis is not None
        keys = Keys(f"opsloop-eval:{self.run_id}:{self._serial}")
        stores = Stores.build(self.redis, keys)
        knowledge = Knowledge(
            incidents=stores.incidents,
            retention_s=30 * 86400.0,
            runbooks=Runbooks(case.folder / case.runbooks) if case.runbooks else None,
            pages=PageReader(AddressPolicy.from_setting("")),
            alert_groups=stores.alert_groups,
        )
        notifier = EvalNotifier()
        limits = JobLimits(
            max_iterations=case.limits.max_iterations,
            deadline_s=case.limits.deadline_s,
            token_budget=case.limits.token_budget,
        )
        llm = self.model.settings
        turns = build_turns(
            stores,
            knowledge=knowledge,
            resolver=self.model.resolver,
            catalog=catalog,
            system_prompt=self.model.prompt,
            settings=TurnSettings(
                limits=limits,
                max_output_tokens=llm.max_output_tokens,
                stream=llm.stream,
                approval_ttl_s=case.limits.deadline_s + GRACE_S,
                approval_remind_s=0,
            ),
            pricing=self.model.pricing,
            notifier=notifier,
            consumer=f"opsloop-eval:{os.getpid()}",
        )
        job_id = await self._open(case, stores, turns, knowledge, limits)
        cards = await self._run(case, turns, job_id)
        record = await stores.jobs.get(job_id)
        if record is None:
            raise RuntimeError(f"job {job_id} vanished")
        history = stores.history(record.thread)
        await history.load()
        categories = {name: tool.category for name, tool in catalog.tools.items()}
        categories.update({t.name: t.category for t in knowledge.tools_for(case.channel)})
        categories["read_artifact"] = "read_only"
        state = record.progress
        return Observed(
            answer=record.output or "",
            stop_reason=record.stop_reason or record.status.value,
            error=record.error,
            iterations=state.iterations,
            prompt_tokens=state.usage.prompt_tokens,
            completion_tokens=state.usage.completion_tokens,
            cost_usd=state.cost_usd,
            calls=calls_of(history.originals, notifier.events, categories),
            cards=cards,
        )

    async def _open(
        self, case: Case, stores: Stores, turns: Turns, knowledge: Knowledge, limits: JobLimits
    ) -> str:
        """Start the case's job as the bot would; its id."""
        payload = case.alert_payload()
        if payload is None:
            ts = f"{time.time():.6f}"
            receipt = await turns.receiver.receive(
                Thread(case.channel, ts),
                ts=ts,
                user=case.opening.user,
                text=f"<@{BOT_USER}> {case.opening.mention}",
            )
            job_id = getattr(receipt, "job_id", None)
            if not job_id:
                raise RuntimeError(f"the mention started no job: {receipt}")
            return str(job_id)
        started: list[str] = []
        desk = AlertDesk(
            stores=stores,
            groups=stores.alert_groups,
            routes=single_channel(case.channel),
            limits=limits,
            receiver=turns.receiver,
            storm=None,
            poster=EvalPoster(),
            schedule=started.append,
            owner="opsloop-eval",
            knowledge=knowledge,
        )
        routed = await desk.receive(parse(json.dumps(payload).encode()))
        group = getattr(routed, "group", None)
        if group is None:
            raise RuntimeError(f"the alert was not routed: {routed}")
        await desk.work(group)
        if not started:
            raise RuntimeError("the alert started no investigation")
        return started[0]

    async def _run(self, case: Case, turns: Turns, job_id: str) -> list[CardSeen]:
        """Run the job to its end, answering each card as the case scripts it."""
        policy = ApproverPolicy(
            case.approvers,
            AsyncWebClient(token="xoxb-opsloop-eval", base_url="http://127.0.0.1:9/"),
            bot_user=lambda: BOT_USER,
        )
        deadline = time.monotonic() + case.limits.deadline_s + GRACE_S
        cards: list[CardSeen] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"the job did not end within {case.limits.deadline_s + GRACE_S:.0f} s"
                )
            await asyncio.wait_for(turns.runner.run_job(job_id), timeout=left)
            record = await turns.stores.jobs.get(job_id)
            if record is None:
                raise RuntimeError(f"job {job_id} vanished")
            if record.status.final:
                return cards
            if record.status is not JobStatus.AWAITING_APPROVAL:
                await asyncio.sleep(0.05)  # a lease still held: look again
                continue
            approval = await turns.cards.waiting(job_id)
            if approval is None:
                raise RuntimeError(f"job {job_id} awaits an approval that is not there")
            if len(cards) >= MAX_CARDS:
                await turns.controls.stop(job_id, BOT_USER)
                continue
            cards.append(await self._answer(case.card(len(cards)), approval, turns, policy))

    async def _answer(
        self, script: CardScript, approval: ApprovalRecord, turns: Turns, policy: ApproverPolicy
    ) -> CardSeen:
        clicks: list[ClickSeen] = []
        for click in script.all_clicks():

            async def authorize(record: ApprovalRecord, user: str = click.user) -> str | None:
                return await policy.may_decide(
                    user,
                    requester=record.requester,
                    destructive=record.category == "destructive",
                )

            current = await turns.stores.approvals.get(approval.job_id, approval.call_id)
            verdict: Verdict | EditErrors
            if click.edit is not None:
                verdict = await turns.edits.submit(
                    approval.job_id,
                    approval.call_id,
                    values=dict(click.edit.values),
                    by=click.user,
                    seen_edit=current.edit_tag if current is not None else "",
                    authorize=authorize,
                )
            else:
                verdict = await turns.controls.decide(
                    approval.job_id,
                    approval.call_id,
                    outcome="approved" if click.outcome == "approved" else "denied",
                    by=click.user,
                    card_ts=None,
                    authorize=authorize,
                    seen_edit=current.edit_tag if current is not None else None,
                )
            match verdict:
                case EditErrors(errors=errors):
                    said = "; ".join(f"{k}: {v}" for k, v in errors.items())
                    clicks.append(ClickSeen(click.user, click.outcome, "invalid", said))
                case Accepted():
                    clicks.append(ClickSeen(click.user, click.outcome, "accepted"))
                case FirstApproval():
                    clicks.append(ClickSeen(click.user, click.outcome, "first_approval"))
                case Refused(reason=reason, text=text):
                    clicks.append(ClickSeen(click.user, click.outcome, reason, text))
                case _:
                    clicks.append(ClickSeen(click.user, click.outcome, "unknown"))
        now = await turns.stores.approvals.get(approval.job_id, approval.call_id)
        if now is not None and now.status == "pending":
            # Nobody decided: the card expires, as the scanner decides it once its time
            # is up (the case does not wait for that time to pass).
            await turns.stores.approvals.decide(
                approval.job_id,
                approval.call_id,
                outcome="expired",
                by=None,
                args_hash=None,
                now=max(time.time(), now.expires_at),
            )
            now = await turns.stores.approvals.get(approval.job_id, approval.call_id)
            if now is None or now.status == "pending":
                raise RuntimeError(f"the card of {approval.tool} could not be expired")
        return CardSeen(
            call_id=approval.call_id,
            tool=approval.tool,
            arguments=dict(approval.arguments),
            approved_arguments=dict(now.approved_arguments) if now is not None else None,
            category=approval.category,
            clicks=tuple(clicks),
            status=now.status if now is not None else "unknown",
            decided_by=now.decided_by if now is not None else None,
        )
