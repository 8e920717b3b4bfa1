"""``opsloop dev``: the whole bot on one machine, with a Slack-like page.

Starts, in order, and stops in reverse on Ctrl-C (or when the bot process dies), each
by the pid it started:

1. Redis: ``REDIS_URL`` if set, else a managed ``redis-server`` child (AOF always) with
   its data under the dev folder;
2. the demo service "web" (``bot.dev.demo_service``), which degrades on a timer, and a
   tools.yml whose tools check it and restart it (``bot.dev.demo_tools``), unless
   ``OPSLOOP_TOOLS`` names your own;
3. the model: the configured ``LLM_*`` endpoint, else the scripted demo model
   (``bot.dev.demo_model``) on a loopback port, labelled "demo model" on the page;
4. the Slack emulator and its page (``bot.dev.workspace``), on ``--port`` (3000) or,
   when that is taken, a free port (said so);
5. ``opsloop serve`` as a child process on a free loopback port, pointed at the
   emulator (``SLACK_API_URL``) with a fresh signing secret; the emulator delivers
   events and clicks to it, signed, as Slack does. Alerts in are on: a fresh
   ``OPSLOOP_ALERTS_TOKEN`` and the page's channel as ``OPSLOOP_ALERTS_CHANNEL``;
6. the demo's alerting (``bot.dev.demo_alerts``), which posts Alertmanager's webhook to
   the bot with that token: the page's "Fire an alert", and, with the demo service, its
   rule on web's error rate, which fires once web degrades (about ``--degrade-after``
   seconds in) and resolves once it is repaired. ``OPSLOOP_DEV_DEMO_ALERT=0`` turns the
   rule off (the page's button still fires); ``OPSLOOP_DEV_DEMO_CPU`` is the share of one
   core the degraded service burns (default 0.6).

The bot reads the team's runbooks from ``OPSLOOP_RUNBOOKS`` if you set it, else from the
demo's folder (``bot/dev/runbooks``: web's runbook, naming its alerts, and two others),
with ``OPSLOOP_RUNBOOKS_URL`` the address the demo's alerts' ``runbook_url`` points under
(``bot.dev.demo_runbook``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bot.errors import ConfigError

DEFAULT_PAGE_PORT = 3000
BOT_START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0
DEV_DRAIN_S = "3"  # seconds the bot may drain on Ctrl-C, inside STOP_TIMEOUT_S
DEMO_ALERT_SWITCH = "OPSLOOP_DEV_DEMO_ALERT"  # "0": the demo's rule does not fire by itself


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def model_configured(environ: Mapping[str, str]) -> bool:
    """Whether the user configured a model endpoint of their own."""
    return bool(environ.get("LLM_MODEL") or environ.get("LLM_BASE_URL"))


def demo_alert_on(environ: Mapping[str, str]) -> bool:
    """Whether the demo's rule fires its alert by itself (the demo service runs, and
    ``OPSLOOP_DEV_DEMO_ALERT`` does not turn it off)."""
    return not environ.get("OPSLOOP_TOOLS") and environ.get(DEMO_ALERT_SWITCH, "1") != "0"


@dataclass
class DevStack:
    """Everything ``opsloop dev`` started, to be stopped in reverse."""

    folder: Path
    page_port: int = DEFAULT_PAGE_PORT
    degrade_after_s: float = 20.0
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    say: Callable[[str], None] = print
    _stops: list[Callable[[], object]] = field(default_factory=list)
    bot: asyncio.subprocess.Process | None = None
    page_url: str = ""
    managed_redis_url: str = ""  # the managed redis-server's address, when it is ours

    async def start(self) -> None:
        from bot.dev.demo_alerts import ALERTS_PATH, AlertSender, DemoAlerts
        from bot.dev.people import APPROVERS, DEV_USERS
        from bot.dev.workspace import Emulator
        from bot.emulator.redis_server import ManagedRedis

        self.folder.mkdir(parents=True, exist_ok=True)
        env: dict[str, str] = {}

        redis_url = self.environ.get("REDIS_URL")
        if not redis_url:
            managed = ManagedRedis(self.folder / "redis").start()  # ConfigError if missing
            self._stops.append(managed.stop)
            redis_url = self.managed_redis_url = managed.url
        env["REDIS_URL"] = redis_url

        service_port: int | None = None
        if self.environ.get("OPSLOOP_TOOLS"):
            env["OPSLOOP_TOOLS"] = self.environ["OPSLOOP_TOOLS"]
        else:
            from bot.dev.demo_service import start_service, stop_service
            from bot.dev.demo_tools import write_tools_file

            service_port = free_port()
            await asyncio.to_thread(start_service, self.folder, service_port, self.degrade_after_s)
            self._stops.append(lambda: stop_service(self.folder))
            env["OPSLOOP_TOOLS"] = str(write_tools_file(self.folder, port=service_port))
            allow = self.environ.get("OPSLOOP_HTTP_ALLOW")
            env["OPSLOOP_HTTP_ALLOW"] = f"{allow},127.0.0.1" if allow else "127.0.0.1"

        # The team's runbooks: yours (OPSLOOP_RUNBOOKS), else the demo's folder, published
        # (as the demo's alerts' runbook_url says) at the demo's address.
        from bot.dev.demo_runbook import runbooks_env

        env.update(runbooks_env(self.environ))

        label = "your model"
        if not model_configured(self.environ):
            from bot.dev.demo_model import demo_policy
            from bot.emulator.model_server import ScriptedServer

            model = ScriptedServer(demo_policy())
            await model.start()
            self._stops.append(model.stop)
            env.update(LLM_BASE_URL=model.base_url, LLM_MODEL="demo", LLM_API_KEY="demo")
            label = "demo model"

        port = self.page_port
        if not port_free(port):
            taken, port = port, free_port()
            self.say(f"port {taken} is taken; the page uses {port} instead")
        secret = secrets.token_hex(16)
        emulator = Emulator(
            signing_secret=secret,
            users=DEV_USERS,
            model_label=label,
            port=port,
        )
        await emulator.start()
        self._stops.append(emulator.stop)
        self.page_url = emulator.page_url

        bot_port = free_port()
        env.update(
            SLACK_BOT_TOKEN="xoxb-opsloop-dev",
            SLACK_SIGNING_SECRET=secret,
            SLACK_API_URL=emulator.api_url,
            HOST="127.0.0.1",
            PORT=str(bot_port),
        )
        env.setdefault("OPSLOOP_APPROVERS", self.environ.get("OPSLOOP_APPROVERS") or APPROVERS)
        # Cards of assistant-pane jobs go where the approvers are: the incident channel.
        env["OPSLOOP_APPROVAL_CHANNEL"] = (
            self.environ.get("OPSLOOP_APPROVAL_CHANNEL") or emulator.channel_id
        )
        # Ctrl-C gives the bot STOP_TIMEOUT_S: a change in flight may finish, within that.
        env["OPSLOOP_DRAIN_S"] = self.environ.get("OPSLOOP_DRAIN_S") or DEV_DRAIN_S
        # Alerts in, posted in the page's channel; the token is this run's, known only to
        # this process (the page asks it to fire: the browser never holds the token).
        alerts_token = secrets.token_urlsafe(24)
        env.update(OPSLOOP_ALERTS_TOKEN=alerts_token, OPSLOOP_ALERTS_CHANNEL=emulator.channel_id)
        child_env = {**self.environ, **env}
        child_env.pop("SLACK_APP_TOKEN", None)
        log = await asyncio.to_thread(open, self.folder / "bot.log", "ab")  # closed by its stop
        self.bot = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "serve",
            env=child_env,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        bot = self.bot
        self._stops.append(log.close)
        self._stops.append(lambda: _terminate(bot))
        await _wait_healthy(f"http://127.0.0.1:{bot_port}/healthz", bot, self.folder / "bot.log")
        emulator.bot_url = f"http://127.0.0.1:{bot_port}/slack/events"

        sender = AlertSender(f"http://127.0.0.1:{bot_port}{ALERTS_PATH}", alerts_token)
        alerts = DemoAlerts(sender, service_port)
        self._stops.append(alerts.close)
        emulator.alerts = alerts
        if service_port is not None and demo_alert_on(self.environ):
            watch = asyncio.create_task(alerts.watch())
            self._stops.append(lambda: _cancel(watch))

    async def stop(self) -> None:
        while self._stops:
            stop = self._stops.pop()
            try:
                result = stop()
                if asyncio.iscoroutine(result):
                    await result
            except Exception as exc:  # keep stopping the rest
                self.say(f"while stopping: {type(exc).__name__}: {exc}")


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _terminate(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the process group, then SIGKILL it if it does not exit in time."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


async def _wait_healthy(url: str, proc: asyncio.subprocess.Process, log: Path) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BOT_START_TIMEOUT_S
    async with httpx.AsyncClient(trust_env=False, timeout=2) as http:
        while loop.time() < deadline:
            if proc.returncode is not None:
                tail = (await asyncio.to_thread(log.read_text, errors="replace"))[-1500:]
                raise ConfigError(f"the bot exited at start (code {proc.returncode}):\n{tail}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(url)).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise ConfigError(f"the bot did not become healthy within {BOT_START_TIMEOUT_S:g}s")


async def run_dev(folder: Path, page_port: int, degrade_after_s: float = 20.0) -> int:
    """Start everything, print the page's address, wait for Ctrl-C or the bot's exit."""
    stack = DevStack(folder=folder, page_port=page_port, degrade_after_s=degrade_after_s)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    code = 0
    try:
        await stack.start()
        print(f"opsloop dev: open {stack.page_url}  (Ctrl-C stops everything)", flush=True)
        if not stack.environ.get("OPSLOOP_TOOLS"):
            print(
                f'opsloop dev: the demo service "web" degrades after {degrade_after_s:g}s;'
                ' mention @opsloop on the page (e.g. "@opsloop web is slow, look into it")',
                flush=True,
            )
        if demo_alert_on(stack.environ):
            print(
                "opsloop dev: its alert (WebErrorRateHigh) then fires by itself and is "
                'investigated in its thread; "Fire an alert" on the page fires another',
                flush=True,
            )
        redis_url = stack.managed_redis_url or "<your REDIS_URL>"
        print(
            f"opsloop dev: what a job did, afterwards: REDIS_URL={redis_url} "
            "opsloop trace <the job id on its finished status message>",
            flush=True,
        )
        assert stack.bot is not None
        bot_exit = asyncio.create_task(stack.bot.wait())
        stop_wait = asyncio.create_task(stopping.wait())
        await asyncio.wait({bot_exit, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        if bot_exit.done():
            print(
                f"opsloop dev: the bot exited (code {stack.bot.returncode}); "
                f"see {folder / 'bot.log'}. Stopping.",
                file=sys.stderr,
            )
            code = 1
        stop_wait.cancel()
    except ConfigError as exc:
        print(f"opsloop dev: {exc}", file=sys.stderr)
        code = 2
    finally:
        await stack.stop()
    return code
