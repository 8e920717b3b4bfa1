"""With no ``OTEL_*`` environment, tracing is off and free: importing the service and
running a job loads no ``opentelemetry`` module. Run in a fresh interpreter (this one has
the SDK loaded by the tracing tests); the same script with an OTLP endpoint set shows that
the check sees the SDK when it is there.

redis-py 8 imports the OpenTelemetry *metrics* SDK by itself whenever it is installed
(``redis.observability``, off unless configured), so what is counted is what opsloop
loads beyond what ``import redis.asyncio`` already did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.emulator.redis_server import ManagedRedis

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import asyncio, json, sys

def otel() -> set[str]:
    return {m for m in sys.modules if m.split(".")[0] == "opentelemetry"}

import redis.asyncio  # noqa: F401  (redis-py >= 8 loads the OTel metrics SDK if installed)
BASELINE = otel()

import bot.cli.main  # noqa: F401  (everything ``opsloop serve`` imports)
import bot.service  # noqa: F401
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.settings import load_otel_settings
from bot.store.connection import connect
from bot.store.jobs import JobLimits
from bot.store.keys import Keys, Thread
from bot.otel.tracing import TracingOptions, open_tracing
from bot.service import build_turns
from bot.store.parts import Stores
from bot.turns.parts import Turns
from bot.turns.run import TurnSettings
from tests.agent.conftest import echo_tool
from tools.registry import Catalog


async def main() -> None:
    redis = connect(sys.argv[1])
    tool = echo_tool()
    settings = load_otel_settings()
    tracing = open_tracing(settings.enabled, TracingOptions(shutdown_s=0.1))
    turns = build_turns(
        Stores.build(redis, Keys("otel-off:")),
        resolver=ScriptedModel([calls(call("check", "c1", host="web-03")), text("fine")]),
        catalog=Catalog(tools={tool.name: tool}, sources={tool.name: "test"}),
        system_prompt="You are opsloop.",
        settings=TurnSettings(limits=JobLimits(max_iterations=5, deadline_s=60, token_budget=9999)),
        tracing=tracing,
    )
    ts = sys.argv[2]
    receipt = await turns.receiver.receive(Thread("C1", ts), ts=ts, user="U1", text="look")
    result = await turns.runner.run_job(receipt.job_id)
    assert result is not None and result.stop_reason.value == "completed", result
    if tracing is not None:
        tracing.close()
    await redis.aclose()


asyncio.run(main())
print(json.dumps(sorted(otel() - BASELINE)))
"""


def loaded(redis_url: str, ts: str, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, redis_url, ts],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    names: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return names


@pytest.fixture
def redis_url(server: ManagedRedis) -> str:
    return server.url


def test_a_job_with_tracing_off_imports_no_opentelemetry(redis_url: str) -> None:
    assert loaded(redis_url, "1700000000.000100") == []


def test_the_check_sees_the_sdk_when_tracing_is_on(redis_url: str) -> None:
    # An endpoint nobody listens on: the spans are dropped, the job is not slowed.
    names = loaded(
        redis_url,
        "1700000000.000200",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        OTEL_EXPORTER_OTLP_TIMEOUT="1",
    )
    assert "opentelemetry.sdk.trace" in names
