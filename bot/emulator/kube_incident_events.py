"""The events of the incident cluster (``bot.emulator.kube_incident``): what the kubelet,
the scheduler and the deployment controller reported while it happened.

They name the incident's pods, whose names the cluster's builder derives; it hands them
over as :class:`Culprits`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.emulator.kube_fixtures import EVICTED, UNSCHEDULABLE, Involved, Json


@dataclass(frozen=True, slots=True)
class Culprits:
    """The objects the incident's events are about."""

    api_replica_set: str
    api_replicas: int
    api_image: str
    crash_looping: str  # web/api's pod, OOMKilled over and over
    pending: str  # web/worker's pod that no node can take
    evicted: str  # web/frontend's pod evicted from node-c
    pull_failing: str  # payments/checkout's new pod, its image missing
    missing_image: str


def incident_events(now: datetime, c: Culprits) -> list[Json]:
    """The events, oldest story first: web/api, web/worker, web/frontend, payments/checkout,
    node-c."""
    second, minute = timedelta(seconds=1), timedelta(minutes=1)
    hour, day = timedelta(hours=1), timedelta(days=1)
    crash = Involved(now, "web", ("Pod", c.crash_looping))
    pending = Involved(now, "web", ("Pod", c.pending), "default-scheduler")
    api = Involved(now, "web", ("Deployment", "api"), "deployment-controller")
    evicted = Involved(now, "web", ("Pod", c.evicted))
    pull = Involved(now, "payments", ("Pod", c.pull_failing))
    checkout = Involved(now, "payments", ("Deployment", "checkout"), "deployment-controller")
    node_c = Involved(now, "default", ("Node", "node-c"), involved_namespace="")
    restarting = f"Back-off restarting failed container app in pod {c.crash_looping}_web(…)"
    present = f'Container image "{c.api_image}" already present on machine'
    over = "Container app was using 402Mi, request is 256Mi, has larger consumption of memory."
    not_found = (
        f'Failed to pull image "{c.missing_image}": rpc error: code = NotFound desc = '
        f'failed to pull and unpack image "{c.missing_image}": not found'
    )
    pulling = f'Back-off pulling image "{c.missing_image}"'
    return [
        crash.event("BackOff", restarting, last=minute, first=3 * hour, count=61, warning=True),
        crash.event("Pulled", present, last=2 * minute, first=3 * hour, count=15),
        crash.event("Started", "Started container app", last=2 * minute, first=3 * hour, count=15),
        pending.event(
            "FailedScheduling",
            UNSCHEDULABLE,
            last=3 * minute,
            first=40 * minute,
            count=12,
            warning=True,
        ),
        api.event(
            "ScalingReplicaSet",
            f"Scaled up replica set {c.api_replica_set} to {c.api_replicas}",
            last=3 * day,
        ),
        evicted.event("Evicted", f"{EVICTED} {over}", last=24 * minute, warning=True),
        pull.event("Failed", not_found, last=4 * minute, first=hour, count=14, warning=True),
        pull.event("BackOff", pulling, last=30 * second, first=hour, count=240, warning=True),
        checkout.event(
            "ScalingReplicaSet", "Scaled up replica set checkout-6b8f9d7c4 to 1", last=hour
        ),
        node_c.event(
            "NodeHasInsufficientMemory",
            "Node node-c status is now: NodeHasInsufficientMemory",
            last=25 * minute,
        ),
        node_c.event(
            "EvictionThresholdMet",
            "Attempting to reclaim memory",
            last=24 * minute,
            first=25 * minute,
            count=3,
            warning=True,
        ),
    ]
