"""Kubernetes API access for the ``kubernetes`` pack: credentials, namespaces, errors.

Credentials are found as kubectl finds them, with kubernetes_asyncio's own loaders:

1. in-cluster (the pod's service account) when ``KUBERNETES_SERVICE_HOST`` is set, its
   token file exists, and neither ``OPSLOOP_K8S_CONTEXT`` nor ``KUBECONFIG`` says otherwise;
2. else the kubeconfig files of ``KUBECONFIG`` (``:``-separated, merged as kubectl does) or
   ``~/.kube/config``, in context ``OPSLOOP_K8S_CONTEXT`` or the current one: client
   certificates, tokens, token files, exec plugins (an expiring exec credential is fetched
   again when it runs out).

Credentials load lazily, at the first call (exec plugins are async), bounded by
``CONFIG_TIMEOUT_S``; certificate data goes to a private temporary directory
(:func:`private_dir`). ``OPSLOOP_K8S_NAMESPACES`` (:class:`Namespaces`) is checked before any
request.

Which files and variables are read is kubectl's contract, so ``KUBECONFIG``, ``HOME`` and
``KUBERNETES_SERVICE_*`` come from the process environment at that first call (or from the
``environ`` a test passes), not from ``bot.settings``.

:meth:`Kube.raw` (and :meth:`Kube.call`, which parses its JSON) is the one boundary where
transport and API failures become a ``ToolError`` in words (unreachable, slow, 401, 403,
404, 409, 422, 5xx): every request is bounded (connect ``CONNECT_TIMEOUT_S``, total
``REQUEST_TIMEOUT_S``) and every answer by size. Answers are read raw
(``_preload_content=False``) and parsed as plain JSON here: the text tools summarise
untrusted dicts (``tools.packs.k8s_objects``), never the library's models (a JSON log
line would come back as a Python repr through them).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio.client import ApiClient, AppsV1Api, Configuration, CoreV1Api, VersionApi
from kubernetes_asyncio.config import ConfigException
from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader
from kubernetes_asyncio.config.kube_config import KubeConfigLoader, KubeConfigMerger

from bot.errors import ToolError
from tools.http_client import read_bounded

CONNECT_TIMEOUT_S = 3.0
REQUEST_TIMEOUT_S = 10.0  # per request, connect to last byte
CONFIG_TIMEOUT_S = 10.0  # loading credentials, an exec plugin included
MAX_BODY_BYTES = 16_000_000
MESSAGE_CHARS = 300  # of an error message the API server gives

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CONTEXT_VARIABLE = "OPSLOOP_K8S_CONTEXT"
NAMESPACES_VARIABLE = "OPSLOOP_K8S_NAMESPACES"

Json = dict[str, Any]


class Namespaces:
    """``OPSLOOP_K8S_NAMESPACES``: the namespaces the bot may touch (empty: all)."""

    def __init__(self, allowed: Sequence[str]) -> None:
        self.allowed = tuple(dict.fromkeys(n.strip() for n in allowed if n.strip()))

    @property
    def restricted(self) -> bool:
        return bool(self.allowed)

    def check(self, namespace: str) -> None:
        """``ToolError`` for a namespace outside the list, before any request is made."""
        if self.allowed and namespace not in self.allowed:
            raise ToolError(
                f"namespace {namespace!r} is not one the bot may touch "
                f"({NAMESPACES_VARIABLE}: {', '.join(self.allowed)})"
            )

    def shown(self) -> str:
        return ",".join(self.allowed) if self.allowed else "all"


@dataclass(frozen=True, slots=True)
class Target:
    """Where the credentials came from and the server they point at (no secrets)."""

    source: str  # "context kind-prod" or "in-cluster service account"
    server: str


@dataclass(frozen=True, slots=True)
class Loaded:
    client: ApiClient
    target: Target


class Kube:
    """One lazily built ``ApiClient`` and the bounded, translated calls over it."""

    def __init__(
        self,
        *,
        context: str | None = None,
        namespaces: Sequence[str] = (),
        environ: Mapping[str, str] | None = None,
        service_account_dir: str = SERVICE_ACCOUNT_DIR,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        request_timeout: float = REQUEST_TIMEOUT_S,
        config_timeout: float = CONFIG_TIMEOUT_S,
        max_body: int = MAX_BODY_BYTES,
    ) -> None:
        self.context = context or None
        self.namespaces = Namespaces(namespaces)
        # Read when the first call loads credentials, as kubectl reads them when it runs.
        self._environ = environ
        self._sa_dir = service_account_dir
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.config_timeout = config_timeout
        self.max_body = max_body
        self._loaded: Loaded | None = None
        self._lock = asyncio.Lock()

    # -- credentials ---------------------------------------------------------------

    async def loaded(self) -> Loaded:
        """The client, loading credentials on first use (bounded by ``config_timeout``)."""
        if self._loaded is not None:
            return self._loaded
        async with self._lock:
            if self._loaded is None:
                try:
                    async with asyncio.timeout(self.config_timeout):
                        self._loaded = await self._load()
                except TimeoutError:
                    raise ToolError(
                        f"loading Kubernetes credentials took longer than "
                        f"{self.config_timeout:g}s (a slow exec plugin?)"
                    ) from None
            return self._loaded

    async def _load(self) -> Loaded:
        environ = os.environ if self._environ is None else self._environ
        configuration = Configuration()
        configuration.client_side_validation = False  # answers are untrusted anyway
        token = Path(self._sa_dir) / "token"
        if (
            self.context is None
            and not environ.get("KUBECONFIG")
            and environ.get("KUBERNETES_SERVICE_HOST")
            and token.is_file()
        ):
            try:
                InClusterConfigLoader(
                    token_filename=str(token),
                    cert_filename=str(Path(self._sa_dir) / "ca.crt"),
                    environ=dict(environ),
                ).load_and_set(configuration)
            except (ConfigException, OSError) as exc:
                raise ToolError(f"in-cluster Kubernetes credentials: {exc}") from None
            target = Target("in-cluster service account", str(configuration.host))
        else:
            target = await self._load_kubeconfig(environ, configuration)
        return Loaded(ApiClient(configuration=configuration), target)

    async def _load_kubeconfig(self, environ: Mapping[str, str], configuration: Any) -> Target:
        listed, paths = kubeconfig_paths(environ)
        if not paths:
            raise ToolError(
                "no Kubernetes credentials: not running in a cluster, and no kubeconfig at "
                f"{listed} (set KUBECONFIG)"
            )
        try:
            merger = KubeConfigMerger(os.pathsep.join(paths))
            loader = KubeConfigLoader(
                config_dict=merger.config,
                active_context=self.context,
                config_base_path=None,
                temp_file_path=private_dir(),
            )
            await loader.load_and_set(configuration)
        except (ConfigException, KeyError, TypeError, ValueError, OSError) as exc:
            raise ToolError(self._kubeconfig_error(exc, context_names(paths))) from None
        except Exception as exc:  # yaml errors, an exec plugin that failed
            raise ToolError(f"kubeconfig {listed}: {type(exc).__name__}: {exc}") from None
        if hasattr(loader, "exec_plugin_expiry"):
            # An expiring exec credential: fetch it again when it runs out (the loader
            # keeps the current one until then; kubernetes_asyncio awaits this hook).
            async def refresh(config: Any) -> None:
                await loader.load_from_exec_plugin()
                config.api_key["BearerToken"] = loader.token

            configuration.refresh_api_key_hook = refresh
        context = (loader.current_context or {}).get("name") or self.context or "?"
        return Target(f"context {context}", str(configuration.host))

    def _kubeconfig_error(self, exc: BaseException, contexts: list[str]) -> str:
        text = str(exc) or type(exc).__name__
        if self.context is not None and self.context not in contexts:
            known = ", ".join(contexts) or "none"
            return (
                f"{CONTEXT_VARIABLE}: no context {self.context!r} in the kubeconfig "
                f"(known: {known})"
            )
        if self.context is None and "current-context" in text:
            return f"kubeconfig has no current-context; set {CONTEXT_VARIABLE}"
        return f"kubeconfig: {text}"

    async def aclose(self) -> None:
        loaded, self._loaded = self._loaded, None
        if loaded is not None:
            await loaded.client.close()

    # -- calls ---------------------------------------------------------------------

    def _timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(
            total=self.request_timeout,
            connect=self.connect_timeout,
            sock_connect=self.connect_timeout,
        )

    async def core(self) -> CoreV1Api:
        return CoreV1Api((await self.loaded()).client)

    async def apps(self) -> AppsV1Api:
        return AppsV1Api((await self.loaded()).client)

    async def version(self) -> VersionApi:
        return VersionApi((await self.loaded()).client)

    async def raw(
        self, what: str, request: Callable[..., Awaitable[Any]], *args: Any, **kw: Any
    ) -> bytes:
        """The body of one API request, ``request(*args, **kw)`` being a kubernetes_asyncio
        method; ``what`` names it in errors (``list pods in web``)."""
        loaded = await self.loaded()
        where = f"the Kubernetes API at {loaded.target.server}"
        try:
            async with asyncio.timeout(self.request_timeout):
                response = await request(
                    *args, _preload_content=False, _request_timeout=self._timeout(), **kw
                )
                try:
                    body, cut = await read_bounded(
                        response.content.iter_chunked(65536), self.max_body
                    )
                    if cut:
                        raise ToolError(
                            f"the answer to {what} is larger than {self.max_body / 1e6:g} MB; "
                            "narrow it (a namespace, a name or a selector)"
                        )
                finally:
                    response.release()
        except TimeoutError:
            raise ToolError(
                f"{where} did not answer {what} within {self.request_timeout:g}s"
            ) from None
        except aiohttp.ClientConnectorCertificateError as exc:
            raise ToolError(f"{where}: TLS verification failed ({exc.certificate_error})") from None
        except aiohttp.ClientSSLError as exc:
            raise ToolError(f"{where}: TLS failed ({_reason(exc)})") from None
        except aiohttp.ClientConnectorError as exc:
            raise ToolError(f"{where} is unreachable: {_reason(exc)}") from None
        except aiohttp.ClientError as exc:
            raise ToolError(f"{where} failed during {what}: {_reason(exc)}") from None
        status = int(response.status)
        if status >= 300:
            raise ToolError(status_error(status, body, what, loaded.target))
        return body

    async def call(
        self, what: str, request: Callable[..., Awaitable[Any]], *args: Any, **kw: Any
    ) -> Json:
        """:meth:`raw`, parsed: a JSON object or ``ToolError``."""
        body = await self.raw(what, request, *args, **kw)
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise ToolError(f"the Kubernetes API answered {what} with something that is not JSON")
        return parsed


_PRIVATE: list[str] = []


def private_dir() -> str:
    """One directory (mode 0700) for the certificate and key files kubernetes_asyncio
    writes from kubeconfig ``*-data`` fields. The library caches those files by content
    for the whole process and removes them at exit, so they are shared, never removed
    by one client while another may use them."""
    if not _PRIVATE:
        _PRIVATE.append(tempfile.mkdtemp(prefix="opsloop-k8s-"))
    return _PRIVATE[0]


def kubeconfig_paths(environ: Mapping[str, str]) -> tuple[str, list[str]]:
    """What kubectl would read: ``KUBECONFIG``'s files or ``~/.kube/config``; the
    setting as written, and the files of it that exist."""
    home = environ.get("HOME") or str(Path.home())
    listed = environ.get("KUBECONFIG") or str(Path(home) / ".kube" / "config")
    paths = [p for p in listed.split(os.pathsep) if p and Path(p).expanduser().is_file()]
    return listed, paths


def context_names(paths: Sequence[str]) -> list[str]:
    """The context names the kubeconfig files define (best effort, for error messages)."""
    names: list[str] = []
    for path in paths:
        try:
            data = yaml.safe_load(Path(path).expanduser().read_text())
        except (OSError, yaml.YAMLError):
            continue
        for entry in (data or {}).get("contexts") or () if isinstance(data, dict) else ():
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                names.append(entry["name"])
    return names


def status_error(status: int, body: bytes, what: str, target: Target) -> str:
    """An API error in words: the server's Status message (clipped), with what to do."""
    message = ""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        message = str(parsed.get("message") or parsed.get("reason") or "")
    else:
        message = body.decode("utf-8", "replace")
    message = " ".join("".join(ch if ch.isprintable() else " " for ch in message).split())
    if len(message) > MESSAGE_CHARS:
        message = message[: MESSAGE_CHARS - 1] + "…"
    if status == 401:
        return (
            f"the Kubernetes API at {target.server} refused the credentials of {target.source} "
            "(401 Unauthorized): the token or client certificate is wrong or expired"
        )
    if status == 403:
        return (
            f"forbidden (403) to {what}: {message or 'no reason given'}. The bot's Kubernetes "
            "account lacks that permission (RBAC)"
        )
    if status == 404:
        return f"not found (404): {message or what}"
    if status == 409:
        return f"conflict (409) during {what}: {message}; read it again and retry"
    if status == 422:
        return f"the API server refused {what} as invalid (422): {message}"
    if status == 429:
        return f"the API server is throttling requests (429) for {what}: {message}"
    if status >= 500:
        return f"the API server failed {what} (HTTP {status}): {message or 'no message'}"
    return f"the API server refused {what} (HTTP {status}): {message or 'no message'}"


def _reason(exc: BaseException) -> str:
    """Why a connection failed, from the OS error at the bottom of aiohttp's chain."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, ssl.SSLError):
            return seen.reason or str(seen)
        os_error = getattr(seen, "os_error", None)
        if isinstance(os_error, OSError) and os_error is not seen:
            seen = os_error
            continue
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror[:1].lower() + seen.strerror[1:]
        seen = seen.__cause__ or seen.__context__
    return str(exc) or type(exc).__name__
