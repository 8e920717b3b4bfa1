"""An OTLP/HTTP trace receiver on loopback, for tests and benchmarks.

It speaks what a collector speaks on ``POST /v1/traces``: a protobuf
``ExportTraceServiceRequest`` (``opentelemetry-proto``; gzip accepted), answered with an
``ExportTraceServiceResponse``. Every span it receives is decoded into a plain
``ReceivedSpan`` (names, ids as hex, attributes as Python values, events, links, the
resource's attributes) that tests assert on. ``status`` and ``delay_s`` make it an
endpoint that refuses or is slow.

``python -m bot.emulator.otlp_receiver`` runs one as a process (it prints its port and
counts spans), so that a benchmark's CPU figures hold only the exporting side.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from bot.emulator.app_server import AppServer, StartStop

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def value_of(value: AnyValue) -> Any:
    """A protobuf ``AnyValue`` as a Python value."""
    which = value.WhichOneof("value")
    match which:
        case "string_value" | "bool_value" | "int_value" | "double_value" | "bytes_value":
            return getattr(value, which)
        case "array_value":
            return [value_of(v) for v in value.array_value.values]
        case "kvlist_value":
            return attributes_of(value.kvlist_value.values)
        case _:
            return None


def attributes_of(items: Any) -> dict[str, Any]:
    pairs: list[KeyValue] = list(items)
    return {kv.key: value_of(kv.value) for kv in pairs}


@dataclass(frozen=True, slots=True)
class ReceivedEvent:
    name: str
    attributes: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ReceivedLink:
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    kind: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[ReceivedEvent]
    links: list[ReceivedLink]
    status: str
    resource: dict[str, Any]
    scope: str
    schema_url: str

    def event(self, name: str) -> ReceivedEvent | None:
        return next((e for e in self.events if e.name == name), None)


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ``ExportTraceServiceRequest``."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=KINDS.get(span.kind, str(span.kind)),
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes=attributes_of(span.attributes),
                        events=[
                            ReceivedEvent(e.name, attributes_of(e.attributes)) for e in span.events
                        ],
                        links=[
                            ReceivedLink(
                                link.trace_id.hex(),
                                link.span_id.hex(),
                                attributes_of(link.attributes),
                            )
                            for link in span.links
                        ],
                        status=STATUS.get(span.status.code, str(span.status.code)),
                        resource=resource,
                        scope=scope_spans.scope.name,
                        schema_url=scope_spans.schema_url or resource_spans.schema_url,
                    )
                )
    return spans


@dataclass
class OtlpReceiver(StartStop):
    """``async with OtlpReceiver() as otlp:`` then export to ``otlp.endpoint``."""

    host: str = "127.0.0.1"
    port: int = 0
    status: int = 200  # what export requests get (e.g. 503: an endpoint that is down)
    delay_s: float = 0.0  # how long each answer waits (a slow endpoint)
    keep: bool = True  # False: count spans only (benchmarks)
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    span_count: int = 0
    headers: list[dict[str, str]] = field(default_factory=list)
    _server: AppServer = field(default_factory=AppServer, repr=False)
    _changed: asyncio.Condition | None = field(default=None, repr=False)
    _open: asyncio.Event | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        """What ``OTEL_EXPORTER_OTLP_ENDPOINT`` should say (the exporter adds /v1/traces)."""
        return f"http://{self.host}:{self.port}"

    async def start(self) -> Self:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._export)
        self.port = await self._server.start(app, host=self.host, port=self.port)
        self._changed = asyncio.Condition()
        self._open = asyncio.Event()
        self._open.set()
        return self

    def hold(self) -> None:
        """Answer no export request until ``release`` (an endpoint that hangs)."""
        assert self._open is not None, "not started"
        self._open.clear()

    def release(self) -> None:
        assert self._open is not None, "not started"
        self._open.set()

    async def stop(self) -> None:
        if self._open is not None:
            self._open.set()  # held requests are answered, not left hanging
        await self._server.stop()

    async def _export(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.requests += 1
        self.headers.append(dict(request.headers))
        await self._notify()
        if self._open is not None:
            await self._open.wait()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.status != 200:
            return web.Response(status=self.status, text="unavailable")
        spans = decode(body)
        self.span_count += len(spans)
        if self.keep:
            self.spans.extend(spans)
        await self._notify()
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    async def _notify(self) -> None:
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    async def wait_requests(self, count: int, *, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Wait until ``count`` export requests arrived (answered or held)."""
        assert self._changed is not None, "not started"
        changed = self._changed

        async def until() -> None:
            async with changed:
                await changed.wait_for(lambda: self.requests >= count)

        await asyncio.wait_for(until(), timeout)

    def named(self, prefix: str) -> list[ReceivedSpan]:
        """The spans whose name starts with ``prefix``, in the order received."""
        return [s for s in self.spans if s.name.startswith(prefix)]

    async def wait_for(
        self,
        predicate: Callable[[list[ReceivedSpan]], bool],
        *,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> list[ReceivedSpan]:
        """Wait until ``predicate(spans)`` holds; the spans then."""
        assert self._changed is not None, "not started"
        changed = self._changed

        async def until() -> None:
            async with changed:
                await changed.wait_for(lambda: predicate(self.spans))

        await asyncio.wait_for(until(), timeout)
        return list(self.spans)


async def _serve(port: int) -> None:
    receiver = OtlpReceiver(port=port, keep=False)
    await receiver.start()
    print(receiver.port, flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await receiver.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="An OTLP/HTTP trace receiver on loopback.")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        asyncio.run(_serve(args.port))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
