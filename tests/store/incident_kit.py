"""What the past-incident tests share: records, a corpus of ~50 varied ones, and
visibility checks."""

from __future__ import annotations

import itertools

from bot.store.incidents import IncidentApproval, IncidentRecord, IncidentWrite

T0 = 1_780_000_000.0  # 2026-05-28 20:26:40 UTC
DAY = 86_400.0
RETENTION = 180 * DAY
PUBLIC = "C0PUBLIC"
PRIVATE = "C_PRIV"

_seq = itertools.count(1)


def record(
    request: str = "why is checkout slow?",
    answer: str = "The checkout pods were CPU throttled; raising the limit fixed it.",
    *,
    channel: str = PUBLIC,
    at: float = T0,
    n: int | None = None,
    **fields: object,
) -> IncidentRecord:
    """A record in ``channel`` that started at ``at`` (its id unique unless ``n``)."""
    n = next(_seq) if n is None else n
    ts = f"{int(at)}.{n:06d}"
    base: dict[str, object] = {
        "id": f"{channel}:{ts}:j1",
        "channel": channel,
        "thread_ts": ts,
        "permalink": f"https://acme.slack.com/archives/{channel}/p{ts.replace('.', '')}",
        "started_at": at,
        "ended_at": at + 300,
        "requester": "U0ALICE",
        "request": request,
        "answer": answer,
        "stop_reason": "done",
    }
    base.update(fields)
    return IncidentRecord.model_validate(base)


SERVICES = ["checkout-api", "payments", "search", "inventory", "auth", "gateway", "orders"]
HOSTS = ["web-01", "web-02", "db-01", "db-02", "cache-01", "worker-05", "edge-03"]
PROBLEMS = [
    ("p99 latency is high", "a slow query after an index was dropped; recreated the index"),
    ("pods keep restarting", "the liveness probe timed out under load; raised its timeout"),
    ("5xx errors from the ingress", "the upstream pool was exhausted; scaled the deployment"),
    ("memory keeps growing", "a cache without eviction; set maxmemory and a policy"),
    ("cron job did not run", "the schedule used local time; moved it to UTC"),
    ("queue backlog is growing", "the consumers were scaled to zero by the autoscaler"),
    ("tls handshake failures", "an intermediate certificate was missing from the bundle"),
]

# Records the ranking tests look for, each with words no other record shares.
TARGETS = {
    "disk": record(
        "db-02 disk almost full, postgres WAL piling up",
        "WAL archiving to S3 had stopped because the archive_command credentials expired. "
        "Rotated the credentials; pg_wal went from 97% to 12% within ten minutes.",
        alertname="DiskAlmostFull",
        alert_labels={"instance": "db-02:9100", "service": "postgres"},
        tools=["prometheus_query", "host_tail_log"],
        n=9001,
        at=T0 + 40 * 3600,
    ),
    "kafka": record(
        "orders consumer lag keeps rising on the kafka topic",
        "A rebalance storm: max.poll.interval.ms was exceeded by slow batch handlers, so "
        "consumers kept leaving the group. Raised the interval and halved the batch size.",
        alertname="KafkaConsumerLag",
        alert_labels={"topic": "orders", "group": "order-processor"},
        tools=["prometheus_query", "k8s_logs"],
        n=9002,
        at=T0 + 41 * 3600,
    ),
    "dns": record(
        "intermittent NXDOMAIN resolving internal names from pods",
        "coredns was CPU throttled at its 100m limit during the morning peak; raised the "
        "limit to 500m and added a second replica. Resolution errors stopped.",
        tools=["k8s_describe", "k8s_scale"],
        approvals=[IncidentApproval(tool="k8s_scale", decision="approved", by="U0BOB")],
        writes=[IncidentWrite(tool="k8s_scale", outcome="done", confirmed_by="U0BOB")],
        n=9003,
        at=T0 + 42 * 3600,
    ),
    "cert": record(
        "certificate for api.acme.example expires tomorrow",
        "cert-manager could not complete the ACME DNS-01 challenge: the Route53 role lost "
        "its permission. Restored the IAM policy and the certificate renewed.",
        alertname="CertificateExpiringSoon",
        n=9004,
        at=T0 + 43 * 3600,
    ),
}


def corpus() -> list[IncidentRecord]:
    """~50 varied records: every service × problem pairing cycles through hosts and
    channels, plus the ``TARGETS``."""
    out = []
    for i, (service, (problem, cause)) in enumerate(itertools.product(SERVICES, PROBLEMS)):
        host = HOSTS[(i // len(PROBLEMS) + i) % len(HOSTS)]
        out.append(
            record(
                f"{service} on {host}: {problem}",
                f"Looked at {service} on {host}. Cause: {cause}. Checked dashboards and "
                "logs for the last hour; the error rate went back to baseline after the fix.",
                channel=PRIVATE if i % 5 == 0 else PUBLIC,
                at=T0 + i * 3600,
                n=100 + i,
                tools=["prometheus_query", "k8s_get_pods"][: 1 + i % 2],
                alertname="HighErrorRate" if i % 3 == 0 else None,
                alert_labels={"service": service} if i % 3 == 0 else {},
            )
        )
    return out + list(TARGETS.values())


async def everyone(channel: str) -> bool:
    return True


async def public_only(channel: str) -> bool:
    return channel != PRIVATE
