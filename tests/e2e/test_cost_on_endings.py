"""What a job's model calls cost, end to end: a model that reports usage, ``OPSLOOP_PRICES``
pricing it (a self-hosted model the price table does not know), and the dollar figure on
the job's ending in Slack, in ``opsloop_model_cost_usd_total`` on ``/metrics`` and on the
summary line of ``opsloop trace``."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply, ScriptedCall
from bot.emulator.slack import FakeSlack

from .approvals_kit import texts, tools_yml, wait_until
from .conftest import StartBot
from .harness import LLM_MODEL, BotProcess, ScriptedModel, mention, steps
from .test_metrics import scrape, value
from .test_trace_cmd import opsloop_trace

PRICES = f"""\
models:
  {LLM_MODEL}: {{input_per_mtok: 20, cached_input_per_mtok: 5, output_per_mtok: 100}}
"""
# First call: 300 uncached × $20 + 600 cached × $5 + 20 out × $100 = $0.011 per million;
# second: 1,000 × $20 + 30 × $100 = $0.023. The job: $0.034, shown as "$0.03".
COST_USD = (300 * 20 + 600 * 5 + 20 * 100 + 1000 * 20 + 30 * 100) / 1_000_000


async def priced_job(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> tuple[BotProcess, str, str]:
    """A job whose two model calls report usage, priced by ``OPSLOOP_PRICES``, run to its
    ending; the bot, the thread's ts and the ending's text."""
    tools, _ = tools_yml(tmp_path)
    prices = tmp_path / "prices.yml"
    prices.write_text(PRICES)
    model.policy = steps(  # type: ignore[arg-type]
        Reply(
            tool_calls=[ScriptedCall("check_host", {"host": "web-03"})],
            prompt_tokens=900,
            completion_tokens=20,
            cached_tokens=600,
        ),
        Reply(content="web-03 looks fine.", prompt_tokens=1000, completion_tokens=30),
    )
    serve = await bot(OPSLOOP_TOOLS=tools, OPSLOOP_PRICES=str(prices))
    event = mention("C1", "U1", "check web-03")
    assert (await serve.send(event))[0] == 200

    def ending() -> str:  # the status message once it is the ending ("… · 1 tool run")
        return next((t for t in texts(slack, "C1", event["ts"]) if " tool run" in t), "")

    await slack.wait_for(lambda: bool(ending()), timeout=30)

    async def ended() -> bool:  # the job's final writes land just after the ending
        return value(await scrape(serve), "opsloop_live_jobs") == 0

    await wait_until(ended, timeout=10, what="no live job")
    return serve, event["ts"], ending()


async def test_the_cost_shows_on_the_ending_and_in_the_trace(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    _, ts, ending = await priced_job(bot, slack, model, tmp_path)
    assert ending.startswith("Done\n")
    assert "tokens 1,350/200,000 · $0.03 · 1 tool run" in ending, ending

    code, out, err = await opsloop_trace(redis_server, f"C1:{ts}:j1")
    assert code == 0, err
    summary = next(line for line in out.splitlines() if " iterations · " in line)
    assert "1,350 of 200,000 tokens · $0.03 · " in summary, summary


async def test_every_priced_call_is_counted_in_metrics(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    serve, _, _ = await priced_job(bot, slack, model, tmp_path)
    samples = await scrape(serve)
    cost = value(samples, "opsloop_model_cost_usd_total", model=LLM_MODEL)
    assert cost == pytest.approx(COST_USD)


async def test_a_bad_prices_file_stops_the_bot_at_start_up(bot: StartBot, tmp_path: Path) -> None:
    prices = tmp_path / "prices.yml"
    prices.write_text(f"models:\n  {LLM_MODEL}: {{input_per_mtok: 1}}\n")
    process = await bot(OPSLOOP_PRICES=str(prices), wait=False)
    assert await process.wait_exit() != 0
    output = process.output()
    assert f"OPSLOOP_PRICES ({prices})" in output
    assert f"models.{LLM_MODEL}.output_per_mtok" in output
