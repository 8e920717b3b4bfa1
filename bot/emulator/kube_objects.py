"""What the fake Kubernetes API server does to a cluster's objects, and its errors.

:class:`ClusterObjects` holds the verbs ``bot.emulator.kube_api`` routes to: get and list
(``labelSelector``, ``fieldSelector``, ``limit``/``continue``, server-side ``Table``
printing), ``PATCH`` (strategic-merge and merge patches) and the ``scale`` subresource
(also ``PUT``), ``DELETE`` of pods (``dryRun=All`` in the query or the ``DeleteOptions``
body: answered, nothing changed), and a pod's ``log`` with ``container``, ``previous``,
``tailLines`` and ``limitBytes``. Each change bumps the resource version. What goes wrong
is an :class:`ApiError`, answered as the API server's ``Status`` with its code and reason
(400, 404, 405, 415, 422).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from bot.emulator.kube_fixtures import Cluster, Json, rfc3339
from bot.emulator.kube_wire import (
    CELLS,
    COLUMNS,
    RESOURCES,
    Resource,
    _name_age,
    fields_match,
    labels_match,
    merge_patch,
    scale_of,
)

GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # what strconv.ParseBool takes
FIRST_RESOURCE_VERSION = 1000


class ApiError(Exception):
    """A request the API server refuses: answered as a ``Status`` object."""

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


def not_found(resource: Resource, name: str) -> ApiError:
    """The 404 of a named object that does not exist."""
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


def no_such_path() -> ApiError:
    """The 404 of a path the server does not serve."""
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def not_allowed() -> ApiError:
    """The 405 of a method the resource (or subresource) does not take."""
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


class ClusterObjects:
    """The verbs on ``cluster``'s objects; ``clock`` dates deletions and Table ages."""

    def __init__(self, cluster: Cluster, clock: Callable[[], datetime]) -> None:
        self.cluster = cluster
        self.clock = clock
        self._rv = FIRST_RESOURCE_VERSION

    def get(self, resource: Resource, namespace: str, name: str) -> Json:
        obj = self.cluster.get(resource.plural, namespace, name)
        if obj is None:
            raise not_found(resource, name)
        return obj

    def list_objects(
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
            return self.table(resource, page, meta)
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

    def patch(
        self, resource: Resource, namespace: str, name: str, body: str, headers: Any, dry: bool
    ) -> Json:
        obj = self.get(resource, namespace, name)
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

    def scale(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        method: str,
        query: dict[str, str],
        body: str,
        headers: Any,
    ) -> Json:
        obj = self.get(resource, namespace, name)
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
            raise not_allowed()
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

    def delete(self, resource: Resource, namespace: str, name: str, body: str, dry: bool) -> Json:
        obj = self.get(resource, namespace, name)
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

    def log(self, namespace: str, name: str, query: dict[str, str]) -> str:
        pod = self.get(RESOURCES[("", "pods")], namespace, name)
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

    # ---- server-side printing ----------------------------------------------------------

    def table(self, resource: Resource, objs: list[Json], meta: Json) -> Json:
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
