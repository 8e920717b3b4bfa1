"""Slack ack latency under load, and time to the first status message.

`opsloop serve` runs as its own process on real Redis (AOF, appendfsync always), the fake
Slack Web API and the scripted model server (answers instantly) run in this process.
Signed `app_mention` events, each in a new thread (so each starts a real job), are sent
at 20, 50 and 100 per second for a few seconds each. Reported per rate: ack latency
p50/p99, non-2xx answers, and the time from sending an event to the bot's status message
(p50/p99).

    python benchmarks/slack_ack.py [--seconds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bot.llm.scripted import Reply, ScriptedServer
from bot.slack.fake import FakeSlack
from bot.store.managed import ManagedRedis
from tests.e2e.harness import BotProcess, bot_env, event_body, mention, sign

SECRET = "bench-secret"


class TimedSlack(FakeSlack):
    """Records when each thread's first bot message arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.first_post: dict[str, float] = {}

    async def _handle(self, request: Any) -> Any:
        response = await super()._handle(request)
        if self.calls and self.calls[-1].method == "chat.postMessage":
            thread = self.calls[-1].params.get("thread_ts")
            if thread and thread not in self.first_post:
                self.first_post[str(thread)] = time.perf_counter()
        return response


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def load(
    http: httpx.AsyncClient, url: str, slack: TimedSlack, rate: int, seconds: float
) -> tuple[list[float], int, list[float]]:
    acks: list[float] = []
    bad = 0
    sent_at: dict[str, float] = {}

    async def one() -> None:
        nonlocal bad
        event = mention("CBENCH", "U1", "status?")
        body = event_body(event)
        headers = {**sign(body, SECRET), "Content-Type": "application/json"}
        start = time.perf_counter()
        sent_at[event["ts"]] = start
        response = await http.post(url, content=body, headers=headers)
        acks.append((time.perf_counter() - start) * 1000)
        if response.status_code >= 300:
            bad += 1

    tasks = []
    total = int(rate * seconds)
    begin = time.perf_counter()
    for n in range(total):
        delay = begin + n / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    deadline = time.perf_counter() + 30
    while len([ts for ts in sent_at if ts in slack.first_post]) < total:
        if time.perf_counter() > deadline:
            break
        await asyncio.sleep(0.05)
    firsts = [
        (slack.first_post[ts] - sent) * 1000
        for ts, sent in sent_at.items()
        if ts in slack.first_post
    ]
    return acks, bad, firsts


async def main(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        redis = ManagedRedis(Path(tmp) / "redis").start()
        model = ScriptedServer(lambda request: Reply(content="ok"))
        await model.start()
        async with TimedSlack() as slack:
            env = bot_env(slack, redis, model, secret=SECRET)
            bot = BotProcess(env, Path(tmp) / "bot", secret=SECRET)
            await bot.start()
            try:
                async with httpx.AsyncClient(
                    limits=httpx.Limits(max_connections=200), timeout=30, trust_env=False
                ) as http:
                    print("signed app_mention events against `opsloop serve` (real Redis)")
                    print(
                        f"{'rate/s':>6} {'sent':>5} {'non-2xx':>7} {'ack p50':>8} {'ack p99':>8}"
                        f" {'status p50':>10} {'status p99':>10}  (ms)"
                    )
                    for rate in (20, 50, 100):
                        acks, bad, firsts = await load(
                            http, bot.url + "/slack/events", slack, rate, seconds
                        )
                        print(
                            f"{rate:>6} {len(acks):>5} {bad:>7} {statistics.median(acks):>8.1f}"
                            f" {pct(acks, 0.99):>8.1f} {statistics.median(firsts):>10.1f}"
                            f" {pct(firsts, 0.99):>10.1f}"
                        )
            finally:
                await bot.stop()
                await model.stop()
                redis.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=4.0)
    sys.exit(asyncio.run(main(parser.parse_args().seconds)))
