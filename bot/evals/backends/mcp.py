"""The ``mcp`` eval backend: a real third-party MCP server,
``@modelcontextprotocol/server-filesystem`` (installed by ``scripts/mcp-test-servers``
into ``.opsloop/npm``, or found on ``PATH``), confined to a notes folder of the backend's.

It enables no pack: its tools.yml fragment names one stdio server ``notes`` (the bot
starts and stops it with the case's catalogue), so its tools are offered as
``notes_<tool>`` (``notes_list_directory``, ``notes_read_text_file``,
``notes_search_files`` … read-only, since the server's annotations are trusted;
``notes_write_file``, ``notes_edit_file``, ``notes_move_file`` destructive) and are a
case's only evidence.

Fault ``deploy_notes``: the folder gets a deploy log in which a config change at 14:02
set checkout's ``db.pool_size`` from 20 to 2, checkout's error log full of ``timeout
acquiring connection from pool`` from 14:03 on, and an unrelated note (a CDN certificate
renewed at 13:00). Facts: ``notes_dir``, ``deploy_log``, ``error_log``, ``change_time``.
Healing, and ``reset``, empty the folder (whatever an approved write left there).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from bot.evals.backends.base import BackendError, Facts, Reach

SERVER = "mcp-server-filesystem"
REPO_NPM_BIN = Path(__file__).resolve().parents[3] / ".opsloop" / "npm" / "node_modules" / ".bin"
SERVER_NAME = "notes"  # the tools are offered as notes_<tool>

DEPLOY_LOG = "deploys.log"
ERROR_LOG = "checkout-errors.log"
CDN_NOTE = "cdn-notes.md"
CHANGE_TIME = "14:02"

DEPLOYS = """\
2026-03-12 09:15:02 deploy search v5.3.1 by ci: rollout complete (4/4 pods)
2026-03-12 11:48:40 deploy web v3.20.0 by ci: rollout complete (6/6 pods)
2026-03-12 13:40:11 deploy checkout v2.14.0 by ci: rollout complete (6/6 pods)
2026-03-12 14:02:37 config change checkout (production): db.pool_size 20 -> 2, \
db.pool_timeout_ms 5000 (PR #1189 "tune the pool for staging" by jmiller, applied to production)
2026-03-12 14:03:05 config change checkout: rollout complete (6/6 pods restarted)
2026-03-12 15:30:00 deploy freeze starts (quarter-end)
"""


def _errors() -> str:
    lines = [
        "2026-03-12 13:58:10 INFO  checkout.http: GET /checkout 200 in 84ms",
        "2026-03-12 14:01:55 INFO  checkout.http: POST /checkout/pay 200 in 131ms",
        "2026-03-12 14:03:06 INFO  checkout.app: started, db pool_size=2",
    ]
    for minute in range(3, 12):
        for second in (12, 31, 47):
            lines.append(
                f"2026-03-12 14:{minute:02d}:{second:02d} ERROR checkout.db: timeout acquiring "
                "connection from pool after 5000ms (pool_size=2, in use=2, waiting=37)"
            )
        lines.append(
            f"2026-03-12 14:{minute:02d}:50 WARN  checkout.http: POST /checkout/pay 504 in 5012ms"
        )
    return "\n".join(lines) + "\n"


CDN = """\
# CDN notes

- 2026-03-12 13:00: the CDN's TLS certificate for shop.example was renewed (automatic).
  No impact seen; cache hit ratio unchanged at 94 %.
"""


def server_binary() -> str:
    """The server's executable: the repository's ``.opsloop/npm`` install, else ``PATH``;
    ``BackendError`` naming what is missing."""
    found = REPO_NPM_BIN / SERVER
    path = str(found) if os.access(found, os.X_OK) else shutil.which(SERVER)
    if path is None:
        raise BackendError(
            f"{SERVER} is not installed: scripts/mcp-test-servers installs it into "
            ".opsloop/npm (needs node and npm)"
        )
    if shutil.which("node") is None:
        raise BackendError(f"{SERVER} needs node, which is not on PATH")
    return path


class McpBackend:
    """See the module docstring."""

    kind: ClassVar[str] = "mcp"
    faults: ClassVar[tuple[str, ...]] = ("deploy_notes",)

    def __init__(self) -> None:
        self.notes = Path()

    async def start(self, folder: Path) -> Reach:
        command = [server_binary()]
        self.notes = (folder / "notes").resolve()
        self.notes.mkdir(parents=True, exist_ok=True)
        self._empty()
        server = {"name": SERVER_NAME, "command": [*command, str(self.notes)]}
        return Reach(tools_yml={"mcp_servers": [{**server, "trust_annotations": True}]})

    def fault(
        self, name: str, params: Mapping[str, Any]
    ) -> contextlib.AbstractAsyncContextManager[Facts]:
        if name != "deploy_notes":
            raise BackendError(f"mcp backend has no fault {name!r} (known: deploy_notes)")
        return self._deploy_notes()

    @contextlib.asynccontextmanager
    async def _deploy_notes(self) -> AsyncIterator[Facts]:
        try:
            (self.notes / DEPLOY_LOG).write_text(DEPLOYS)
            (self.notes / ERROR_LOG).write_text(_errors())
            (self.notes / CDN_NOTE).write_text(CDN)
            yield {
                "notes_dir": str(self.notes),
                "deploy_log": DEPLOY_LOG,
                "error_log": ERROR_LOG,
                "change_time": CHANGE_TIME,
            }
        finally:
            self._empty()

    async def reset(self) -> None:
        self._empty()

    async def stop(self) -> None:
        if self.notes != Path():
            shutil.rmtree(self.notes, ignore_errors=True)

    def _empty(self) -> None:
        for entry in self.notes.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
