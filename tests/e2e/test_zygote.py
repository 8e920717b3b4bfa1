"""``serve`` children forked from the warm zygote behave as fresh ``python -m bot serve``
processes: they answer ``/healthz``, run with exactly the environment asked for (nothing of
the test process's or the zygote's own), die of a real SIGKILL (-9), exit 0 on SIGTERM and
2 on bad settings, and have a fresh start's signal dispositions, descriptors and cwd;
``OPSLOOP_TEST_FORK=0`` spawns them fresh. Closing the zygote takes its children along."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from bot.emulator import zygote
from bot.emulator.bot_process import base_env, bot_env
from bot.emulator.redis_server import ManagedRedis, free_port
from bot.emulator.slack import FakeSlack

from .conftest import StartBot
from .harness import ScriptedModel

WAIT_S = 30.0


def parent_of(pid: int) -> int:
    """The parent pid of a running process, from ``/proc/PID/stat``."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def signal_masks(pid: int) -> dict[str, str]:
    """Blocked, ignored and caught signals of a process, from ``/proc/PID/status``."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    keys = ("SigBlk", "SigIgn", "SigCgt")
    return {k: v.strip() for k, v in (line.split(":", 1) for line in lines) if k in keys}


def socket_inodes(pid: int) -> set[str]:
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


async def test_a_forked_serve_answers_healthz_as_the_zygotes_child(bot: StartBot) -> None:
    proc = await bot()
    assert proc.forked and proc.pid is not None
    forks = zygote.current_zygote()
    assert forks is not None and forks.refused is None
    assert parent_of(proc.pid) == forks.pid != os.getpid()
    assert os.getsid(proc.pid) == proc.pid  # its own session, as start_new_session=True
    assert (await proc.get("/healthz"))[0] == 200


async def test_a_forked_serve_starts_as_a_fresh_one_does(
    bot: StartBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    forked = await bot()
    monkeypatch.setenv(zygote.FORK_SWITCH, "0")
    fresh = await bot()
    assert forked.forked and not fresh.forked
    assert forked.pid is not None and fresh.pid is not None
    assert signal_masks(forked.pid) == signal_masks(fresh.pid)
    assert os.readlink(f"/proc/{forked.pid}/cwd") == str(forked.log_dir)
    std = [os.readlink(f"/proc/{forked.pid}/fd/{fd}") for fd in (0, 1, 2)]
    assert std == [os.devnull, str(forked.stdout_path), str(forked.stderr_path)]
    forks = zygote.current_zygote()
    assert forks is not None
    assert not socket_inodes(forked.pid) & socket_inodes(forks.pid)  # no control socket


async def test_a_fresh_spawn_when_forking_is_switched_off(
    bot: StartBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(zygote.FORK_SWITCH, "0")
    proc = await bot()
    assert not proc.forked and proc.pid is not None
    assert parent_of(proc.pid) == os.getpid()


async def test_sigkill_is_reported_as_minus_nine(bot: StartBot) -> None:
    proc = await bot()
    assert proc.forked
    assert await proc.kill() == -9


async def test_sigterm_ends_it_with_zero(bot: StartBot) -> None:
    proc = await bot()
    assert proc.forked
    assert await proc.stop() == 0


async def test_bad_settings_exit_2_saying_why(bot: StartBot) -> None:
    proc = await bot(wait=False, LLM_MODEL=None)
    assert proc.forked
    assert await proc.wait_exit() == 2
    assert re.search(r"LLM_MODEL", proc.stderr_path.read_text())


async def test_the_child_gets_exactly_the_environment_asked_for(
    slack: FakeSlack,
    redis_server: ManagedRedis,
    model: ScriptedModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # SLACK_BOT_TOKEN is in the test process and in the zygote, not in the child's request.
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-not-for-the-child")
    forks = await asyncio.to_thread(
        zygote.Zygote, {**base_env(), "SLACK_BOT_TOKEN": "xoxb-not-for-the-child"}
    )
    try:
        env = bot_env(slack, redis_server, model, extra={"SLACK_BOT_TOKEN": None})
        assert forks.mismatch(env) == []
        out, err = tmp_path / "out.log", tmp_path / "err.log"
        with out.open("ab") as stdout, err.open("ab") as stderr:
            child = await forks.fork(
                ["serve"],
                env,
                cwd=tmp_path,
                stdout=stdout.fileno(),
                stderr=stderr.fileno(),
                new_session=True,
            )
        assert await asyncio.wait_for(child.wait(), WAIT_S) == 2
        assert "SLACK_BOT_TOKEN" in err.read_text()
    finally:
        await asyncio.to_thread(forks.close)


async def test_closing_the_zygote_kills_its_children(
    slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel, tmp_path: Path
) -> None:
    forks = await asyncio.to_thread(zygote.Zygote, base_env())
    try:
        out, err = tmp_path / "out.log", tmp_path / "err.log"
        with out.open("ab") as stdout, err.open("ab") as stderr:
            child = await forks.fork(
                ["serve"],
                {**bot_env(slack, redis_server, model), "PORT": str(free_port())},
                cwd=tmp_path,
                stdout=stdout.fileno(),
                stderr=stderr.fileno(),
                new_session=True,
            )
        assert child.returncode is None
    finally:
        await asyncio.to_thread(forks.close)
    assert await asyncio.wait_for(child.wait(), WAIT_S) == -9


def test_only_serve_and_socket_are_forked(monkeypatch: pytest.MonkeyPatch) -> None:
    python = sys.executable
    assert zygote.wants_fork((python, "-m", "bot", "serve"))
    assert zygote.wants_fork((python, "-m", "bot", "socket"))
    assert not zygote.wants_fork((python, "-m", "bot", "check"))
    assert not zygote.wants_fork((python, "-c", "pass"))
    monkeypatch.setenv(zygote.FORK_SWITCH, "0")
    assert not zygote.wants_fork((python, "-m", "bot", "serve"))
