"""``GET /metrics`` as a Prometheus server scrapes it: what this process did (jobs by how
they ended, model calls with their tokens, time and failures per model, tool runs with
their outcome and time, Slack ack latency) and what the workspace has open right now
(live jobs, pending approvals, from Redis; ``opsloop_redis_up`` says whether it answered)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Fault, Reply, ScriptedCall
from bot.emulator.slack import FakeSlack

from .approvals_kit import texts, tools_yml, wait_card, wait_until
from .conftest import StartBot
from .harness import LLM_MODEL, BotProcess, ScriptedModel, mention, steps

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(serve: BotProcess) -> Samples:
    status, text = await serve.get("/metrics")
    assert status == 200
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


async def test_metrics_count_what_the_process_did_and_what_is_open(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, _ = tools_yml(tmp_path)
    model.policy = steps(  # type: ignore[arg-type]
        Reply(
            tool_calls=[ScriptedCall("check_host", {"host": "web-03"})],
            prompt_tokens=900,
            completion_tokens=20,
            cached_tokens=600,
        ),
        Reply(content="web-03 looks fine.", prompt_tokens=1000, completion_tokens=30),
        Reply(
            content="Restarting nginx.",
            tool_calls=[ScriptedCall("restart_service", {"service": "nginx"})],
            prompt_tokens=500,
            completion_tokens=10,
        ),
        Fault(status=400, message="invalid request"),
    )
    serve = await bot(OPSLOOP_TOOLS=tools)
    first = mention("C1", "U1", "check web-03")
    assert (await serve.send(first))[0] == 200
    await slack.wait_for(
        lambda: "web-03 looks fine." in texts(slack, "C1", first["ts"]), timeout=30
    )

    async def ended() -> bool:  # the answer is shown just before the job's final write
        return value(await scrape(serve), "opsloop_live_jobs") == 0

    await wait_until(ended, timeout=10, what="no live job")
    samples = await scrape(serve)
    assert value(samples, "opsloop_jobs_total", status="completed") == 1
    assert value(samples, "opsloop_model_calls_total") == 2
    assert value(samples, "opsloop_model_errors_total", model=LLM_MODEL) is None
    assert value(samples, "opsloop_model_seconds_count", model=LLM_MODEL) == 2
    assert value(samples, "opsloop_model_tokens_total", model=LLM_MODEL, kind="prompt") == 1900
    assert value(samples, "opsloop_model_tokens_total", model=LLM_MODEL, kind="cached") == 600
    assert value(samples, "opsloop_model_tokens_total", model=LLM_MODEL, kind="completion") == 50
    assert value(samples, "opsloop_tool_executions_total", tool="check_host", outcome="ok") == 1
    assert value(samples, "opsloop_tool_seconds_count", tool="check_host") == 1
    assert value(samples, "opsloop_ack_seconds_count") == 1
    assert value(samples, "opsloop_redis_up") == 1
    assert value(samples, "opsloop_live_jobs") == 0
    assert value(samples, "opsloop_pending_approvals") == 0

    second = mention("C1", "U1", "restart nginx")
    assert (await serve.send(second))[0] == 200
    await wait_card(slack, "C1", second["ts"])
    samples = await scrape(serve)
    assert value(samples, "opsloop_live_jobs") == 1  # paused, waiting for a person
    assert value(samples, "opsloop_pending_approvals") == 1
    assert value(samples, "opsloop_jobs_total", status="awaiting_approval") is None

    third = mention("C2", "U1", "and web-04?")
    assert (await serve.send(third))[0] == 200
    await slack.wait_for(
        lambda: any("`failed`" in t for t in texts(slack, "C2", third["ts"])), timeout=30
    )

    async def only_the_paused_one() -> bool:
        return value(await scrape(serve), "opsloop_live_jobs") == 1

    await wait_until(only_the_paused_one, timeout=10, what="one live job")
    samples = await scrape(serve)
    assert value(samples, "opsloop_jobs_total", status="failed") == 1
    assert value(samples, "opsloop_model_errors_total", model=LLM_MODEL) == 1
    assert value(samples, "opsloop_model_calls_total") == 4

    await asyncio.to_thread(redis_server.stop)
    try:
        samples = await scrape(serve)  # still answers, within the health bound
    finally:
        await asyncio.to_thread(redis_server.start)
    assert value(samples, "opsloop_redis_up") == 0
    assert value(samples, "opsloop_live_jobs") is None  # unknown, not a stale figure
    assert value(samples, "opsloop_model_calls_total") == 4
