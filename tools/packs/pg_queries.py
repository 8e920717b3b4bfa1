"""Every statement the ``postgres`` pack sends, as fixed text with ``$n`` parameters.

Nothing here is built from a tool's arguments or from what the server answered: a pid is
a parameter, query text read from ``pg_stat_activity`` or ``pg_stat_statements`` is data
that is shown, never executed. Each statement starts with the comment :data:`MARK`, so
``pg_top_queries`` can leave the bot's own monitoring statements out (only those run by
the bot's own role: a marked statement from anyone else is still shown).

Notes on cost, since these run on a server that may be in trouble:

* Arrays come back as text (``array_to_string``): asyncpg would otherwise introspect the
  array type with a 7 kB catalog query on every fresh connection.

* ``pg_blocking_pids()`` takes the lock manager's partition locks for a moment: it is
  called only for sessions that wait on a heavyweight lock (``wait_event_type = 'Lock'``).
* ``pg_total_relation_size()`` takes an ACCESS SHARE lock on each table it measures, so
  the largest tables are chosen first from the catalog's page counts (no lock), and only
  those are measured; a table locked by a migration trips ``lock_timeout`` and
  :data:`LARGEST_TABLES_ESTIMATED` (catalog only) answers instead.
"""

from __future__ import annotations

MARK = "/* opsloop */"

# -- pg_activity --------------------------------------------------------------------------

_SESSION_COLUMNS = """
  a.pid, a.usename, a.datname, a.application_name,
  host(a.client_addr) AS client_addr, a.client_port, a.backend_type, a.state,
  a.wait_event_type, a.wait_event,
  extract(epoch FROM now() - a.xact_start)::float8 AS xact_s,
  extract(epoch FROM now() - a.query_start)::float8 AS query_s,
  extract(epoch FROM now() - a.state_change)::float8 AS state_s,
  left(a.query, $1) AS query, length(a.query) AS query_chars"""

# Without pg_read_all_stats (pg_monitor), other roles' sessions show only pid, role and
# database: no backend_type, no state. They count as connections, and as hidden.
ACTIVITY_COUNTS = f"""{MARK}
WITH s AS (
  SELECT *, backend_type IS NULL AND usename IS NOT NULL AS hidden_row
  FROM pg_stat_activity
  WHERE pid <> pg_backend_pid()
)
SELECT
  count(*) FILTER (WHERE backend_type = 'client backend' OR hidden_row) AS connections,
  count(*) FILTER (WHERE backend_type = 'client backend' AND state = 'active') AS active,
  count(*) FILTER (WHERE wait_event_type = 'Lock') AS lock_waits,
  count(*) FILTER (WHERE state LIKE 'idle in transaction%') AS idle_in_xact,
  count(*) FILTER (WHERE backend_type = 'client backend' AND state = 'idle') AS idle,
  count(*) FILTER (WHERE hidden_row) AS hidden,
  current_setting('max_connections')::int AS max_connections
FROM s"""

# Sessions doing something (or holding a transaction open), longest first; $2 caps rows.
ACTIVITY = f"""{MARK}
SELECT {_SESSION_COLUMNS},
  CASE WHEN a.wait_event_type = 'Lock'
       THEN array_to_string(pg_blocking_pids(a.pid), ',') END AS blocked_by,
  count(*) OVER () AS total
FROM pg_stat_activity a
WHERE a.pid <> pg_backend_pid()
  AND a.backend_type IN ('client backend', 'autovacuum worker')
  AND a.state IS DISTINCT FROM 'idle'
  AND (a.state IS NOT NULL OR a.backend_type = 'autovacuum worker')
ORDER BY coalesce(a.xact_start, a.query_start, a.backend_start) ASC NULLS LAST, a.pid
LIMIT $2"""

# -- pg_locks -----------------------------------------------------------------------------

# Waiting sessions and everyone they wait for; $2 caps rows.
BLOCKING = f"""{MARK}
WITH waiting AS (
  SELECT pid, pg_blocking_pids(pid) AS blockers
  FROM pg_stat_activity
  WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()
), involved AS (
  SELECT pid FROM waiting
  UNION
  SELECT unnest(blockers) FROM waiting
)
SELECT {_SESSION_COLUMNS},
  array_to_string(w.blockers, ',') AS blocked_by,
  (SELECT extract(epoch FROM now() - min(l.waitstart))::float8
     FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted) AS wait_s,
  (SELECT l.mode || ' on ' || l.locktype || coalesce(' of ' || CASE
            WHEN l.database IN (0, (SELECT oid FROM pg_database
                                    WHERE datname = current_database()))
            THEN l.relation::regclass::text
            ELSE 'oid ' || l.relation || ' in db '
                 || (SELECT datname FROM pg_database WHERE oid = l.database) END, '')
     FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted LIMIT 1) AS waiting_for
FROM involved i
JOIN pg_stat_activity a ON a.pid = i.pid
LEFT JOIN waiting w ON w.pid = a.pid
ORDER BY a.pid
LIMIT $2"""

# -- pg_replication -----------------------------------------------------------------------

IN_RECOVERY = f"{MARK} SELECT pg_is_in_recovery() AS standby"

REPLICAS = f"""{MARK}
SELECT application_name, host(client_addr) AS client_addr, state, sync_state,
  pg_wal_lsn_diff(pg_current_wal_lsn(), sent_lsn)::float8 AS send_bytes,
  pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::float8 AS replay_bytes,
  extract(epoch FROM write_lag)::float8 AS write_lag_s,
  extract(epoch FROM flush_lag)::float8 AS flush_lag_s,
  extract(epoch FROM replay_lag)::float8 AS replay_lag_s,
  extract(epoch FROM now() - reply_time)::float8 AS reply_s
FROM pg_stat_replication
ORDER BY application_name, pid
LIMIT $1"""

SLOTS = f"""{MARK}
SELECT slot_name, slot_type, active, wal_status, database,
  pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::float8 AS retained_bytes
FROM pg_replication_slots
ORDER BY active, retained_bytes DESC NULLS LAST, slot_name
LIMIT $1"""

PRIMARY_SETTINGS = f"""{MARK}
SELECT current_setting('synchronous_standby_names') AS sync_names,
  current_setting('max_wal_senders')::int AS max_wal_senders,
  (SELECT count(*) FROM pg_replication_slots) AS slots"""

STANDBY = f"""{MARK}
SELECT
  pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::float8
    AS replay_behind_bytes,
  extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 AS last_replay_s,
  pg_get_wal_replay_pause_state() AS pause_state,
  r.status AS receiver_status, r.sender_host, r.sender_port, r.slot_name,
  extract(epoch FROM now() - r.last_msg_receipt_time)::float8 AS last_msg_s
FROM (SELECT 1) AS one
LEFT JOIN pg_stat_wal_receiver r ON true"""

# -- pg_database_stats --------------------------------------------------------------------

DATABASE = f"""{MARK}
SELECT d.datname AS database,
  (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')
    AS connections,
  current_setting('max_connections')::int AS max_connections,
  current_setting('superuser_reserved_connections')::int AS reserved,
  d.numbackends, d.xact_commit, d.xact_rollback, d.blks_read, d.blks_hit, d.deadlocks,
  d.temp_files, d.temp_bytes::float8 AS temp_bytes, d.conflicts,
  extract(epoch FROM now() - d.stats_reset)::float8 AS since_reset_s,
  extract(epoch FROM now() - pg_postmaster_start_time())::float8 AS uptime_s,
  pg_database_size(d.datid)::float8 AS size_bytes,
  age(db.datfrozenxid)::bigint AS xid_age,
  current_setting('autovacuum_freeze_max_age')::bigint AS freeze_max_age
FROM pg_stat_database d
JOIN pg_database db ON db.oid = d.datid
WHERE d.datname = current_database()"""

CONNECTIONS_BY_DATABASE = f"""{MARK}
SELECT coalesce(datname, '(none)') AS database, count(*) AS connections
FROM pg_stat_activity
WHERE backend_type = 'client backend'
GROUP BY 1
ORDER BY 2 DESC, 1
LIMIT $1"""

_CANDIDATES = """
WITH candidates AS (
  SELECT c.oid,
    (c.relpages::bigint + coalesce(t.relpages, 0)
     + coalesce((SELECT sum(i.relpages) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
                 WHERE x.indrelid = c.oid), 0)) AS pages
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_class t ON t.oid = c.reltoastrelid
  WHERE c.relkind IN ('r', 'm')
    AND n.nspname NOT IN ('pg_catalog', 'information_schema')
    AND n.nspname !~ '^pg_toast'
  ORDER BY pages DESC, c.oid
  LIMIT $1
)"""

_TABLE_STATS = """
  s.n_live_tup AS live_rows, s.n_dead_tup AS dead_rows,
  extract(epoch FROM now() - greatest(s.last_vacuum, s.last_autovacuum))::float8 AS vacuum_s"""

# Measured exactly: takes ACCESS SHARE on each candidate (see the module docstring).
LARGEST_TABLES = f"""{MARK}{_CANDIDATES}
SELECT c.oid::regclass::text AS name,
  pg_total_relation_size(c.oid)::float8 AS total_bytes,
  pg_relation_size(c.oid)::float8 AS table_bytes, {_TABLE_STATS}
FROM candidates c
LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
ORDER BY total_bytes DESC, name
LIMIT $2"""

# From the catalog alone (as of the last VACUUM/ANALYZE): no lock on any table.
LARGEST_TABLES_ESTIMATED = f"""{MARK}{_CANDIDATES}
SELECT c.oid::regclass::text AS name,
  (c.pages * current_setting('block_size')::int)::float8 AS total_bytes,
  (r.relpages::bigint * current_setting('block_size')::int)::float8 AS table_bytes,
  {_TABLE_STATS}
FROM candidates c
JOIN pg_class r ON r.oid = c.oid
LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
ORDER BY total_bytes DESC, name
LIMIT $2"""

# -- pg_top_queries -----------------------------------------------------------------------

EXTENSION = f"""{MARK}
SELECT (SELECT extversion FROM pg_extension WHERE extname = 'pg_stat_statements') AS version,
  current_setting('shared_preload_libraries') AS preload,
  current_database() AS database"""

_STATEMENTS = """{mark}
SELECT s.queryid, r.rolname, d.datname, s.calls::bigint AS calls,
  s.{total}::float8 AS total_ms, s.{mean}::float8 AS mean_ms, s.{max}::float8 AS max_ms,
  s.rows::bigint AS rows, s.shared_blks_hit::float8 AS hit, s.shared_blks_read::float8 AS read,
  (s.temp_blks_written * current_setting('block_size')::int)::float8 AS temp_bytes,
  left(s.query, $1) AS query, length(s.query) AS query_chars,
  sum(s.{total}) OVER ()::float8 AS all_ms, count(*) OVER () AS statements
FROM pg_stat_statements s
LEFT JOIN pg_roles r ON r.oid = s.userid
LEFT JOIN pg_database d ON d.oid = s.dbid
WHERE NOT (r.rolname = current_user AND s.query LIKE '/* opsloop */%')
ORDER BY s.{total} DESC, s.queryid
LIMIT $2"""

# pg_stat_statements 1.8 (PostgreSQL 13) renamed total_time to total_exec_time.
STATEMENTS = _STATEMENTS.format(
    mark=MARK, total="total_exec_time", mean="mean_exec_time", max="max_exec_time"
)
STATEMENTS_BEFORE_1_8 = _STATEMENTS.format(
    mark=MARK, total="total_time", mean="mean_time", max="max_time"
)

# pg_stat_statements 1.9 (PostgreSQL 14).
STATEMENTS_INFO = f"""{MARK}
SELECT dealloc, extract(epoch FROM now() - stats_reset)::float8 AS since_reset_s
FROM pg_stat_statements_info"""

# -- pg_cancel_backend / pg_terminate_backend ---------------------------------------------

# One session by pid ($2; $1: query chars), with what decides whether we may signal it.
TARGET = f"""{MARK}
SELECT {_SESSION_COLUMNS},
  extract(epoch FROM a.backend_start)::float8 AS backend_start,
  a.pid = pg_backend_pid() AS is_self,
  coalesce(r.rolsuper, a.usesysid IS NULL) AS target_superuser,
  (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS superuser,
  CASE WHEN a.usesysid IS NULL THEN false
       ELSE pg_has_role(current_user, a.usesysid, 'USAGE') END AS same_role,
  pg_has_role(current_user, 'pg_signal_backend', 'USAGE') AS signal_backend,
  current_user AS me
FROM (SELECT $2::int AS pid) AS wanted
JOIN pg_stat_activity a ON a.pid = wanted.pid
LEFT JOIN pg_roles r ON r.oid = a.usesysid"""

CANCEL = f"{MARK} SELECT pg_cancel_backend($1) AS signalled"

# $2: milliseconds to wait for the backend to exit (PostgreSQL 14+).
TERMINATE = f"{MARK} SELECT pg_terminate_backend($1, $2) AS signalled"

# -- the probe -----------------------------------------------------------------------------

PROBE = f"""{MARK}
SELECT current_setting('server_version') AS version, pg_is_in_recovery() AS standby,
  (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')
    AS connections,
  current_setting('max_connections')::int AS max_connections,
  (SELECT extversion FROM pg_extension WHERE extname = 'pg_stat_statements') AS statements,
  pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS read_all_stats,
  pg_has_role(current_user, 'pg_signal_backend', 'USAGE') AS signal_backend,
  current_user AS me"""
