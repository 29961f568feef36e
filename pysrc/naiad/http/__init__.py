"""HTTP/REST front end: KServe v2 with Triton's extensions (binary tensors, statistics, ...)."""

from naiad.http.server import start_http_server

__all__ = ["start_http_server"]
