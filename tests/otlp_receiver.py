"""A test OTLP/HTTP trace receiver: collects the spans POSTed to /v1/traces (protobuf,
decoded with opentelemetry-proto) on a free port of 127.0.0.1, in a thread."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class OtlpReceiver:
    def __init__(self):
        self.requests: list[ExportTraceServiceRequest] = []
        self.content_types: list[str] = []
        self.json_bodies: list[bytes] = []  # OTLP/JSON (Triton's own exporter sends it)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.content_types.append(self.headers.get("Content-Type", ""))
                if "json" in self.headers.get("Content-Type", ""):
                    receiver.json_bodies.append(body)
                else:
                    message = ExportTraceServiceRequest()
                    message.ParseFromString(body)
                    receiver.requests.append(message)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def spans(self) -> list:
        """(resource attributes, scope name, span) of every span received so far."""
        out = []
        for message in self.requests:
            for resource_spans in message.resource_spans:
                resource = {a.key: a.value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        out.append((resource, scope_spans.scope.name, span))
        return out

    def wait_for(self, count: int, timeout: float = 30.0) -> list:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.spans()) < count:
            time.sleep(0.1)
        return self.spans()

    # Spans as plain records, the same from either encoding: {"id", "trace", "parent"
    # (bytes ids; b"" for a root), "name", "start" (ns), "attributes" (key -> value),
    # "events" (names)}.
    def span_records(self) -> list:
        """The protobuf spans received (Naiad's exporter sends OTLP/protobuf)."""
        out = []
        for _resource, _scope, span in self.spans():
            attributes = {}
            for a in span.attributes:
                kind = a.value.WhichOneof("value")
                attributes[a.key] = getattr(a.value, kind)
            out.append(
                {
                    "id": span.span_id,
                    "trace": span.trace_id,
                    "parent": span.parent_span_id,
                    "name": span.name,
                    "start": span.start_time_unix_nano,
                    "attributes": attributes,
                    "events": [e.name for e in span.events],
                }
            )
        return out

    def json_span_records(self) -> list:
        """The OTLP/JSON spans received (Triton's exporter: ids in hex, ints as strings)."""
        out = []
        for body in self.json_bodies:
            for resource_spans in json.loads(body)["resourceSpans"]:
                for scope_spans in resource_spans["scopeSpans"]:
                    for span in scope_spans["spans"]:
                        attributes = {}
                        for a in span.get("attributes", []):
                            ((kind, value),) = a["value"].items()
                            attributes[a["key"]] = int(value) if kind == "intValue" else value
                        out.append(
                            {
                                "id": bytes.fromhex(span["spanId"]),
                                "trace": bytes.fromhex(span["traceId"]),
                                "parent": bytes.fromhex(span.get("parentSpanId") or ""),
                                "name": span["name"],
                                "start": int(span["startTimeUnixNano"]),
                                "attributes": attributes,
                                "events": [e["name"] for e in span.get("events", [])],
                            }
                        )
        return out
