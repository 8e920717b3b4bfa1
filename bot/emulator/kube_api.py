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

Every request is recorded (:attr:`FakeKube.requests`) before anything else, so tests can
assert that a refused call never reached it; :attr:`FakeKube.delay` makes every answer
slow (released at once by ``stop``).

    async with FakeKube(incident_cluster(now)) as kube:
        kubeconfig = kube.kubeconfig(tmp_path / "config")
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qsl

from aiohttp import web

from bot.emulator.app_server import AppServer, StartStop
from bot.emulator.kube_fixtures import Cluster, Json, rfc3339
from bot.emulator.kube_wire import (
    CELLS,
    COLUMNS,
    OPENAPI_SERVED,
    RESOURCES,
    Resource,
    Tls,
    _name_age,
    fields_match,
    labels_match,
    merge_patch,
    openapi_v2,
    scale_of,
    self_signed,
)

DEFAULT_TOKEN = "opsloop-test-token"
GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # what strconv.ParseBool takes
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


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Json | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> Json:
        out: Json = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            out["details"] = self.details
        return out


def _not_found(resource: Resource, name: str) -> ApiError:
    group = f".{resource.group}" if resource.group else ""
    return ApiError(
        404,
        "NotFound",
        f'{resource.plural}{group} "{name}" not found',
        {
            "name": name,
            "kind": resource.plural,
            **({"group": resource.group} if resource.group else {}),
        },
    )


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
        self._rv = 1000
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
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

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
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        resource = RESOURCES[(group, parts[0])]
        if namespace and not resource.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
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
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub is not None and sub not in resource.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        dry = query.get("dryRun", "")
        if dry not in ("", "All"):
            raise ApiError(400, "BadRequest", f'Invalid dry run value: "{dry}"')
        table = "as=Table" in headers.get("Accept", "")
        if name is None:
            if method != "GET":
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                )
            return self._list(resource, namespace, query, table)
        if sub == "log":
            if method != "GET":
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                )
            return self._log(namespace, name, query)
        if sub == "scale":
            return self._scale(resource, namespace, name, method, query, body, headers)
        if method == "GET":
            obj = self._get(resource, namespace, name)
            return self._table(resource, [obj], {}) if table else obj
        if method == "PATCH" and "patch" in resource.verbs:
            return self._patch(resource, namespace, name, body, headers, dry == "All")
        if method == "DELETE" and "delete" in resource.verbs:
            return self._delete(resource, namespace, name, body, dry == "All")
        raise ApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    def _get(self, resource: Resource, namespace: str, name: str) -> Json:
        obj = self.cluster.get(resource.plural, namespace, name)
        if obj is None:
            raise _not_found(resource, name)
        return obj

    def _list(
        self, resource: Resource, namespace: str, query: dict[str, str], table: bool
    ) -> Json | str:
        chosen = [
            obj
            for (ns, _), obj in sorted(self.cluster.objects.get(resource.plural, {}).items())
            if (not namespace or ns == namespace)
            and labels_match(query.get("labelSelector", ""), obj)
            and fields_match(query.get("fieldSelector", ""), obj)
        ]
        start = int(query["continue"]) if query.get("continue", "").isdigit() else 0
        limit = (
            int(query["limit"])
            if query.get("limit", "").isdigit() and int(query["limit"]) > 0
            else 0
        )
        page = chosen[start : start + limit] if limit else chosen[start:]
        meta: Json = {"resourceVersion": str(self._rv)}
        if limit and start + limit < len(chosen):
            meta["continue"] = str(start + limit)
            meta["remainingItemCount"] = len(chosen) - start - limit
        if table:
            return self._table(resource, page, meta)
        items = [{k: v for k, v in obj.items() if k not in ("kind", "apiVersion")} for obj in page]
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.group_version,
            "metadata": meta,
            "items": items,
        }

    def _bump(self, obj: Json) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    def _patch(
        self, resource: Resource, namespace: str, name: str, body: str, headers: Any, dry: bool
    ) -> Json:
        obj = self._get(resource, namespace, name)
        patched = merge_patch(obj, self._patch_body(body, headers))
        if patched.get("spec") != obj.get("spec"):
            patched["metadata"]["generation"] = int(obj["metadata"].get("generation", 1)) + 1
        if patched["metadata"].get("name") != name:
            raise ApiError(
                422,
                "Invalid",
                f'{resource.kind} "{name}" is invalid: metadata.name: Invalid value: '
                "field is immutable",
            )
        if not dry:
            self._bump(patched)
            self.cluster.add(resource.plural, patched)
        return patched

    def _patch_body(self, body: str, headers: Any) -> Json:
        kind = headers.get("Content-Type", "").split(";")[0].strip()
        if kind not in (
            "application/strategic-merge-patch+json",
            "application/merge-patch+json",
            "application/json",
        ):
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                "include: application/strategic-merge-patch+json, "
                f'application/merge-patch+json (got "{kind}")',
            )
        try:
            patch = json.loads(body)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"error decoding patch: {exc}") from None
        if not isinstance(patch, dict):
            raise ApiError(400, "BadRequest", "error decoding patch: not a JSON object")
        return patch

    def _scale(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        method: str,
        query: dict[str, str],
        body: str,
        headers: Any,
    ) -> Json:
        obj = self._get(resource, namespace, name)
        if method == "GET":
            return scale_of(obj)
        if method == "PATCH":
            wanted = merge_patch(scale_of(obj), self._patch_body(body, headers))
        elif method == "PUT":
            try:
                wanted = json.loads(body)
            except ValueError as exc:
                raise ApiError(400, "BadRequest", f"error decoding Scale: {exc}") from None
        else:
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        replicas = (wanted.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ApiError(
                422,
                "Invalid",
                f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: '
                f"{json.dumps(replicas)}: must be greater than or equal to 0",
            )
        if query.get("dryRun") != "All":
            obj["spec"]["replicas"] = replicas
            obj["metadata"]["generation"] = int(obj["metadata"].get("generation", 1)) + 1
            self._bump(obj)
        out = scale_of(obj)
        out["spec"]["replicas"] = replicas
        return out

    def _delete(self, resource: Resource, namespace: str, name: str, body: str, dry: bool) -> Json:
        obj = self._get(resource, namespace, name)
        options: Json = {}
        if body.strip():
            try:
                options = json.loads(body)
            except ValueError as exc:
                raise ApiError(400, "BadRequest", f"error decoding DeleteOptions: {exc}") from None
        dry = dry or "All" in (options.get("dryRun") or [])
        grace = options.get("gracePeriodSeconds")
        if not isinstance(grace, int):
            grace = int(obj.get("spec", {}).get("terminationGracePeriodSeconds", 30))
        answer = copy.deepcopy(obj)
        answer["metadata"]["deletionTimestamp"] = rfc3339(self.clock() + timedelta(seconds=grace))
        answer["metadata"]["deletionGracePeriodSeconds"] = grace
        if not dry:
            del self.cluster.objects[resource.plural][(namespace, name)]
            self._bump(answer)
        return answer

    def _log(self, namespace: str, name: str, query: dict[str, str]) -> str:
        pod = self._get(RESOURCES[("", "pods")], namespace, name)
        names = [c["name"] for c in pod["spec"].get("containers", [])]
        container = query.get("container") or (names[0] if len(names) == 1 else "")
        if not container:
            raise ApiError(
                400,
                "BadRequest",
                f"a container name must be specified for pod {name}, "
                f"choose one of: [{' '.join(names)}]",
            )
        if container not in names:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        previous = query.get("previous") in GO_TRUE
        status = next(
            (
                s
                for s in pod.get("status", {}).get("containerStatuses", [])
                if s.get("name") == container
            ),
            None,
        )
        key = (namespace, name, container, previous)
        if previous and key not in self.cluster.logs:
            raise ApiError(
                400,
                "BadRequest",
                f'previous terminated container "{container}" in pod "{name}" not found',
            )
        if not previous and key not in self.cluster.logs:
            waiting = (status or {}).get("state", {}).get("waiting")
            if status is None or waiting:
                reason = (waiting or {}).get("reason", "ContainerCreating")
                raise ApiError(
                    400,
                    "BadRequest",
                    f'container "{container}" in pod "{name}" is waiting to start: {reason}',
                )
        text = self.cluster.logs.get(key, f"{name} {container}: GET /healthz 200\n" * 3)
        lines = text.splitlines()
        tail = query.get("tailLines", "")
        if tail.isdigit():
            lines = lines[-int(tail) :] if int(tail) else []
        out = "".join(line + "\n" for line in lines)
        limit = query.get("limitBytes", "")
        if limit.isdigit():
            out = out.encode()[: int(limit)].decode("utf-8", "ignore")
        return out

    # -- server-side printing ----------------------------------------------------------

    def _table(self, resource: Resource, objs: list[Json], meta: Json) -> Json:
        columns = COLUMNS.get(resource.plural, [("Name", 0), ("Age", 0)])
        definitions = [
            {
                "name": title,
                "type": "integer" if title in ("Restarts", "Up-to-date", "Available") else "string",
                "format": "name" if title == "Name" else "",
                "description": title,
                "priority": priority,
            }
            for title, priority in columns
        ]
        now = self.clock()
        rows = []
        for obj in objs:
            cells = CELLS.get(resource.plural, _name_age)(obj, now)
            partial = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
            rows.append({"cells": cells, "object": partial})
        return {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": meta,
            "columnDefinitions": definitions,
            "rows": rows,
        }
