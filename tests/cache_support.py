"""What the response cache's black-box tests read from a server: a model's statistics
(the figures the cache changes) and the metrics page. Used by
tests/grpc_clients/test_response_cache.py (local cache) and tests/test_redis_cache.py."""

from __future__ import annotations

import requests

TIMEOUT = 20


def stats(server, model: str) -> dict:
    reply = requests.get(f"{server.url}/v2/models/{model}/stats", timeout=TIMEOUT)
    entry = reply.json()["model_stats"][0]
    s = entry["inference_stats"]
    return {
        "inference_count": entry["inference_count"],
        "execution_count": entry["execution_count"],
        "success": s["success"]["count"],
        "queue": s["queue"]["count"],
        "hit": s["cache_hit"]["count"],
        "miss": s["cache_miss"]["count"],
        "hit_ns": s["cache_hit"]["ns"],
        "miss_ns": s["cache_miss"]["ns"],
        "success_ns": s["success"]["ns"],
    }


def metrics(server) -> str:
    return requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=TIMEOUT).text
