"""A fake Kubernetes API server: a real aiohttp server on a free loopback port.

It speaks the API's REST protocol for what the ``kubernetes`` pack and ``kubectl`` do
with it, over a :class:`~bot.emulator.kube_fixtures.Cluster` of plain JSON objects:

* discovery (``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/apps/v1``) with the
  ``scale`` and ``log`` subresources, so kubectl's REST mapper and scale client work;
* list/get of pods, nodes, services, events, namespaces, deployments, statefulsets,
  daemonsets, namespaced and across namespaces, with ``labelSelector`` (``=``, ``!=``,
  ``in``, ``notin``, ``key``, ``!key``), ``fieldSelector`` (dotted paths, ``=``/``!=``),
  ``limit``/``continue``; server-side ``Table`` printing when asked (``as=Table`` in
  ``Accept``, as kubectl asks);
* ``PATCH`` of workloads (strategic-merge and merge patches) and their ``scale``
  subresource (also ``PUT``), ``DELETE`` of pods, all honouring ``dryRun=All`` (query or
  ``DeleteOptions`` body) by answering without changing anything;
* ``pods/{name}/log`` with ``container``, ``previous``, ``tailLines``, ``limitBytes`` and
  the API server's 400s (no container named, no previous run, a container still waiting);
* ``Status`` errors: 401 for a wrong bearer token, 403 in ``forbidden`` namespaces, 404,
  400, 415, 422.

This module owns the server: TLS and tokens, the record of requests, discovery, and the
routing of a path to a verb on an object (with the 403 of a ``forbidden`` namespace);
the verbs themselves, and the API server's errors, are ``bot.emulator.kube_objects``'s.

Every request is recorded (:attr:`FakeKube.requests`) before anything else, so tests can
assert that a refused call never reached it; :attr:`FakeKube.delay` makes every answer
slow (released at once by ``stop``).

    async with FakeKube(incident_cluster(now)) as kube:
        kubeconfig = kube.kubeconfig(tmp_path / "config")
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qsl

from aiohttp import web

from bot.emulator.app_server import AppServer, StartStop
from bot.emulator.kube_fixtures import Cluster, Json
from bot.emulator.kube_objects import ApiError, ClusterObjects, no_such_path, not_allowed
from bot.emulator.kube_wire import OPENAPI_SERVED, RESOURCES, Tls, openapi_v2, self_signed

DEFAULT_TOKEN = "opsloop-test-token"
USER = "system:serviceaccount:ops:opsloop"


@dataclass(frozen=True, slots=True)
class Request:
    """One request as the fake received it."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    accept: str
    body: str
    user_agent: str


@dataclass
class FakeKube(StartStop):
    """See the module docstring. ``token`` is the bearer token every request must carry."""

    cluster: Cluster = field(default_factory=Cluster)
    token: str = DEFAULT_TOKEN
    forbidden: frozenset[str] = frozenset()
    delay: float = 0.0
    requests: list[Request] = field(default_factory=list)
    answer_bytes: list[int] = field(default_factory=list)  # body sizes, as requests
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    tls: bool = True  # kubectl sends a bearer token over https only

    def __post_init__(self) -> None:
        self._server = AppServer()
        self._released = asyncio.Event()
        self._objects = ClusterObjects(self.cluster, self.clock)
        self.port = 0
        self.ca_pem = b""
        self._tls: Tls | None = None

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> Self:
        app = web.Application(client_max_size=4 << 20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        context = None
        if self.tls:
            self._tls = self_signed()
            self.ca_pem, context = self._tls.ca_pem, self._tls.context
        self.port = await self._server.start(app, ssl_context=context)
        return self

    async def stop(self) -> None:
        self._released.set()
        await self._server.stop()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def kubeconfig(
        self,
        path: Path,
        *,
        token: str | None = None,
        context: str = "kind-prod",
        namespace: str | None = None,
        client_certificate: bool = False,
    ) -> Path:
        """A kubeconfig (JSON is YAML) whose one context reaches this server, with the bearer
        token (or ``token``), or with ``client_certificate`` the client certificate."""
        ctx: Json = {"cluster": "prod", "user": "opsloop"}
        if namespace:
            ctx["namespace"] = namespace
        user: Json = {"token": self.token if token is None else token}
        if client_certificate:
            assert self._tls is not None, "client certificates need tls=True"
            user = {
                "client-certificate-data": base64.b64encode(self._tls.client_cert_pem).decode(),
                "client-key-data": base64.b64encode(self._tls.client_key_pem).decode(),
            }
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "prod", "cluster": self.cluster_entry()}],
            "users": [{"name": "opsloop", "user": user}],
            "contexts": [{"name": context, "context": ctx}],
            "current-context": context,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=2))
        return path

    def cluster_entry(self) -> Json:
        """A kubeconfig ``cluster``: the URL and, with TLS, the CA that signed the server."""
        entry: Json = {"server": self.url}
        if self.tls:
            entry["certificate-authority-data"] = base64.b64encode(self.ca_pem).decode()
        return entry

    def received(self, method: str | None = None, contains: str = "") -> list[Request]:
        return [
            r
            for r in self.requests
            if (method is None or r.method == method) and contains in r.path
        ]

    # -- the protocol ----------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.text()
        query = dict(parse_qsl(request.query_string, keep_blank_values=True))
        self.requests.append(
            Request(
                method=request.method,
                path=request.path,
                query=query,
                content_type=request.headers.get("Content-Type", ""),
                accept=request.headers.get("Accept", ""),
                body=body,
                user_agent=request.headers.get("User-Agent", ""),
            )
        )
        if self.delay:
            try:
                await asyncio.wait_for(self._released.wait(), self.delay)
            except TimeoutError:
                pass
        response = self._answer(request, query, body)
        self.answer_bytes.append(len(response.body) if isinstance(response.body, bytes) else 0)
        return response

    def _authenticated(self, request: web.Request) -> bool:
        """The bearer token, or a client certificate (the handshake checked its CA)."""
        if request.headers.get("Authorization") == f"Bearer {self.token}":
            return True
        transport = request.transport
        return transport is not None and bool(transport.get_extra_info("peercert"))

    def _answer(self, request: web.Request, query: dict[str, str], body: str) -> web.Response:
        try:
            if not self._authenticated(request):
                raise ApiError(401, "Unauthorized", "Unauthorized")
            answer = self._route(request.method, request.path, query, body, request.headers)
        except ApiError as err:
            return web.json_response(err.status(), status=err.code)
        if isinstance(answer, bytes):
            return web.Response(body=answer, content_type=OPENAPI_SERVED)
        if isinstance(answer, str):
            return web.Response(text=answer, content_type="text/plain")
        return web.json_response(answer)

    def _route(
        self, method: str, path: str, query: dict[str, str], body: str, headers: Any
    ) -> Json | str | bytes:
        parts = [p for p in path.split("/") if p]
        if parts == ["version"]:
            return self._version()
        if parts == ["openapi", "v2"] and "protobuf" in headers.get("Accept", ""):
            return openapi_v2()
        if parts == ["api"]:
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.port}"}
                ],
            }
        if parts == ["apis"]:
            version = {"groupVersion": "apps/v1", "version": "v1"}
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [{"name": "apps", "versions": [version], "preferredVersion": version}],
            }
        if parts == ["api", "v1"]:
            return self._resource_list("")
        if parts == ["apis", "apps", "v1"]:
            return self._resource_list("apps")
        if parts[:2] == ["api", "v1"]:
            return self._object_path("", parts[2:], method, query, body, headers)
        if parts[:3] == ["apis", "apps", "v1"]:
            return self._object_path("apps", parts[3:], method, query, body, headers)
        raise no_such_path()

    def _version(self) -> Json:
        major, minor, *_ = self.cluster.version.lstrip("v").split(".")
        return {
            "major": major,
            "minor": minor,
            "gitVersion": self.cluster.version,
            "gitCommit": "0" * 40,
            "gitTreeState": "clean",
            "buildDate": "2024-04-16T00:00:00Z",
            "goVersion": "go1.21.9",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    def _resource_list(self, group: str) -> Json:
        resources: list[Json] = []
        for (g, _), r in RESOURCES.items():
            if g != group:
                continue
            resources.append(
                {
                    "name": r.plural,
                    "singularName": r.kind.lower(),
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": list(r.verbs),
                    "shortNames": list(r.short),
                }
            )
            for sub in r.subresources:
                entry: Json = {
                    "name": f"{r.plural}/{sub}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get"],
                }
                if sub == "scale":
                    entry.update(
                        group="autoscaling",
                        version="v1",
                        kind="Scale",
                        verbs=["get", "patch", "update"],
                    )
                if sub == "status":
                    entry["verbs"] = ["get", "patch", "update"]
                resources.append(entry)
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/v1" if group else "v1",
            "resources": resources,
        }

    def _object_path(
        self,
        group: str,
        parts: list[str],
        method: str,
        query: dict[str, str],
        body: str,
        headers: Any,
    ) -> Json | str:
        namespace = ""
        if len(parts) >= 3 and parts[0] == "namespaces":
            namespace, parts = parts[1], parts[2:]
        elif group == "" and len(parts) == 2 and parts[0] == "namespaces":
            parts = ["namespaces", parts[1]]
        if not parts or (group, parts[0]) not in RESOURCES or len(parts) > 3:
            raise no_such_path()
        resource = RESOURCES[(group, parts[0])]
        if namespace and not resource.namespaced:
            raise no_such_path()
        name = parts[1] if len(parts) > 1 else None
        sub = parts[2] if len(parts) > 2 else None
        verb = {
            "GET": "get" if name else "list",
            "PATCH": "patch",
            "PUT": "update",
            "DELETE": "delete",
        }.get(method, method.lower())
        target = namespace or (name if resource.plural == "namespaces" else "")
        if target in self.forbidden:
            where = f' in the namespace "{target}"' if target else " at the cluster scope"
            what = f"{resource.plural}/{sub}" if sub else resource.plural
            raise ApiError(
                403,
                "Forbidden",
                f'{what} is forbidden: User "{USER}" cannot {verb} resource "{what}" '
                f'in API group "{group}"{where}',
                {"kind": resource.plural, **({"name": name} if name else {})},
            )
        if resource.namespaced and not namespace and name:
            raise no_such_path()
        if sub is not None and sub not in resource.subresources:
            raise no_such_path()
        dry = query.get("dryRun", "")
        if dry not in ("", "All"):
            raise ApiError(400, "BadRequest", f'Invalid dry run value: "{dry}"')
        table = "as=Table" in headers.get("Accept", "")
        objects = self._objects
        if name is None:
            if method != "GET":
                raise not_allowed()
            return objects.list_objects(resource, namespace, query, table)
        if sub == "log":
            if method != "GET":
                raise not_allowed()
            return objects.log(namespace, name, query)
        if sub == "scale":
            return objects.scale(resource, namespace, name, method, query, body, headers)
        if method == "GET":
            obj = objects.get(resource, namespace, name)
            return objects.table(resource, [obj], {}) if table else obj
        if method == "PATCH" and "patch" in resource.verbs:
            return objects.patch(resource, namespace, name, body, headers, dry == "All")
        if method == "DELETE" and "delete" in resource.verbs:
            return objects.delete(resource, namespace, name, body, dry == "All")
        raise not_allowed()
