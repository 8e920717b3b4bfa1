"""The Helm chart as its tests see it: Helm itself, the values files, rendered manifests and
their validation against Kubernetes' own schemas, offline.

* :data:`HELM` is ``.opsloop/bin/helm`` (``scripts/helm`` fetches Helm 3.17 there); the tests
  skip, saying so, when it is missing.
* :func:`render` runs ``helm template`` once for a values file (``None``: the chart's
  defaults) and returns the manifests as dicts; :func:`helm` runs any helm command.
* :func:`validate` checks one manifest against a Kubernetes version's schema with
  ``kubernetes_validate`` in strict mode (an unknown field is an error), with the schema
  files cached: the library reads its 2 MB definitions file on every call otherwise.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]  # no stubs, no py.typed
import pytest
import yaml
from kubernetes_validate import utils as kv_utils

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "opsloop"
HELM = REPO / ".opsloop" / "bin" / "helm"
VALUES = Path(__file__).resolve().parent / "values"
RELEASE = "ops"
NAMESPACE = "opsloop"
KUBERNETES_VERSIONS = ("1.29", "1.30", "1.31", "1.32", "1.33")
# Custom resources kubernetes_validate has no schema for; checked by hand in the tests.
CUSTOM = frozenset(
    {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
)
HELM_TIMEOUT_S = 60

Manifest = dict[str, Any]
# What validate raises for a manifest that does not fit (its ``caught``: jsonschema's error).
ValidationError: Any = kubernetes_validate.ValidationError

needs_helm = pytest.mark.skipif(
    not HELM.exists(),
    reason=f"{HELM.relative_to(REPO)} is missing: scripts/helm (make setup runs it) fetches Helm",
)


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    """``helm ARGS`` with the chart's path at hand; never raises on a non-zero exit."""
    return subprocess.run(
        [str(HELM), *args],
        capture_output=True,
        text=True,
        timeout=HELM_TIMEOUT_S,
        check=False,
    )


def values_args(values: Path | None, *sets: str) -> list[str]:
    args = ["--values", str(values)] if values is not None else []
    for setting in sets:
        args += ["--set", setting]
    return args


def render(values: Path | None, *sets: str) -> list[Manifest]:
    """``helm template`` of the chart with ``values`` (and ``--set`` ``sets``)."""
    done = helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *values_args(values, *sets)
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def only(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def one(manifests: list[Manifest], kind: str) -> Manifest:
    found = only(manifests, kind)
    assert len(found) == 1, f"{len(found)} {kind} rendered, expected 1"
    return found[0]


@contextmanager
def cached_schemas() -> Iterator[None]:
    """``kubernetes_validate`` reading each schema file once while inside."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            kv_utils, "schema_contents", functools.lru_cache(maxsize=None)(kv_utils.schema_contents)
        )
        yield


def validate(manifest: Mapping[str, Any], version: str) -> None:
    """``kubernetes_validate.ValidationError`` when ``manifest`` does not fit ``version``'s
    schema (strict: unknown fields too); ``SchemaNotFoundError`` for a kind it lacks."""
    kubernetes_validate.validate(dict(manifest), version, strict=True)
