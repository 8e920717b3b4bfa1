"""What scrubbing credentials costs: ``redact_secrets`` on clean and secret-laden tool
output of several sizes (median of repeats, ms), against ``str.lower`` of the same text
(the floor: the trigger scan lowers the text once), and the longest time the event loop
is held while ``redact_secrets_in_turns`` scrubs a megabyte, and the Slack payload
scrubber on a status message.

    python benchmarks/redact.py
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable

from bot.agent.redact import redact_secrets, redact_secrets_in_turns
from bot.scrub import Scrubber
from bot.slack.status_blocks import Progress, ToolLine, status_message

CLEAN = (
    "2026-11-30T06:04:27Z INFO nginx[123]: 10.0.0.7 GET https://api.example.com/v1/orders"
    "?id=4412 200 12ms\n"
)
SECRET = (
    "2026-11-30T06:04:27Z WARN auth: login failed password=hunter2"
    " Authorization: Bearer eyJabc.eyJdef.ghijkl\n"
)
SIZES = (4_000, 64_000, 1_000_000)


def text_of(size: int, *, secret_every: int | None) -> str:
    lines = [
        SECRET if secret_every and i % secret_every == secret_every - 1 else CLEAN
        for i in range(size // len(CLEAN) + 1)
    ]
    return "".join(lines)[:size]


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def longest_hold_ms(text: str) -> tuple[float, float]:
    gaps: list[float] = []
    done = False

    async def probe() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(probe())
    started = time.perf_counter()
    await redact_secrets_in_turns(text)
    total = time.perf_counter() - started
    done = True
    await task
    return total * 1000, max(gaps) * 1000


def main() -> None:
    print("redact_secrets, median ms")
    print(f"{'size':>9} {'lower() floor':>14} {'clean':>8} {'1% secret lines':>16}")
    for size in SIZES:
        repeats = 30 if size < 100_000 else 5
        clean = text_of(size, secret_every=None)
        dirty = text_of(size, secret_every=100)
        print(
            f"{size:>9,} {median_ms(clean.lower, repeats):>14.3f}"
            f" {median_ms(lambda t=clean: redact_secrets(t), repeats):>8.3f}"  # type: ignore[misc]
            f" {median_ms(lambda t=dirty: redact_secrets(t), repeats):>16.3f}"  # type: ignore[misc]
        )
    total, hold = asyncio.run(longest_hold_ms(text_of(1_000_000, secret_every=100)))
    print(f"in turns, 1 MB with 1% secret lines: {total:.0f} ms in all, loop held ≤ {hold:.1f} ms")
    progress = Progress(
        job_id="C1:1700000000.000100:j1",
        iteration=3,
        max_iterations=20,
        tokens_used=12_345,
        token_budget=200_000,
        active_s=12.0,
        model="gpt-4.1",
        current_tool="host_cpu",
        finished=[ToolLine("web_health", "HTTP 500 in 2598 ms …", True)] * 3,
    )
    message = status_message(progress)
    payload = {"channel": "C1", "ts": "1700000000.000200", "text": message.text}
    payload["blocks"] = message.blocks  # type: ignore[assignment]
    scrub = Scrubber(["xoxb-abc-1234567890", "signing-secret-xyz", "sk-proj-1234567890ab"])
    us = median_ms(lambda: scrub.payload(payload), 2000) * 1000
    print(f"Slack payload scrub (a status message): {us:.1f} µs")


if __name__ == "__main__":
    main()
