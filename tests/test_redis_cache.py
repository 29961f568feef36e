"""The Redis response cache (`--cache-config redis,host=...,port=...`), black-box against
real `naiad serve` processes and a real `redis-server` the tests start: two servers
sharing one Redis (one's miss is the other's hit, with the right outputs), statistics and
nv_cache_* metrics as the local cache counts them, AUTH with the right and a wrong
password (from the settings and from Triton's TRITONCACHE_REDIS_* variables), the flags Triton's redis cache takes and those refused, and Redis stalled,
killed and restarted under load: every request is answered (uncached, counted as a miss)
and hits come back once Redis does. RESP and the client's timeouts: tests/csrc/test_resp.cc.
"""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import cache_support
import numpy as np
import pytest
import tritonclient.http as httpclient
from cache_support import metrics
from redis_support import RedisServer, redis_binary, redis_call
from server_harness import EXAMPLE_MODELS, NaiadServer, ServerExited, make_repository, metric_value
from tls_support import make_certs

TIMEOUT = 20
MODEL = "add_sub_cache"


@pytest.fixture(scope="module", autouse=True)
def _redis_installed():
    if redis_binary() is None:
        pytest.fail(
            "`redis-server` is not installed: `make deploy-tools` installs Debian's package "
            "(make test runs it)"
        )


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    repository = make_repository(
        tmp_path_factory.mktemp("redis_repo"), {MODEL: EXAMPLE_MODELS / "add_sub"}
    )
    config = repository / MODEL / "config.pbtxt"
    text = config.read_text().replace('name: "add_sub"', f'name: "{MODEL}"')
    config.write_text(text + "\nresponse_cache { enable: true }\n")
    return repository


def redis_flags(redis: RedisServer, *extra: str) -> list[str]:
    flags = ["--cache-config", "redis,host=127.0.0.1", "--cache-config", f"redis,port={redis.port}"]
    for setting in extra:
        flags += ["--cache-config", f"redis,{setting}"]
    return flags


def refused_start(repository, log_dir, flags: list[str], name: str) -> str:
    """The stderr of a server `flags` keep from starting."""
    server = NaiadServer(repository, log_dir=log_dir, extra_args=flags, name=name)
    with pytest.raises(ServerExited):
        server.start()
    return server.stderr_text()


def inputs(base: float):
    a = (np.arange(16, dtype=np.float32) + base).reshape(1, 16)
    b = np.full((1, 16), 2, dtype=np.float32)
    tensors = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        tensor = httpclient.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    return tensors, a + b, a - b


def infer(server, base: float) -> None:
    """One request, its outputs checked."""
    client = httpclient.InferenceServerClient(
        f"127.0.0.1:{server.http_port}", network_timeout=TIMEOUT, connection_timeout=TIMEOUT
    )
    try:
        tensors, total, difference = inputs(base)
        reply = client.infer(MODEL, tensors)
        np.testing.assert_array_equal(reply.as_numpy("OUTPUT0"), total)
        np.testing.assert_array_equal(reply.as_numpy("OUTPUT1"), difference)
    finally:
        client.close()


def stats(server) -> dict:
    return cache_support.stats(server, MODEL)


@pytest.fixture(scope="module")
def shared(repository, tmp_path_factory):
    """One Redis and two servers using it (one with the C++ lanes, one the general path)."""
    log_dir = tmp_path_factory.mktemp("redis_shared")
    with RedisServer(log_dir) as redis:
        flags = redis_flags(redis)
        with NaiadServer(repository, log_dir=log_dir, extra_args=flags, name="a") as a:
            extra = [*flags, "--fast-lane=false"]
            with NaiadServer(repository, log_dir=log_dir, extra_args=extra, name="b") as b:
                yield redis, a, b


def test_one_servers_miss_is_the_others_hit(shared):
    redis, a, b = shared
    before_a, before_b = stats(a), stats(b)
    infer(a, 100.0)  # a miss on a: computed, kept in Redis
    after_a = stats(a)
    assert after_a["miss"] == before_a["miss"] + 1
    assert after_a["execution_count"] == before_a["execution_count"] + 1
    infer(b, 100.0)  # b never saw it: a hit, not executed
    infer(a, 100.0)  # and a hit on a too
    after_b = stats(b)
    assert after_b["hit"] == before_b["hit"] + 1 and after_b["miss"] == before_b["miss"]
    assert after_b["execution_count"] == before_b["execution_count"]
    assert after_b["success"] == before_b["success"] + 1
    assert stats(a)["hit"] == before_a["hit"] + 1
    # Other inputs are another key: a miss on b.
    infer(b, 101.0)
    assert stats(b)["miss"] == after_b["miss"] + 1
    # The entries are in Redis, under the cache's prefix.
    keys = redis_call(redis.port, b"KEYS", b"naiad:response:*")
    assert keys.startswith(b"*2\r\n"), keys


def test_statistics_and_metrics_count_as_the_local_cache(shared):
    _, a, _ = shared
    infer(a, 200.0)
    infer(a, 200.0)
    s = stats(a)
    page = metrics(a)
    labels = f'{{model="{MODEL}",version="1"}}'
    assert s["hit"] >= 1 and s["miss"] >= 1 and s["hit_ns"] > 0 and s["miss_ns"] > 0
    assert metric_value(page, f"nv_cache_num_hits_per_model{labels}") == s["hit"]
    assert metric_value(page, f"nv_cache_num_misses_per_model{labels}") == s["miss"]
    assert metric_value(page, f"nv_cache_hit_duration_per_model{labels}") == s["hit_ns"] // 1000
    assert metric_value(page, f"nv_cache_miss_duration_per_model{labels}") == s["miss_ns"] // 1000
    assert metric_value(page, "nv_cache_num_lookups") == s["hit"] + s["miss"]
    assert metric_value(page, "nv_cache_num_hits") == s["hit"]
    assert metric_value(page, "nv_cache_num_misses") == s["miss"]
    # Size, entries and evictions are Redis's own: not reported as the local cache's.
    for gauge in ("nv_cache_util", "nv_cache_num_entries", "nv_cache_num_evictions"):
        assert f"\n{gauge} " not in page


def test_password_right_and_wrong(repository, tmp_path):
    with RedisServer(tmp_path, password="s3cret") as redis:
        right = redis_flags(redis, "password=s3cret")
        with NaiadServer(repository, log_dir=tmp_path, extra_args=right, name="right") as server:
            infer(server, 300.0)
            infer(server, 300.0)
            assert stats(server)["hit"] == 1
        for name, extra, message in (
            ("wrong", ["password=nope"], "AUTH refused: WRONGPASS"),
            ("none", [], "answered PING with: NOAUTH"),
            ("user", ["user=nobody", "password=s3cret"], "AUTH refused: WRONGPASS"),
        ):
            text = refused_start(repository, tmp_path, redis_flags(redis, *extra), name)
            assert "Failed to initialize RedisCache: Redis at 127.0.0.1:" in text, text
            assert message in text, text


def test_credentials_from_triton_environment(repository, tmp_path):
    """TRITONCACHE_REDIS_USERNAME/PASSWORD as Triton's redis cache reads them: alone they
    log in (no user means Redis's `default`); `user=`/`password=` settings override them."""
    with RedisServer(tmp_path, password="s3cret") as redis:
        # One Redis for all three: each server asks with its own values, so that its first
        # request is a miss.
        for base, (name, env, extra) in enumerate(
            (
                ("env_password", {"TRITONCACHE_REDIS_PASSWORD": "s3cret"}, []),
                (
                    "env_user",
                    {
                        "TRITONCACHE_REDIS_USERNAME": "default",
                        "TRITONCACHE_REDIS_PASSWORD": "s3cret",
                    },
                    [],
                ),
                ("flag_wins", {"TRITONCACHE_REDIS_PASSWORD": "nope"}, ["password=s3cret"]),
            ),
            start=400,
        ):
            flags = redis_flags(redis, *extra)
            with NaiadServer(
                repository, log_dir=tmp_path, extra_args=flags, name=name, env=env
            ) as server:
                infer(server, float(base))
                infer(server, float(base))
                assert stats(server)["hit"] == 1, name
        for name, env, extra in (
            ("env_wrong", {"TRITONCACHE_REDIS_PASSWORD": "nope"}, []),
            ("flag_wrong", {"TRITONCACHE_REDIS_PASSWORD": "s3cret"}, ["password=nope"]),
            (
                "env_user_wrong",
                {"TRITONCACHE_REDIS_USERNAME": "nobody", "TRITONCACHE_REDIS_PASSWORD": "s3cret"},
                [],
            ),
        ):
            server = NaiadServer(
                repository,
                log_dir=tmp_path,
                extra_args=redis_flags(redis, *extra),
                name=name,
                env=env,
            )
            with pytest.raises(ServerExited):
                server.start()
            assert "AUTH refused: WRONGPASS" in server.stderr_text(), server.stderr_text()


def test_unreachable_redis_and_refused_flags(repository, tmp_path):
    with RedisServer(tmp_path) as redis:
        port = redis.port
    # Nobody listens there any more: the server does not start (as Triton's cache).
    for name, flags, message in (
        (
            "gone",
            ["--cache-config", "redis,host=127.0.0.1", "--cache-config", f"redis,port={port}"],
            f"Redis at 127.0.0.1:{port}: cannot connect: Connection refused",
        ),
        (
            "no_port",
            ["--cache-config", "redis,host=127.0.0.1"],
            "didn't specify address. Must at a minimum specify 'host' and 'port'",
        ),
        (
            "tls",
            ["--cache-config", "redis,host=h", "--cache-config", "redis,port=1"]
            + ["--cache-config", "redis,tls_enabled=true", "--cache-config", "redis,cert=/c.pem"],
            "TLS 'cert' and 'key' are given together (got only 'cert')",
        ),
        (
            "both",
            ["--cache-config", "redis,host=h", "--cache-config", "local,size=10"],
            "one cache at a time, got local and redis",
        ),
    ):
        server = NaiadServer(repository, log_dir=tmp_path, extra_args=flags, name=name)
        with pytest.raises(ServerExited):
            server.start()
        assert message in server.stderr_text(), server.stderr_text()


def test_redis_over_tls(repository, tmp_path):
    """Triton's TLS settings (tls_enabled, cert, key, cacert, sni) against a redis-server
    serving TLS only and requiring client certificates; a CA that does not sign Redis's
    certificate, a missing client certificate and a plaintext client each stop the start
    with the reason."""
    certs = make_certs(tmp_path / "certs")
    with RedisServer(tmp_path, tls=certs, mutual=True) as redis:
        tls = ["tls_enabled=true", f"cacert={certs.ca}", "sni=localhost"]
        client = [f"cert={certs.client}", f"key={certs.client_key}"]
        flags = redis_flags(redis, *tls, *client)
        with NaiadServer(repository, log_dir=tmp_path, extra_args=flags, name="tls") as server:
            infer(server, 400.0)
            infer(server, 400.0)
            assert stats(server)["hit"] == 1 and stats(server)["miss"] == 1
        keys = redis_call(redis.port, b"KEYS", b"naiad:response:*", tls=redis.client_context())
        assert keys.startswith(b"*1\r\n"), keys
        for name, extra, message in (
            (
                "other_ca",
                ["tls_enabled=true", f"cacert={certs.ca.parent / 'other-ca.pem'}", *client],
                "TLS handshake failed: error:0A000086:SSL routines::certificate verify failed (server certificate: ",
            ),
            ("no_client_cert", tls, "Redis at 127.0.0.1:"),
            ("plaintext", [], "Redis at 127.0.0.1:"),
            (
                "bad_cert",
                ["tls_enabled=true", f"cert={certs.ca}", f"key={certs.client_key}"],
                "does not match the certificate",
            ),
        ):
            flags = redis_flags(redis, *extra, "connect_timeout=2000", "socket_timeout=2000")
            text = refused_start(repository, tmp_path, flags, name)
            assert "Failed to initialize RedisCache: " in text, text
            assert message in text, text


def _load(server, bases, workers=4) -> None:
    """`bases` requests from `workers` clients at once; each answered with its outputs."""
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda base: infer(server, base), bases))


def _until_hit(server, base: float, timeout: float = 30.0) -> None:
    """Sends the same request until one is a hit (the cache reconnects after a backoff)."""
    deadline = time.monotonic() + timeout
    while True:
        before = stats(server)["hit"]
        infer(server, base)
        infer(server, base)
        if stats(server)["hit"] > before:
            return
        assert time.monotonic() < deadline, "no cache hit after Redis came back"


def test_redis_stalled_killed_and_restarted_under_load(repository, tmp_path):
    redis = RedisServer(tmp_path).start()
    port = redis.port
    try:
        flags = redis_flags(redis, "socket_timeout=50", "connect_timeout=50")
        with NaiadServer(repository, log_dir=tmp_path, extra_args=flags) as server:
            _load(server, [400.0] * 20 + [401.0 + i for i in range(20)])
            first = stats(server)
            assert first["hit"] >= 1
            # Stalled: Redis takes connections and answers nothing. Every request is
            # still answered, uncached.
            redis.signal(signal.SIGSTOP)
            _load(server, [500.0 + i % 5 for i in range(40)])
            stalled = stats(server)
            assert stalled["success"] == first["success"] + 40
            assert stalled["hit"] == first["hit"]
            assert stalled["miss"] == first["miss"] + 40
            redis.signal(signal.SIGCONT)
            _until_hit(server, 450.0)
            # Killed: connections refused.
            redis.kill()
            before = stats(server)
            _load(server, [600.0 + i % 5 for i in range(40)])
            gone = stats(server)
            assert gone["success"] == before["success"] + 40
            assert gone["hit"] == before["hit"] and gone["miss"] == before["miss"] + 40
            # Every lookup is a hit or a miss of the cache; a model's miss is counted when
            # its insert ends, and not when another filled the key meanwhile (a SET the
            # stalled Redis ran after it came back), so the model's misses may be fewer.
            page = metrics(server)
            lookups = metric_value(page, "nv_cache_num_lookups")
            assert lookups == metric_value(page, "nv_cache_num_hits") + metric_value(
                page, "nv_cache_num_misses"
            )
            assert metric_value(page, "nv_cache_num_hits") == gone["hit"]
            assert lookups >= gone["hit"] + gone["miss"]
            # Back on the same port, empty: misses fill it, then hits again.
            redis = RedisServer(tmp_path, port=port).start()
            _until_hit(server, 700.0)
            assert redis_call(port, b"DBSIZE").startswith(b":")
    finally:
        redis.signal(signal.SIGCONT)
        redis.kill()
