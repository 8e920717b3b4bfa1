"""Fixtures for the end-to-end tests: real Redis, the fake Slack, the scripted model, the bot.

``bot`` is a factory: ``proc = await bot(OPSLOOP_MAX_ITERATIONS="3")`` starts ``opsloop serve``
against this test's ``slack``, ``redis_server`` and ``model`` and stops it after the test
(call it again for a second process on the same Redis). Tests that use it are skipped while
``python -m bot serve`` does not exist yet. When a test fails, the output of every bot it
started is attached to its report.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.slack import FakeSlack
from tests.e2e.harness import SERVE_ARGV, BotProcess, ScriptedModel, bot_env

HELP_TIMEOUT_S = 60.0

StartBot = Callable[..., Awaitable[BotProcess]]
_BOTS = pytest.StashKey[list[BotProcess]]()


@pytest.fixture(scope="session")
def serve_available() -> bool:
    """Whether ``python -m bot serve --help`` works (checked once per session)."""
    try:
        done = subprocess.run(
            [*SERVE_ARGV, "--help"],
            capture_output=True,
            timeout=HELP_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.fixture(scope="session")
def _redis_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedRedis]:
    managed = ManagedRedis(tmp_path_factory.mktemp("e2e-redis")).start()
    yield managed
    managed.stop()


@pytest.fixture
async def redis_server(_redis_process: ManagedRedis) -> ManagedRedis:
    """The session's redis-server, flushed (and restarted if a previous test killed it)."""
    if not _redis_process.running:
        _redis_process.start()
    client = aioredis.Redis.from_url(_redis_process.url)
    try:
        await client.flushall()
    finally:
        await client.aclose()
    return _redis_process


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(usergroups={"SOPS": ["UAPPROVER1", "UAPPROVER2"]}) as fake:
        yield fake


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    """The scripted model server; the test sets ``model.policy`` (e.g. ``steps(...)``)."""
    scripted = ScriptedModel()
    await scripted.server.start()
    yield scripted
    await scripted.server.stop()


@pytest.fixture
def bot_argv() -> tuple[str, ...]:
    """The command ``bot`` starts (the harness's own tests swap in a stand-in)."""
    return SERVE_ARGV


@pytest.fixture
async def bot(
    request: pytest.FixtureRequest,
    serve_available: bool,
    bot_argv: tuple[str, ...],
    slack: FakeSlack,
    redis_server: ManagedRedis,
    model: ScriptedModel,
    tmp_path: Path,
) -> AsyncIterator[StartBot]:
    """``await bot(**env)`` → a started ``opsloop serve`` (``wait=False``: only spawned).

    ``env`` adds variables to the defaults of ``bot_env``; a None value removes one.
    """
    if not serve_available:
        pytest.skip("`python -m bot serve` is not available yet")
    started: list[BotProcess] = []
    request.node.stash[_BOTS] = started

    async def start(*, wait: bool = True, **env: str | None) -> BotProcess:
        child_env = bot_env(slack, redis_server, model, extra=env)
        proc = BotProcess(child_env, tmp_path / "bot", argv=bot_argv)
        started.append(proc)
        return await (proc.start() if wait else proc.spawn())

    yield start
    for proc in reversed(started):
        await proc.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach every started bot's stdout and stderr to a failing test's report."""
    report = yield
    if report.failed:
        for proc in item.stash.get(_BOTS, []):
            report.sections.append((f"opsloop serve {proc.name}", proc.output()))
    return report
