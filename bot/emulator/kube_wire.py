"""What the fake Kubernetes API server (``bot.emulator.kube_api``) speaks besides its
routes: the resources it serves (``RESOURCES``: group, kind, scope, subresources, verbs,
as discovery lists them), the TLS material it serves with (a throwaway CA, a server
certificate, client certificates), the OpenAPI v2 document kubectl before 1.26 asks for
(protobuf, by gnostic's field numbers), label and field selectors as the API server
reads them, merge patches and the ``scale`` subresource's shape, and server-side
``Table`` printing (kubectl's columns for each kind).
"""

from __future__ import annotations

import copy
import ipaddress
import re
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bot.emulator.kube_fixtures import Json


@dataclass(frozen=True, slots=True)
class Resource:
    group: str  # "" (core) or "apps"
    plural: str
    kind: str
    namespaced: bool
    short: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ("get", "list")

    @property
    def group_version(self) -> str:
        return f"{self.group}/v1" if self.group else "v1"


RESOURCES = {
    (r.group, r.plural): r
    for r in (
        Resource("", "pods", "Pod", True, ("po",), ("log",), ("get", "list", "delete")),
        Resource("", "nodes", "Node", False, ("no",)),
        Resource("", "services", "Service", True, ("svc",)),
        Resource("", "events", "Event", True, ("ev",)),
        Resource("", "namespaces", "Namespace", False, ("ns",)),
        Resource(
            "apps",
            "deployments",
            "Deployment",
            True,
            ("deploy",),
            ("scale", "status"),
            ("get", "list", "patch", "update"),
        ),
        Resource(
            "apps",
            "statefulsets",
            "StatefulSet",
            True,
            ("sts",),
            ("scale", "status"),
            ("get", "list", "patch", "update"),
        ),
        Resource(
            "apps",
            "daemonsets",
            "DaemonSet",
            True,
            ("ds",),
            ("status",),
            ("get", "list", "patch", "update"),
        ),
    )
}


@dataclass(frozen=True, slots=True)
class Tls:
    """A throwaway CA, the server's TLS context (a certificate for 127.0.0.1 that the CA
    signed; client certificates it signed are accepted), and one such client certificate."""

    ca_pem: bytes
    context: ssl.SSLContext
    client_cert_pem: bytes
    client_key_pem: bytes


def self_signed() -> Tls:
    """Make a :class:`Tls` (``cryptography``, from the dev extra, imported here only)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.now(UTC)
    pem = serialization.Encoding.PEM
    ca_key, server_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "opsloop fake kube CA")])

    def issue(
        subject: x509.Name, key: ec.EllipticCurvePrivateKey, *extensions: x509.ExtensionType
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=2))
        )
        for extension in extensions:
            critical = isinstance(extension, x509.BasicConstraints | x509.KeyUsage)
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(ca_key, hashes.SHA256())

    def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    signed_by_ca = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    ca = issue(
        ca_name,
        ca_key,
        x509.BasicConstraints(ca=True, path_length=0),
        x509.KeyUsage(True, False, False, False, False, True, True, False, False),
        x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
    )
    server = issue(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        server_key,
        x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        ),
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
        signed_by_ca,
    )
    client = issue(  # what kubeadm gives an admin: O=system:masters, CN=user
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "opsloop"),
            ]
        ),
        client_key,
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
        signed_by_ca,
    )
    with tempfile.TemporaryDirectory(prefix="opsloop-fake-kube-") as folder:
        cert_path, key_path = Path(folder) / "tls.crt", Path(folder) / "tls.key"
        cert_path.write_bytes(server.public_bytes(pem))
        key_path.write_bytes(key_pem(server_key))
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert_path, key_path)
    # As the API server does: a client certificate is optional, but one it sends must be
    # signed by the cluster's CA (the TLS handshake refuses any other).
    context.verify_mode = ssl.CERT_OPTIONAL
    context.load_verify_locations(cadata=ca.public_bytes(pem).decode())
    return Tls(ca.public_bytes(pem), context, client.public_bytes(pem), key_pem(client_key))


# -- OpenAPI v2, as protobuf: kubectl before 1.26 reads it to see that dryRun is supported ----

OPENAPI_SERVED = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"  # as Go parses it


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def openapi_v2() -> bytes:
    """A gnostic ``openapi_v2.Document`` with, for each kind, a PATCH operation carrying its
    ``x-kubernetes-group-version-kind`` and a ``dryRun`` query parameter: what kubectl's
    dry-run verifier looks for (field numbers from gnostic's OpenAPIv2.proto)."""
    paths = b""
    for resource in RESOURCES.values():
        where = "/namespaces/{namespace}" if resource.namespaced else ""
        prefix = f"/apis/{resource.group}/v1" if resource.group else "/api/v1"
        query = _field(2, "query") + _field(4, "dryRun") + _field(6, "string")
        # ParametersItem.parameter(1) → Parameter.non_body_parameter(2) → query schema(3)
        parameter = _field(1, _field(2, _field(3, query)))
        gvk = f'group: "{resource.group}"\nkind: {resource.kind}\nversion: v1\n'
        extension = _field(1, "x-kubernetes-group-version-kind") + _field(2, _field(2, gvk))
        operation = _field(8, parameter) + _field(13, extension)  # Operation
        item = _field(8, operation)  # PathItem.patch
        paths += _field(
            2, _field(1, f"{prefix}{where}/{resource.plural}/{{name}}") + _field(2, item)
        )
    return _field(1, "2.0") + _field(8, paths)


# -- selectors and patches ----------------------------------------------------------------

_SET_TERM = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_terms(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        terms.append(current)
    return [t.strip() for t in terms if t.strip()]


def labels_match(selector: str, obj: Json) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in _split_terms(selector):
        if match := _SET_TERM.match(term):
            key, op, values = match.groups()
            wanted = {v.strip() for v in values.split(",")}
            inside = key in labels and labels[key] in wanted
            if inside != (op == "in"):
                return False
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


def fields_match(selector: str, obj: Json) -> bool:
    for term in _split_terms(selector):
        negate = "!=" in term
        path, value = (s.strip() for s in term.replace("==", "=").replace("!=", "=").split("=", 1))
        here: Any = obj
        for key in path.split("."):
            here = here.get(key) if isinstance(here, dict) else None
        actual = "" if here is None else str(here)
        if (actual == value) == negate:
            return False
    return True


def merge_patch(target: Json, patch: Json) -> Json:
    """RFC 7386 merge (a strategic-merge patch of maps means the same): ``None`` removes."""
    out = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_patch(out[key], value)
        else:
            out[key] = value
    return out


def scale_of(obj: Json) -> Json:
    meta = obj["metadata"]
    labels = (obj["spec"].get("selector") or {}).get("matchLabels") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": int(obj["spec"].get("replicas", 1))},
        "status": {
            "replicas": int(obj.get("status", {}).get("replicas", 0)),
            "selector": ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
        },
    }


# -- Table cells (the fake's own, simple printing; not the pack's) --------------------------


def _age(obj: Json, now: datetime) -> str:
    created = obj.get("metadata", {}).get("creationTimestamp")
    if not created:
        return "<unknown>"
    seconds = int((now - datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds())
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _name_age(obj: Json, now: datetime) -> list[Any]:
    return [obj["metadata"]["name"], _age(obj, now)]


def _pod_status(pod: Json) -> str:
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    for status in pod.get("status", {}).get("containerStatuses", []):
        state = status.get("state", {})
        if reason := (state.get("waiting") or {}).get("reason") or (
            state.get("terminated") or {}
        ).get("reason"):
            return str(reason)
    return str(pod.get("status", {}).get("reason") or pod.get("status", {}).get("phase", "Unknown"))


def _pod_cells(pod: Json, now: datetime) -> list[Any]:
    statuses = pod.get("status", {}).get("containerStatuses", [])
    ready = sum(1 for s in statuses if s.get("ready"))
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(pod['spec'].get('containers', []))}",
        _pod_status(pod),
        sum(int(s.get("restartCount", 0)) for s in statuses),
        _age(pod, now),
        pod.get("status", {}).get("podIP", "<none>"),
        pod["spec"].get("nodeName", "<none>"),
        "<none>",
        "<none>",
    ]


def _images(obj: Json) -> tuple[str, str]:
    containers = obj["spec"]["template"]["spec"]["containers"]
    return ",".join(c["name"] for c in containers), ",".join(c["image"] for c in containers)


def _workload_cells(obj: Json, now: datetime) -> list[Any]:
    status, names = obj.get("status", {}), _images(obj)
    selector = ",".join(
        f"{k}={v}" for k, v in sorted(obj["spec"]["selector"].get("matchLabels", {}).items())
    )
    return [
        obj["metadata"]["name"],
        f"{status.get('readyReplicas', 0)}/{obj['spec'].get('replicas', 1)}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        _age(obj, now),
        *names,
        selector,
    ]


def _node_cells(node: Json, now: datetime) -> list[Any]:
    conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
    addresses = {a["type"]: a["address"] for a in node.get("status", {}).get("addresses", [])}
    roles = sorted(
        k.split("/", 1)[1]
        for k in node["metadata"].get("labels", {})
        if k.startswith("node-role.kubernetes.io/")
    )
    info = node.get("status", {}).get("nodeInfo", {})
    return [
        node["metadata"]["name"],
        "Ready" if conditions.get("Ready") == "True" else "NotReady",
        ",".join(roles) or "<none>",
        _age(node, now),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP", "<none>"),
        addresses.get("ExternalIP", "<none>"),
        info.get("osImage", ""),
        info.get("kernelVersion", ""),
        info.get("containerRuntimeVersion", ""),
    ]


def _event_cells(event: Json, now: datetime) -> list[Any]:
    involved = event.get("involvedObject", {})
    last = {"metadata": {"creationTimestamp": event.get("lastTimestamp")}}
    return [
        _age(last, now),
        event.get("type", ""),
        event.get("reason", ""),
        f"{involved.get('kind', '').lower()}/{involved.get('name', '')}",
        event.get("message", ""),
    ]


def _service_cells(svc: Json, now: datetime) -> list[Any]:
    spec = svc["spec"]
    ingress = svc.get("status", {}).get("loadBalancer", {}).get("ingress", [])
    external = ",".join(i.get("ip", "") for i in ingress) or (
        "<pending>" if spec.get("type") == "LoadBalancer" else "<none>"
    )
    ports = ",".join(f"{p['port']}/{p.get('protocol', 'TCP')}" for p in spec.get("ports", []))
    selector = (
        ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    )
    return [
        svc["metadata"]["name"],
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP", ""),
        external,
        ports,
        _age(svc, now),
        selector,
    ]


# Deployments and statefulsets print alike (kubectl's wide columns have priority 1).
_WORKLOAD_COLUMNS = [
    ("Name", 0),
    ("Ready", 0),
    ("Up-to-date", 0),
    ("Available", 0),
    ("Age", 0),
    ("Containers", 1),
    ("Images", 1),
    ("Selector", 1),
]

COLUMNS: dict[str, list[tuple[str, int]]] = {
    "pods": [
        ("Name", 0),
        ("Ready", 0),
        ("Status", 0),
        ("Restarts", 0),
        ("Age", 0),
        ("IP", 1),
        ("Node", 1),
        ("Nominated Node", 1),
        ("Readiness Gates", 1),
    ],
    "deployments": _WORKLOAD_COLUMNS,
    "statefulsets": _WORKLOAD_COLUMNS,
    "nodes": [
        ("Name", 0),
        ("Status", 0),
        ("Roles", 0),
        ("Age", 0),
        ("Version", 0),
        ("Internal-IP", 1),
        ("External-IP", 1),
        ("OS-Image", 1),
        ("Kernel-Version", 1),
        ("Container-Runtime", 1),
    ],
    "events": [("Last Seen", 0), ("Type", 0), ("Reason", 0), ("Object", 0), ("Message", 0)],
    "services": [
        ("Name", 0),
        ("Type", 0),
        ("Cluster-IP", 0),
        ("External-IP", 0),
        ("Port(s)", 0),
        ("Age", 0),
        ("Selector", 1),
    ],
}
CELLS: dict[str, Callable[[Json, datetime], list[Any]]] = {
    "pods": _pod_cells,
    "deployments": _workload_cells,
    "statefulsets": _workload_cells,
    "nodes": _node_cells,
    "events": _event_cells,
    "services": _service_cells,
}
