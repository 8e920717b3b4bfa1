"""``opsloop audit``: the workspace's audit log, read back from Redis.

``opsloop audit [--since T] [--until T] [--user U] [--tool NAME] [--channel C] [--job ID]``
prints the entries, oldest first, as a table (UTC time, kind, actor, tool, job, outcome,
a short detail); ``--json`` prints the stored entries exactly, one JSON object a line, for
a SIEM. ``opsloop audit verify`` checks the hash chain: "ok: N entries, chain from …"
(exit 0) or the first broken link (exit 1). ``T`` is ISO 8601 (``2026-05-28``,
``2026-05-28T20:26:40Z``, ``…+02:00``; without an offset, UTC) or an age (``90m``,
``24h``, ``7d``: that long ago).

Only reads: it needs ``REDIS_URL`` (and ``OPSLOOP_REDIS_PREFIX`` when the bot uses one).
Exit 2 for input it cannot read, 1 when Redis fails or the chain is broken.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from bot.agent.redact import redact_secrets
from bot.cli.parts import command_stores
from bot.errors import ConfigError, StoreError
from bot.store.audit import AuditEntry, AuditQuery, Stored
from bot.store.audit_entry import short_detail
from bot.store.connection import RedisTarget
from bot.store.keys import Keys

DETAIL_CHARS = 60
TIME_FORMS = (
    "give ISO 8601 (2026-05-28, 2026-05-28T20:26:40Z, 2026-05-28T22:26:40+02:00) "
    "or an age such as 90m, 24h, 7d"
)
_AGE = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
# (header, width): the last column takes what is left
COLUMNS = (("time (UTC)", 19), ("kind", 18), ("actor", 14), ("tool", 24), ("job", 30))
COLUMNS_END = (("outcome", 10), ("detail", DETAIL_CHARS))


@dataclass(frozen=True, slots=True, kw_only=True)
class Query:
    """The filters as read from the command line (times as epoch seconds)."""

    since: float | None = None
    until: float | None = None
    user: str | None = None
    tool: str | None = None
    channel: str | None = None
    job: str | None = None

    def filters(self) -> AuditQuery:
        """The filters as ``AuditLog.matching`` takes them (the same names)."""
        return cast(AuditQuery, dataclasses.asdict(self))


def parse_time(text: str, *, now: float) -> float:
    """Epoch seconds of ``text`` (ISO 8601 or an age ago); ``ValueError`` saying why."""
    text = text.strip()
    if found := _AGE.match(text):
        return now - float(found["n"]) * _UNIT_S[found["unit"]]
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"cannot read {text[:80]!r}: {TIME_FORMS}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def parse_query(*, now: float, **flags: str | None) -> Query:
    """The filters as given on the command line (``since``, ``until``: a time; ``user``,
    ``tool``, ``channel``, ``job``: a name; ``None``: not given); ``ValueError`` naming
    the bad flag."""
    times: dict[str, float | None] = {}
    for flag in ("since", "until"):
        text = flags.pop(flag, None)
        try:
            times[flag] = None if text is None else parse_time(text, now=now)
        except ValueError as exc:
            raise ValueError(f"--{flag}: {exc}") from None
    start, end = times["since"], times["until"]
    if start is not None and end is not None and start > end:
        raise ValueError("--since is later than --until")
    for flag, value in flags.items():
        if value is not None and not value.strip():
            raise ValueError(f"--{flag}: empty")
    return Query(since=start, until=end, **flags)


# -- rendering ------------------------------------------------------------------------


def _cell(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _time(at: float) -> str:
    return f"{datetime.datetime.fromtimestamp(at, datetime.UTC):%Y-%m-%d %H:%M:%S}"


def detail_of(entry: AuditEntry) -> str:
    """The short detail column: what of the kind-specific detail says most."""
    shown = short_detail(entry, DETAIL_CHARS)
    if not shown and entry.args_hash:
        shown = f"args {entry.args_hash[:12]}"
    return redact_secrets(shown)


def header() -> str:
    heads = [_cell(h, w).ljust(w) for h, w in (*COLUMNS, *COLUMNS_END)]
    return "  ".join(heads).rstrip()


def row(entry: AuditEntry) -> str:
    cells = [
        _time(entry.at),
        entry.kind,
        entry.actor,
        entry.tool or "",
        entry.job_id or "",
        entry.outcome or "",
        detail_of(entry),
    ]
    widths = [w for _, w in (*COLUMNS, *COLUMNS_END)]
    return "  ".join(_cell(c, w).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


# -- the command ----------------------------------------------------------------------


async def _query(
    url: str | RedisTarget, keys: Keys, query: Query, emit: Callable[[Stored], None]
) -> int:
    async with command_stores(url, keys) as stores:
        count = 0
        async for stored in stores.audit_log.matching(**query.filters()):
            emit(stored)
            count += 1
        return count


async def _verify(url: str | RedisTarget, keys: Keys) -> tuple[bool, str]:
    async with command_stores(url, keys) as stores:
        report = await stores.audit_log.verify()
        return report.ok, report.describe()


def _usage_error(message: str) -> int:
    print(f"opsloop audit: {message}", file=sys.stderr)
    return 2


def main(action: str | None = None, *, as_json: bool = False, **filters: str | None) -> int:
    """Print the entries (0), or verify the chain (0 ok, 1 broken); 1 when Redis fails,
    2 when the input or a variable cannot be read. ``filters``: the flags of
    ``parse_query``, as given."""
    from bot.settings import load_bot_settings

    if action == "verify" and (as_json or any(v is not None for v in filters.values())):
        return _usage_error("verify checks the whole log: it takes no filters and no --json")
    try:
        query = parse_query(**filters, now=time.time())
    except ValueError as exc:
        return _usage_error(str(exc))
    try:
        settings = load_bot_settings()
        settings.require("REDIS_URL")
    except ConfigError as exc:
        return _usage_error(str(exc))
    assert settings.redis_url is not None
    keys = Keys(settings.redis_prefix)
    try:
        if action == "verify":
            ok, line = asyncio.run(_verify(RedisTarget.of(settings), keys))
            print(line)
            return 0 if ok else 1
        if not as_json:
            print(header())

        def emit(stored: Stored) -> None:
            print(stored.raw if as_json else row(stored.entry), flush=as_json)

        count = asyncio.run(_query(RedisTarget.of(settings), keys, query, emit))
    except StoreError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"opsloop audit: {first}", file=sys.stderr)
        return 1
    if not count:
        print(
            f"opsloop audit: no entries match under the prefix {keys.prefix!r} "
            "(is OPSLOOP_REDIS_PREFIX the bot's?)",
            file=sys.stderr,
        )
    return 0
