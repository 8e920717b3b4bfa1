"""A team's runbooks folder for the tests: 30 Markdown files, one of them broken.

Most have front matter (``title``, ``alerts``, ``services``, ``tags``), nested ``##``/
``###`` headings, numbered steps and shell blocks whose ``#`` comments are not headings.
``PHRASINGS`` pairs the ways people ask with the section that should come first.
"""

from __future__ import annotations

from pathlib import Path

BROKEN = "misc/broken-front-matter.md"
BROKEN_LINE = 4  # the line of the YAML problem, 1-based, counting the opening ---


def _fm(title: str, alerts: str = "", services: str = "", tags: str = "") -> str:
    lines = ["---", f"title: {title}"]
    for key, value in (("alerts", alerts), ("services", services), ("tags", tags)):
        if value:
            lines.append(f"{key}: [{value}]")
    return "\n".join(lines) + "\n---\n"


FILES: dict[str, str] = {
    "linux/high-cpu.md": _fm("High CPU on a host", "HostHighCpuLoad", "api, worker", "linux, cpu")
    + """# High CPU on a host

Fires when the 5-minute load average per core stays above 2 for 10 minutes.

## Find what is burning CPU

1. Run `top -o %CPU` and note the top three processes.
2. Check whether the load is user time or iowait:

```bash
# user time high: the application; iowait high: the disk
mpstat 5 3
```

3. If one process dominates, take a thread dump before touching it.

## Throttled containers

A container at its CPU limit is throttled: latency rises while the host looks idle.
Check `container_cpu_cfs_throttled_periods_total` and raise the limit if it climbs.

## Mitigate

- Scale the deployment out by two replicas.
- Move batch jobs off the host.
""",
    "linux/disk-full.md": _fm(
        "Disk full", "HostOutOfDiskSpace, HostOutOfInodes", "", "linux, disk, storage"
    )
    + """# Disk full

The filesystem has less than 10% space left, or inodes are running out.

## Free space on /var

Logs and container layers usually fill `/var`.

1. `df -h /var` to confirm the filesystem is full.
2. `sudo du -xh /var --max-depth=2 | sort -h | tail -20` to find the biggest directories.
3. Truncate, do not delete, a log a process still holds open: `truncate -s 0 FILE`.
4. `docker system prune --filter until=72h` removes old images and stopped containers.

```bash
# deleted files still held open keep their space
lsof +L1 | head
```

## Inodes exhausted

`df -i` shows 100% IUse while bytes are free: millions of small files (session files,
mail queue). Find the directory with `find /var -xdev -type f | cut -d/ -f3 | sort | uniq -c`.

## Grow the volume

Resize the EBS volume, then `growpart` and `resize2fs` (or `xfs_growfs`).
""",
    "linux/memory-pressure.md": _fm("Host memory pressure", "HostOutOfMemory", "", "linux, memory")
    + """# Host memory pressure

Available memory below 10% and the OOM killer may start killing processes.

## Check swap and the OOM killer

1. `free -m` and `vmstat 1 5`: high `si`/`so` means the host is swapping.
2. `dmesg -T | grep -i "killed process"` lists processes the kernel killed.

## Find the process that leaks memory

Sort by resident memory: `ps aux --sort=-rss | head`. A steadily growing RSS over hours
is a leak; restart the process during low traffic and open a bug.
""",
    "linux/clock-skew.md": _fm("Clock skew", "HostClockSkew, HostClockNotSynchronising", "", "ntp")
    + """# Clock skew

The host clock differs from NTP by more than 50 ms; TLS, Kerberos and distributed
locks misbehave.

## Check chrony

1. `chronyc tracking` shows the offset.
2. `chronyc sources -v` shows which time servers are reachable.

## Force a step

`chronyc makestep` steps the clock at once; expect log timestamps to jump.
""",
    "linux/open-files.md": _fm("Too many open files", "", "api", "linux, ulimit")
    + """# Too many open files

The application logs `EMFILE: too many open files` and stops accepting connections.

## Check the limit and usage

```bash
# the limit of a running process
cat /proc/$(pgrep -f api)/limits | grep "open files"
ls /proc/$(pgrep -f api)/fd | wc -l
```

## Raise the file descriptor limit

Set `LimitNOFILE=65536` in the systemd unit, `systemctl daemon-reload`, restart.
""",
    "k8s/crashloop.md": _fm(
        "Pod in CrashLoopBackOff", "KubePodCrashLooping", "", "kubernetes, pods"
    )
    + """# Pod in CrashLoopBackOff

A container keeps crashing and restarting; Kubernetes waits longer after each crash.

## Symptoms

`kubectl get pods` shows `CrashLoopBackOff` and the RESTARTS count keeps going up: the
pod keeps restarting every few minutes.

## Read the logs of the crashed container

1. `kubectl logs POD --previous` shows the output of the last crashed run.
2. `kubectl describe pod POD` shows the exit code and the last state.
3. Exit code 137 is a kill (often OOMKilled), 1 is the application's own error.

## Common causes

### Bad configuration

A missing secret or config map key crashes the process at start-up.

### Failing liveness probe

A liveness probe that is too strict kills a slow starting container. Add a startup probe.

## Roll back

`kubectl rollout undo deployment/NAME` if a new image started the crashes.
""",
    "k8s/oomkilled.md": _fm(
        "Container OOMKilled", "KubeContainerOOMKilled", "", "kubernetes, memory"
    )
    + """# Container OOMKilled

The container used more memory than its limit and the kernel killed it.

## Confirm the OOM kill

`kubectl describe pod POD` shows `Last State: Terminated, Reason: OOMKilled` and exit code 137.

## Raise the memory limit

1. Compare the limit with `container_memory_working_set_bytes` over the last day.
2. Raise `resources.limits.memory` by 25% in the chart values.
3. Roll out and watch for another OOMKilled within an hour.

## JVM heap

A JVM without `-XX:MaxRAMPercentage` sizes its heap from the node, not the container.
""",
    "k8s/pending-pods.md": _fm("Pods stuck Pending", "KubePodNotScheduled", "", "kubernetes")
    + """# Pods stuck Pending

## Why the scheduler refuses

`kubectl describe pod POD` lists the events: `Insufficient cpu`, `node(s) had taint`,
`didn't match node selector`.

## Insufficient resources

Add nodes or lower the requests; the cluster autoscaler log shows why it did not scale up.
""",
    "k8s/node-not-ready.md": _fm("Node NotReady", "KubeNodeNotReady", "", "kubernetes, nodes")
    + """# Node NotReady

## Check the kubelet

1. `kubectl describe node NODE`: conditions (MemoryPressure, DiskPressure, PIDPressure).
2. On the node: `journalctl -u kubelet --since -30m`.

## Drain and replace

`kubectl drain NODE --ignore-daemonsets --delete-emptydir-data`, then terminate the instance.
""",
    "k8s/image-pull.md": _fm(
        "ImagePullBackOff", "KubePodImagePullBackOff", "", "kubernetes, registry"
    )
    + """# ImagePullBackOff

## Wrong tag or missing credentials

The image tag does not exist, or the pull secret is missing or expired. `kubectl describe
pod` shows `manifest unknown` or `unauthorized`.

## Registry rate limits

Docker Hub answers `toomanyrequests`: use the pull-through cache mirror.
""",
    "k8s/hpa-maxed.md": _fm("Autoscaler at maximum", "KubeHpaMaxedOut", "api", "kubernetes")
    + """# Autoscaler at maximum

The HorizontalPodAutoscaler has run at maxReplicas for 15 minutes.

## Raise maxReplicas

Check the nodes have room first, then raise `maxReplicas` in the chart.
""",
    "tls/cert-expiry.md": _fm(
        "TLS certificate expiry", "CertificateExpiringSoon, SSLCertExpiringSoon", "", "tls, certs"
    )
    + """# TLS certificate expiry

A certificate served by the load balancer expires in less than 14 days.

## Check the expiry date

```bash
# prints notAfter
echo | openssl s_client -connect example.com:443 2>/dev/null | openssl x509 -noout -enddate
```

## Renew the certificate

1. cert-manager: `kubectl get certificate -A` and look for `READY False`.
2. `kubectl describe certificaterequest` shows why the ACME order failed.
3. Delete the failed order to retry; the renewal runs within minutes.
4. Check the new expiry date on every load balancer listener.
""",
    "network/tls-handshake.md": _fm("TLS handshake failures", "", "edge", "tls, network")
    + """# TLS handshake failures

Clients report `handshake failure` or `unknown ca`.

## Protocol and cipher mismatch

Old clients offer only TLS 1.0; the edge accepts TLS 1.2 and later. `openssl s_client
-tls1_2` from the client's network shows what the edge offers.

## Incomplete certificate chain

The server must send the intermediate certificate; `openssl s_client -showcerts`.
""",
    "network/dns.md": _fm("DNS resolution failures", "CoreDNSErrorsHigh", "coredns", "dns")
    + """# DNS resolution failures

## Names do not resolve

Services log `no such host` or `SERVFAIL` when looking up names.

1. From a pod: `nslookup kubernetes.default` and `dig +search api.internal`.
2. Check CoreDNS pods are running: `kubectl -n kube-system get pods -l k8s-app=kube-dns`.
3. Look at the CoreDNS logs for upstream timeouts.

## ndots and search domains

With `ndots:5` every external name is tried against each search domain first; lower it.
""",
    "network/packet-loss.md": _fm("Packet loss", "", "", "network")
    + """# Packet loss

## Measure

`mtr -rwc 100 HOST` from both ends; loss only at one hop that continues is ICMP rate limiting.

## Interface errors

`ip -s link` shows RX errors and drops; a growing count points at the NIC or the cable.
""",
    "db/replication-lag.md": _fm(
        "PostgreSQL replication lag", "PostgresReplicationLag", "postgres", "database, postgres"
    )
    + """# PostgreSQL replication lag

The replica is more than 30 seconds behind the primary.

## Measure the lag

On the primary: `SELECT client_addr, replay_lag FROM pg_stat_replication;`.
On the replica: `SELECT now() - pg_last_xact_replay_timestamp();`.

## Long queries on the replica

A long query on a hot standby blocks replay when `hot_standby_feedback` is off.
Cancel it with `pg_cancel_backend(pid)`.

## Replica is behind because of I/O

1. Check disk latency on the replica: `iostat -x 5`.
2. If WAL arrives faster than it can be replayed, move the replica to faster storage.
""",
    "db/connections.md": _fm(
        "PostgreSQL connections exhausted", "PostgresTooManyConnections", "postgres", "database"
    )
    + """# PostgreSQL connections exhausted

Clients fail with `FATAL: sorry, too many clients already`.

## Who holds the connections

`SELECT usename, application_name, state, count(*) FROM pg_stat_activity GROUP BY 1,2,3;`

## Idle in transaction

Sessions `idle in transaction` hold locks and slots; terminate the oldest with
`pg_terminate_backend(pid)` after checking with the owning team.

## Use the pooler

Point applications at PgBouncer in transaction mode instead of raising max_connections.
""",
    "db/slow-queries.md": _fm("Slow queries", "PostgresSlowQueries", "postgres", "database")
    + """# Slow queries

## Find the slowest statements

`SELECT query, mean_exec_time FROM pg_stat_statements ORDER BY mean_exec_time DESC LIMIT 10;`

## Missing index

`EXPLAIN (ANALYZE, BUFFERS)` showing a sequential scan on a large table: add the index
`CONCURRENTLY`.
""",
    "db/deadlocks.md": _fm("Deadlocks", "PostgresDeadlocks", "postgres", "database, locks")
    + """# Deadlocks

## Read the deadlock report

The server log prints both statements of each deadlock (`deadlock detected`).

## Fix the lock order

Two transactions updating the same rows in a different order deadlock; sort the keys.
""",
    "redis/memory.md": _fm("Redis memory high", "RedisMemoryHigh", "redis", "redis, cache")
    + """# Redis memory high

## Eviction

With `maxmemory-policy allkeys-lru` Redis evicts keys when full; with `noeviction` writes
fail with `OOM command not allowed`.

## Big keys

`redis-cli --bigkeys` finds the largest keys; a runaway list is the usual cause.
""",
    "queues/backlog.md": _fm(
        "Queue backlog", "RabbitMQQueueBacklog", "rabbitmq, worker", "queues, rabbitmq"
    )
    + """# Queue backlog

Messages pile up in the queue faster than consumers take them.

## Check the consumers

1. `rabbitmqctl list_queues name messages consumers` shows the backlog and the consumer count.
2. Zero consumers: the worker deployment is down; check its pods.
3. Consumers present but slow: look at worker latency and errors.

## Scale the workers

`kubectl scale deployment/worker --replicas=10` drains a growing backlog; watch the
database, the workers' usual bottleneck.

## Dead letters

Messages that fail repeatedly go to the dead letter queue; inspect before replaying.
""",
    "queues/kafka-lag.md": _fm("Kafka consumer lag", "KafkaConsumerLagHigh", "kafka", "kafka")
    + """# Kafka consumer lag

## Measure lag per partition

`kafka-consumer-groups --bootstrap-server B --describe --group G` shows LAG per partition.

## One partition lags

A hot key sends most messages to one partition; only one consumer can read it.

## Rebalancing storms

Consumers that take longer than `max.poll.interval.ms` are kicked out and the group
rebalances again and again.
""",
    "deploy/errors-after-deploy.md": _fm(
        "5xx errors after a deploy", "HighErrorRateAfterDeploy, Http5xxRateHigh", "api", "deploy"
    )
    + """# 5xx errors after a deploy

The rate of HTTP 500 responses rose right after a release.

## Confirm the deploy is the cause

1. Compare the error rate graph with the deploy time in the deploy channel.
2. `kubectl rollout history deployment/api` shows the revision that went out.
3. Check the new pods' logs for stack traces.

## Roll back the release

1. `kubectl rollout undo deployment/api`.
2. Watch the 5xx rate return to its baseline within five minutes.
3. Tell the release owner and freeze the pipeline.

## Feature flags

If the change is behind a flag, turning the flag off is faster than a rollback.
""",
    "deploy/canary.md": _fm("Canary analysis failed", "CanaryAnalysisFailed", "", "deploy")
    + """# Canary analysis failed

## Read the analysis

The canary's success rate or latency was worse than the baseline's; the rollout stopped
itself. Look at the analysis run for the failing metric.
""",
    "web/latency.md": _fm("High p99 latency", "HighLatencyP99", "api", "latency, slo")
    + """# High p99 latency

## Where the time goes

Compare the upstream latency at the load balancer with the application's own histogram;
a gap means queueing before the application.

## Saturation

Check CPU throttling, connection pool waits and garbage collection pauses.
""",
    "web/nginx-502.md": _fm("502 Bad Gateway from nginx", "", "edge, nginx", "nginx")
    + """# 502 Bad Gateway from nginx

## Upstream unreachable

`connect() failed (111: Connection refused) while connecting to upstream` in the error
log: the upstream process is down or listening elsewhere.

## Upstream closed the connection

`upstream prematurely closed connection`: the application crashed mid-request or its
keepalive timeout is shorter than nginx's.
""",
    "storage/s3-throttling.md": _fm("S3 throttling", "", "s3", "aws, storage")
    + """# S3 throttling

## SlowDown errors

S3 answers `503 SlowDown` above about 3,500 writes per second per prefix; spread keys
over more prefixes and retry with backoff.
""",
    "backups/restore.md": _fm("Backup failed", "BackupJobFailed", "postgres", "backups")
    + """# Backup failed

## Check the last backup

`pgbackrest info` shows the last full and incremental backups.

## Run the backup by hand

1. `pgbackrest --stanza=main backup --type=incr`.
2. Check the repository has space.
""",
    "oncall/escalation.md": """# Escalation

No front matter here: the title is the heading.

## When to page the secondary

Page the secondary on-call when the primary has not acknowledged within 10 minutes.

## Incident commander

For a customer-visible outage, name an incident commander in the channel.
""",
    BROKEN: """---
title: A runbook with broken front matter
alerts: [SomethingBroken
tags: [oops]
---
# Broken

## Never indexed

This text must not show up in any search.
""",
}
assert len(FILES) == 30, len(FILES)

# (how someone asks, the section that must come first)
PHRASINGS: tuple[tuple[str, str], ...] = (
    ("pod keeps restarting", "k8s/crashloop.md#symptoms"),
    ("disk is full on /var", "linux/disk-full.md#free-space-on-var"),
    ("container was OOMKilled", "k8s/oomkilled.md#container-oomkilled"),
    ("raise the memory limit of the container", "k8s/oomkilled.md#raise-the-memory-limit"),
    ("renew expiring TLS certificate", "tls/cert-expiry.md#renew-the-certificate"),
    ("postgres replica behind primary", "db/replication-lag.md#replica-is-behind-because-of-io"),
    (
        "roll back the release after 500 errors",
        "deploy/errors-after-deploy.md#roll-back-the-release",
    ),
    ("DNS names do not resolve", "network/dns.md#names-do-not-resolve"),
    ("queue backlog: scale the workers", "queues/backlog.md#scale-the-workers"),
    ("what is burning cpu on the host", "linux/high-cpu.md#find-what-is-burning-cpu"),
    ("out of inodes", "linux/disk-full.md#inodes-exhausted"),
    ("too many clients already postgres", "db/connections.md#postgresql-connections-exhausted"),
    ("kafka lag per partition", "queues/kafka-lag.md#measure-lag-per-partition"),
    ("redis evicting keys", "redis/memory.md#eviction"),
    ("nginx 502 connection refused upstream", "web/nginx-502.md#upstream-unreachable"),
)


def write_corpus(root: Path) -> Path:
    """The 30 files under ``root``; returns ``root``."""
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root
