"""`opsloop dev` runs with alerts in: once the demo service degrades (after
``--degrade-after``, here 1 s) its alert fires by itself, the bot posts it in the page's
channel and the demo model's investigation answers in its thread; a restart of web
resolves it. The page's "Fire an alert" opens another group through the dev server, and
the bot's token is never in what the page is served."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.browser.conftest import descendants

from .test_dev_command import argv_of, cleanup, read_until, spawn_dev

__all__ = ["cleanup"]  # the fixture, shared with the dev command's tests

WAIT_S = 60.0


Found = Callable[[list[dict[str, Any]]], dict[str, Any] | None]


async def wait_for(http: httpx.AsyncClient, found: Found) -> dict[str, Any]:
    """The message ``found`` picks from the page's channel, once there is one: read from
    the page's own event stream (its snapshot, then each message posted or edited)."""
    messages: dict[str, dict[str, Any]] = {}
    kind = ""
    async with asyncio.timeout(WAIT_S), http.stream("GET", "ui/stream") as stream:
        async for line in stream.aiter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind in ("snapshot", "message", "update"):
                data = json.loads(line.removeprefix("data: "))
                for message in data["messages"] if kind == "snapshot" else [data]:
                    messages[message["ts"]] = message
                if (hit := found(list(messages.values()))) is not None:
                    return hit
    raise AssertionError("the page's stream ended")


def root(text: str) -> Found:
    return lambda ms: next((m for m in ms if not m.get("thread_ts") and text in m["text"]), None)


def reply(ts: str, *texts: str) -> Found:
    """A reply in thread ``ts`` holding every one of ``texts``: a streamed answer is seen
    part by part, so wait for the part a test reads, not just its first line."""
    return lambda ms: next(
        (m for m in ms if m.get("thread_ts") == ts and all(t in m["text"] for t in texts)),
        None,
    )


def alerts_token(dev_pid: int) -> str:
    [bot] = [pid for pid in descendants(dev_pid) if argv_of(pid)[1:4] == ["-m", "bot", "serve"]]
    environ = Path(f"/proc/{bot}/environ").read_bytes().split(b"\0")
    [token] = [
        v[len(b"OPSLOOP_ALERTS_TOKEN=") :]
        for v in environ
        if v.startswith(b"OPSLOOP_ALERTS_TOKEN=")
    ]
    return token.decode()


async def test_the_demo_fires_its_alert_by_itself_and_resolves_it_when_repaired(
    tmp_path: Path, cleanup: list[asyncio.subprocess.Process]
) -> None:
    folder = tmp_path / "dev"
    proc = await spawn_dev(folder, "--port", "0", "--degrade-after", "1")
    cleanup.append(proc)
    seen: list[str] = []
    line = await read_until(proc, r"open http://", seen)
    url = line.split("open ", 1)[1].split()[0]
    await read_until(proc, r"its alert \(WebErrorRateHigh\) then fires by itself", seen)

    timeout = httpx.Timeout(10, read=None)  # the stream is quiet until something happens
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=timeout) as http:
        alert = await wait_for(http, root("Firing: WebErrorRateHigh"))
        # The whole answer: its last sentence has streamed in.
        answer = await wait_for(
            http, reply(alert["ts"], "WebErrorRateHigh: confirmed", "I changed nothing")
        )
        assert "**Likely cause:** the log says so" in answer["text"], answer["text"]

        restart = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.dev.demo_service", "restart", "--dir", str(folder),
            stdout=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        assert await restart.wait() == 0
        await wait_for(http, root("Resolved at"))

        token = alerts_token(proc.pid)
        fired = await http.post("ui/fire-alert", json={})
        assert fired.json() == {
            "ok": True, "status": 200, "outcome": "opened", "alert": "WebLatencyHigh"
        }  # fmt: skip
        await wait_for(http, root("Firing: WebLatencyHigh"))
        served = [fired.text, (await http.get("ui/info")).text, (await http.get("ui/state")).text]
        assert len(token) >= 32 and not any(token in text for text in served)
