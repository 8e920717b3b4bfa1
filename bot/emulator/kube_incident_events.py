"""The events of the incident cluster (``bot.emulator.kube_incident``): what the kubelet,
the scheduler and the deployment controller reported while it happened.

They name the incident's pods, whose names the cluster's builder derives; it hands them
over as :class:`Culprits`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.emulator.kube_fixtures import EVICTED, UNSCHEDULABLE, Json, event


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
    minute, hour, day = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)
    return [
        event(
            "web",
            ("Pod", c.crash_looping),
            "BackOff",
            f"Back-off restarting failed container app in pod {c.crash_looping}_web(…)",
            now=now,
            last=minute,
            first=3 * hour,
            count=61,
            warning=True,
        ),
        event(
            "web",
            ("Pod", c.crash_looping),
            "Pulled",
            f'Container image "{c.api_image}" already present on machine',
            now=now,
            last=2 * minute,
            first=3 * hour,
            count=15,
        ),
        event(
            "web",
            ("Pod", c.crash_looping),
            "Started",
            "Started container app",
            now=now,
            last=2 * minute,
            first=3 * hour,
            count=15,
        ),
        event(
            "web",
            ("Pod", c.pending),
            "FailedScheduling",
            UNSCHEDULABLE,
            now=now,
            last=3 * minute,
            first=40 * minute,
            count=12,
            warning=True,
            component="default-scheduler",
        ),
        event(
            "web",
            ("Deployment", "api"),
            "ScalingReplicaSet",
            f"Scaled up replica set {c.api_replica_set} to {c.api_replicas}",
            now=now,
            last=3 * day,
            component="deployment-controller",
        ),
        event(
            "web",
            ("Pod", c.evicted),
            "Evicted",
            f"{EVICTED} Container app was using 402Mi, request is 256Mi, has larger "
            "consumption of memory.",
            now=now,
            last=24 * minute,
            warning=True,
            component="kubelet",
        ),
        event(
            "payments",
            ("Pod", c.pull_failing),
            "Failed",
            f'Failed to pull image "{c.missing_image}": rpc error: code = NotFound desc = '
            f'failed to pull and unpack image "{c.missing_image}": not found',
            now=now,
            last=4 * minute,
            first=hour,
            count=14,
            warning=True,
        ),
        event(
            "payments",
            ("Pod", c.pull_failing),
            "BackOff",
            f'Back-off pulling image "{c.missing_image}"',
            now=now,
            last=30 * timedelta(seconds=1),
            first=hour,
            count=240,
            warning=True,
        ),
        event(
            "payments",
            ("Deployment", "checkout"),
            "ScalingReplicaSet",
            "Scaled up replica set checkout-6b8f9d7c4 to 1",
            now=now,
            last=hour,
            component="deployment-controller",
        ),
        event(
            "default",
            ("Node", "node-c"),
            "NodeHasInsufficientMemory",
            "Node node-c status is now: NodeHasInsufficientMemory",
            now=now,
            last=25 * minute,
            involved_namespace="",
        ),
        event(
            "default",
            ("Node", "node-c"),
            "EvictionThresholdMet",
            "Attempting to reclaim memory",
            now=now,
            last=24 * minute,
            first=25 * minute,
            count=3,
            warning=True,
            involved_namespace="",
        ),
    ]
