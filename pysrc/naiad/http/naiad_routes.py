"""Naiad's own endpoints under /v2/naiad (not part of Triton's protocol)."""

from __future__ import annotations

from naiad.http.routes import HttpRequest, Reply, Router, error_reply, json_reply


def register_naiad_routes(router: Router, manager) -> None:
    def handle(request: HttpRequest, parts: list) -> Reply:
        # /v2/naiad/arena: the shared-memory arena's use, to spot leaks.
        if len(parts) == 4 and parts[3] == "arena":
            if request.method != "GET":
                return error_reply(405, "Method Not Allowed")
            return json_reply(manager.arena_stats())
        return error_reply(404, "Not Found")

    router.register("naiad", handle)
