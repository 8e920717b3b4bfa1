"""Command tools that record every run: a tools.yml, and what its runs left behind.

``tools_yml`` writes a tools.yml of real command tools — ``check_host`` (read-only),
``restart_service`` (mutating, gets ``{confirmed_by}``) and ``delete_pod`` (destructive) —
each running one small recorder script that appends a line per run (its start and its end:
the tool, its arguments, ``OPSLOOP_CONFIRMED_BY``, ``OPSLOOP_DRY_RUN``, the idempotency
key) to a log file. ``runs`` reads that log back, ``tool_processes`` finds the recorder
processes still alive (``/proc``). With them a caller checks from the tools' side that an
approved change ran exactly once, as its approver, and left no process behind.

Used by the chaos soak (``bot.emulator.soak``), in its test and its benchmark.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RECORDER = """\
import json, os, sys, time
log, tool = sys.argv[1], sys.argv[2]
args = sys.argv[3:]
delay = float(os.environ.get("OPSLOOP_TEST_DELAY", "0"))
entry = {"tool": tool, "args": args, "env_confirmed_by": os.environ.get("OPSLOOP_CONFIRMED_BY"),
         "dry_run": os.environ.get("OPSLOOP_DRY_RUN") == "1",
         "key": os.environ.get("OPSLOOP_IDEMPOTENCY_KEY")}
with open(log, "a") as f:
    f.write(json.dumps({**entry, "phase": "start"}) + "\\n")
time.sleep(delay)
with open(log, "a") as f:
    f.write(json.dumps({**entry, "phase": "done"}) + "\\n")
print(("would restart " if entry["dry_run"] else "restarted ") + " ".join(args))
"""


def tools_yml(tmp_path: Path, *, delay: float = 0.0, slow_read: float = 0.0) -> tuple[str, Path]:
    """A tools.yml (path) with ``check_host`` (read-only), ``restart_service`` (mutating,
    gets ``{confirmed_by}``) and ``delete_pod`` (destructive); and the run log."""
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER)
    log = tmp_path / "runs.jsonl"
    py = sys.executable
    text = f"""\
tools:
  - name: check_host
    description: Check a host.
    params:
      host: {{type: string, pattern: "^[a-z0-9-]+$", description: Host name}}
    env: {{OPSLOOP_TEST_DELAY: "{slow_read}"}}
    timeout: 60
    run: ["{py}", "{script}", "{log}", "check_host", "{{host}}"]
  - name: restart_service
    description: Restart a service.
    category: mutating
    params:
      service: {{type: string, pattern: "^[a-z0-9-]+$", description: Service name}}
    env: {{OPSLOOP_TEST_DELAY: "{delay}"}}
    timeout: 60
    run: ["{py}", "{script}", "{log}", "restart_service", "{{service}}", "{{confirmed_by}}"]
  - name: delete_pod
    description: Delete a pod.
    category: destructive
    params:
      pod: {{type: string, pattern: "^[a-z0-9-]+$", description: Pod name}}
    run: ["{py}", "{script}", "{log}", "delete_pod", "{{pod}}"]
"""
    path = tmp_path / "tools.yml"
    path.write_text(text)
    return str(path), log


def runs(log: Path, *, tool: str | None = None, phase: str = "done") -> list[dict[str, Any]]:
    """Real (not dry-run) runs recorded by the tools."""
    if not log.exists():
        return []
    found = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [
        r
        for r in found
        if r["phase"] == phase and not r["dry_run"] and (tool is None or r["tool"] == tool)
    ]


def tool_processes(log: Path) -> dict[int, int]:
    """Live recorder processes writing to ``log``: pid → parent pid (the bot that
    spawned it, while that bot lives). Linux ``/proc``."""
    found: dict[int, int] = {}
    needle = str(log).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "cmdline").read_bytes():
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":  # a zombie has ended
            found[int(entry.name)] = int(fields[1])
    return found
