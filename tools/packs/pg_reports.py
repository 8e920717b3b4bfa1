"""The ``postgres`` pack's other answers: replication, database statistics, top queries
and the session a cancel or terminate aims at; no I/O.

Like ``tools.packs.pg_summaries`` (sessions and blocking chains, and the small formatters
used here): the point first, then bounded lines. Rows come in as mappings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tools.packs.pg_summaries import (
    MAX_REPLICAS,
    MAX_SLOTS,
    MAX_STATEMENTS,
    MAX_TABLES,
    Sess,
    bounded,
    count,
    counted,
    duration,
    listing,
    plural,
    query_text,
    size,
)

Row = Mapping[str, Any]
LAG_WARN_BYTES = 16 << 20  # a replica this far behind is worth saying so first
SLOT_WARN_BYTES = 1 << 30
XID_WARN_FRACTION = 0.5  # of autovacuum_freeze_max_age


# -- pg_replication ------------------------------------------------------------------------


def primary(replicas: Sequence[Row], slots: Sequence[Row], settings: Row) -> str:
    """The primary's side: each replica's state and lag, then its replication slots."""
    lagging = [r for r in replicas if (r["replay_bytes"] or 0) >= LAG_WARN_BYTES]
    streaming = [r for r in replicas if r["state"] == "streaming"]
    if not replicas:
        head = "primary, no replica connected"
    else:
        head = f"primary with {plural(len(replicas), 'replica')} ({len(streaming)} streaming)"
        if lagging:
            worst = max(lagging, key=lambda r: r["replay_bytes"] or 0)
            head += (
                f"; {worst['application_name'] or '?'} is {size(worst['replay_bytes'])} behind "
                f"(replay lag {duration(worst['replay_lag_s'])})"
            )
        else:
            worst_s = max((r["replay_lag_s"] or 0.0 for r in replicas), default=0.0)
            head += f"; max replay lag {duration(worst_s)}"
    stale = [s for s in slots if not s["active"]]
    if stale:
        retained = sum(s["retained_bytes"] or 0 for s in stale)
        head += (
            f"; {plural(len(stale), 'inactive slot')} retaining {size(retained)} of WAL "
            "(WAL piles up until the slot is used or dropped)"
        )
    lines = [head]
    replica_lines = [_replica_line(r) for r in replicas]
    lines += listing("replicas:" if replicas else "", replica_lines, MAX_REPLICAS, indent="  ")
    if settings["sync_names"]:
        lines.append(f"synchronous_standby_names = {settings['sync_names']!r}")
    slot_lines = [_slot_line(s) for s in slots]
    if slots:
        lines += listing(f"slots ({settings['slots']}):", slot_lines, MAX_SLOTS, indent="  ")
    return bounded(lines)


def _replica_line(r: Row) -> str:
    measured = [r[k] for k in ("write_lag_s", "flush_lag_s", "replay_lag_s")]
    if all(v is None for v in measured) and not r["replay_bytes"]:
        # PostgreSQL shows NULL lags once a standby has caught up and no WAL flows
        lags = "none (caught up, idle)"
    else:
        lags = "/".join(duration(v) for v in measured)
    return (
        f"{r['application_name'] or '?'} from {r['client_addr'] or 'local socket'}: "
        f"{r['state']}, {r['sync_state']}, {size(r['send_bytes'])} unsent, "
        f"{size(r['replay_bytes'])} not replayed, lag write/flush/replay {lags}, "
        f"last reply {duration(r['reply_s'])} ago"
    )


def _slot_line(s: Row) -> str:
    state = "active" if s["active"] else "INACTIVE"
    where = f" on db {s['database']}" if s["database"] else ""
    return (
        f"{s['slot_name']} ({s['slot_type']}{where}): {state}, retains "
        f"{size(s['retained_bytes'])}, wal_status {s['wal_status'] or '?'}"
    )


def standby(row: Row) -> str:
    """The standby's own view: its WAL receiver and how far replay is behind."""
    status = row["receiver_status"]
    behind = row["replay_behind_bytes"]
    paused = row["pause_state"] not in (None, "not paused")
    if status is None:
        head = "standby, NO WAL receiver running (not streaming: restoring from archive, or "
        head += "the connection to the primary is failing; see the standby's log)"
    else:
        sender = f"{row['sender_host'] or '?'}:{row['sender_port'] or '?'}"
        head = f"standby, WAL receiver {status} from {sender}"
    head += f"; replay {size(behind)} behind what it received"
    if paused:
        head += f"; replay is PAUSED ({row['pause_state']}: pg_wal_replay_resume() resumes it)"
    lines = [head]
    last = row["last_replay_s"]
    if last is None:
        lines.append("no transaction replayed since the standby started")
    else:
        text = f"last replayed transaction committed {duration(last)} ago on the primary"
        if (behind or 0) == 0:
            text += " (everything received is replayed: an idle primary sends no new ones)"
        lines.append(text)
    if row["last_msg_s"] is not None:
        slot = f", slot {row['slot_name']}" if row["slot_name"] else ""
        lines.append(f"last message from the primary {duration(row['last_msg_s'])} ago{slot}")
    return "\n".join(lines)


# -- pg_database_stats ---------------------------------------------------------------------


def database(
    row: Row, by_database: Sequence[Row], tables: Sequence[Row], *, estimated: bool
) -> str:
    """Connections vs max_connections, cache hits, deadlocks, temp files, largest tables."""
    hits, reads = int(row["blks_hit"] or 0), int(row["blks_read"] or 0)
    ratio = f"{100 * hits / (hits + reads):.1f}%" if hits + reads else "n/a"
    used, most = int(row["connections"]), int(row["max_connections"])
    free = most - int(row["reserved"]) - used
    head = (
        f"db {row['database']}: {used}/{most} connections"
        f"{' (NEARLY FULL)' if free <= most * 0.1 else ''}, cache hit {ratio}, "
        f"{plural(int(row['deadlocks']), 'deadlock')}, "
        f"{plural(int(row['temp_files']), 'temp file')} ({size(row['temp_bytes'])})"
    )
    if row["since_reset_s"] is not None:
        head += f" since the stats reset {duration(row['since_reset_s'])} ago"
    else:
        head += " since the stats were created (never reset)"
    lines = [head]
    commits, rollbacks = int(row["xact_commit"] or 0), int(row["xact_rollback"] or 0)
    lines.append(
        f"size {size(row['size_bytes'])}, {counted(commits, 'commit')}, "
        f"{counted(rollbacks, 'rollback')}, "
        f"{int(row['conflicts'] or 0)} recovery conflicts, up {duration(row['uptime_s'])}, "
        f"{row['reserved']} connections reserved for superusers"
    )
    xid_age, limit = int(row["xid_age"] or 0), int(row["freeze_max_age"] or 1)
    if xid_age >= limit * XID_WARN_FRACTION:
        lines.append(
            f"transaction ID age {count(xid_age)}, {100 * xid_age / limit:.0f}% of "
            "autovacuum_freeze_max_age: anti-wraparound vacuum is due or running"
        )
    if by_database:
        per = ", ".join(f"{r['database']} {r['connections']}" for r in by_database)
        lines.append(f"connections by database: {per}")
    if tables:
        how = " (catalog estimates: a table is locked, so sizes were not measured)"
        lines.append(f"largest tables{how if estimated else ''}:")
        lines += listing("", [_table_line(t) for t in tables], MAX_TABLES, indent="  ")
    else:
        lines.append("no user tables")
    return bounded(lines)


def _table_line(t: Row) -> str:
    live, dead = t["live_rows"], t["dead_rows"]
    text = f"{t['name']} {size(t['total_bytes'])} (table {size(t['table_bytes'])}"
    if live is not None:
        text += f", {counted(int(live), 'row')}"
        if dead:
            share = 100 * dead / max(live + dead, 1)
            text += f", {count(int(dead))} dead ({share:.0f}%)"
    vacuum = t["vacuum_s"]
    text += f", vacuumed {duration(vacuum)} ago)" if vacuum is not None else ", never vacuumed)"
    return text


# -- pg_top_queries ------------------------------------------------------------------------


def statements_missing(row: Row) -> str:
    """What to do when ``pg_stat_statements`` cannot answer, said as a result."""
    database_name = row["database"]
    preload = [x.strip() for x in (row["preload"] or "").split(",")]
    if "pg_stat_statements" not in preload:
        return (
            f"pg_stat_statements is not installed on this server, so there is no statement "
            f"history. To enable it: add pg_stat_statements to shared_preload_libraries in "
            f"postgresql.conf, restart PostgreSQL, then run CREATE EXTENSION "
            f"pg_stat_statements; in db {database_name} (as a superuser). Until then "
            "pg_activity shows what runs now."
        )
    return (
        f"pg_stat_statements is loaded but not created in db {database_name}: run CREATE "
        f"EXTENSION pg_stat_statements; there (as a superuser or the database owner); the "
        "history it collects so far is then visible."
    )


def statements(rows: Sequence[Row], info: Row | None, version: str) -> str:
    """The statements that took the most time, with their share of all of it."""
    if not rows:
        return f"pg_stat_statements {version} has recorded no statements yet"
    all_ms = float(rows[0]["all_ms"] or 0.0)
    total = int(rows[0]["statements"])
    shown = rows[:MAX_STATEMENTS]
    top3 = sum(float(r["total_ms"]) for r in shown[:3])
    head = f"top {len(shown)} of {plural(total, 'statement')} by total time"
    head += f" (pg_stat_statements {version}"
    if info is not None and info["since_reset_s"] is not None:
        head += f", since the reset {duration(info['since_reset_s'])} ago"
    head += ")"
    if all_ms > 0:
        head += f": the first {min(3, len(shown))} took {100 * top3 / all_ms:.0f}% of the time"
    lines = [head]
    for i, r in enumerate(shown, 1):
        lines.append(_statement_line(i, r, all_ms))
    if info is not None and int(info["dealloc"] or 0) > 0:
        lines.append(
            f"({info['dealloc']} entries were evicted: raise pg_stat_statements.max to keep more)"
        )
    return bounded(lines)


def _statement_line(i: int, r: Row, all_ms: float) -> str:
    share = f"{100 * float(r['total_ms']) / all_ms:.0f}% " if all_ms > 0 else ""
    hit, read = float(r["hit"] or 0), float(r["read"] or 0)
    cache = f", cache hit {100 * hit / (hit + read):.0f}%" if hit + read else ""
    temp = f", temp {size(r['temp_bytes'])}" if r["temp_bytes"] else ""
    calls, rows = int(r["calls"]), int(r["rows"])
    return (
        f"{i}. {share}{_ms(float(r['total_ms']))} total, "
        f"{plural(calls, 'call')}, mean {_ms(r['mean_ms'])}, max {_ms(r['max_ms'])}, "
        f"{counted(rows, 'row')}{cache}{temp} — {r['rolname'] or '?'}@"
        f"{r['datname'] or '?'}: {query_text(r['query'], r['query_chars'])}"
    )


def _ms(value: float | None) -> str:
    if value is None:
        return "?"
    if value < 1:
        return f"{value:.2f}ms"
    if value < 1000:
        return f"{value:.0f}ms"
    return duration(value / 1000)


# -- pg_cancel_backend / pg_terminate_backend ----------------------------------------------


def target(s: Sess, blocking: int) -> str:
    """The session a signal aims at: pid, user, db, application, client, state, how long,
    query, and how many sessions wait behind it."""
    text = f"pid {s.pid} {s.who}, {s.doing()}"
    if blocking:
        text += f", blocking {plural(blocking, 'session')}"
    return f"{text}: {query_text(s.query, s.query_chars)}"
