"""`opsloop dev` points the bot at its runbooks folder: when the demo's alert fires by
itself, the bot puts web's runbook (its ``runbook_url``, under the address the dev command
gives as ``OPSLOOP_RUNBOOKS_URL``) in the investigation's first request, and the demo
model's answer in the alert's thread cites the runbook section and steps it followed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from .test_demo_fires_its_alert import reply, root, wait_for
from .test_dev_command import cleanup, read_until, spawn_dev

__all__ = ["cleanup"]  # the fixture, shared with the dev command's tests


async def test_the_demo_alerts_investigation_cites_web_runbook(
    tmp_path: Path, cleanup: list[asyncio.subprocess.Process]
) -> None:
    proc = await spawn_dev(tmp_path / "dev", "--port", "0", "--degrade-after", "1")
    cleanup.append(proc)
    seen: list[str] = []
    line = await read_until(proc, r"open http://", seen)
    url = line.split("open ", 1)[1].split()[0]

    timeout = httpx.Timeout(10, read=None)  # the stream is quiet until something happens
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=timeout) as http:
        alert = await wait_for(http, root("Firing: WebErrorRateHigh"))
        # The citation ends the answer, streamed in last: wait for its last words.
        answer = await wait_for(
            http, reply(alert["ts"], "WebErrorRateHigh: confirmed", "read the log")
        )

    assert "Following the team's runbook `web.md#triage`" in answer["text"], answer["text"]
    assert "steps 1–3 — check health, read the metrics, read the log" in answer["text"]
