# The two commands of the README: `make serve` and `make test`. Both create the
# virtual environment and build the core first; nothing is installed by hand.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.naiad-installed
CORE_SOURCES := $(wildcard csrc/*/*.cc csrc/*/*.h pysrc/naiad/*.pyx pysrc/naiad/_native/*.pxd \
	pysrc/naiad/_native/*.pxi) \
	setup.py pyproject.toml \
	$(wildcard protos/*.proto) tools/gen_protos.py
CXX ?= g++
CXXFLAGS_TEST := -std=c++17 -g -O1 -Wall -Wextra -pthread -Icsrc -Itests/csrc
# Libraries the core links (zlib: csrc/codec/http_compress.cc; OpenSSL 3:
# csrc/tls/tls_stream.cc), as setup.py's extension.
CORE_LIBS := -lz -lssl -lcrypto
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
METRICS_PORT ?= 8002

.PHONY: serve test install lint format test-core test-core-sanitize test-python clean bench-core \
	deploy-tools grpc-tools triton-peer

$(STAMP): $(CORE_SOURCES)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# PyTorch for the TorchScript example and the pytorch backend's tests, pinned: an
	# unpinned torch resolves to a multi-GB CUDA build (the `torch` extra leaves it open).
	# One resolution with the test extra, so torch's setuptools floor and the extra's
	# ceiling (tritonclient's shared_memory needs pkg_resources) are met together.
	$(PIP) install -q -e '.[test]' 'torch==2.13.0'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/naiad serve --model-repository model_repository \
		--http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/clang-format --dry-run --Werror csrc/*/*.cc csrc/*/*.h tests/csrc/*.cc tests/csrc/*.h tests/fuzz/*.cc tests/fuzz/*.h perf/*.cc perf/*.h

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	$(VENV)/bin/clang-format -i csrc/*/*.cc csrc/*/*.h tests/csrc/*.cc tests/csrc/*.h tests/fuzz/*.cc tests/fuzz/*.h perf/*.cc perf/*.h

# The C++ unit tests, built three ways (plain, ASan/UBSan, TSan), one object per source
# so that `make -j2` compiles two at a time (the test targets below ask for it). The
# sanitized builds link csrc/ objects compiled once per sanitizer for them and for the
# sanitized server (tests/sanitize/sanitize.mk, which holds those flags).
include tests/sanitize/sanitize.mk
TEST_CORE_NAMES := plain asan tsan
TEST_CORE_FLAGS_plain :=
TEST_CORE_FLAGS_asan := $(SAN_FLAGS_asan) -fno-omit-frame-pointer
TEST_CORE_FLAGS_tsan := $(SAN_FLAGS_tsan)
TEST_CORE_BIN_plain := build/test_core
TEST_CORE_BIN_asan := build/test_core_asan
TEST_CORE_BIN_tsan := build/test_core_tsan
TEST_CORE_HEADERS := $(wildcard csrc/*/*.h tests/csrc/*.h)
TEST_CORE_CSRC_OBJS_plain := $(patsubst %.cc,build/test_core_obj/plain/%.o,$(wildcard csrc/*/*.cc))
TEST_CORE_CSRC_OBJS_asan := $(SAN_CSRC_OBJS_asan)
TEST_CORE_CSRC_OBJS_tsan := $(SAN_CSRC_OBJS_tsan)

define test_core_build
build/test_core_obj/$(1)/%.o: %.cc $$(TEST_CORE_HEADERS)
	@mkdir -p $$(@D)
	$$(CXX) $$(CXXFLAGS_TEST) $$(TEST_CORE_FLAGS_$(1)) -c $$< -o $$@

$$(TEST_CORE_BIN_$(1)): $$(TEST_CORE_CSRC_OBJS_$(1)) \
		$$(patsubst %.cc,build/test_core_obj/$(1)/%.o,$$(wildcard tests/csrc/*.cc))
	$$(CXX) $$(CXXFLAGS_TEST) $$(TEST_CORE_FLAGS_$(1)) $$^ -o $$@ $$(CORE_LIBS)
endef
$(foreach n,$(TEST_CORE_NAMES),$(eval $(call test_core_build,$(n))))

test-core:
	$(MAKE) -j2 build/test_core
	build/test_core

test-core-sanitize:
	$(MAKE) -j2 build/test_core_asan build/test_core_tsan
	build/test_core_asan
	build/test_core_tsan

# The Prometheus server tests/test_deploy_observability.py runs against and the Redis
# server tests/test_redis_cache.py starts (Debian's packages; CI runs as root with
# Debian's archive reachable).
deploy-tools:
	command -v prometheus > /dev/null || (apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus)
	command -v redis-server > /dev/null || (apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server)

# h2load (nghttp2's load generator), an independent HTTP/2 client for tests/test_grpc_server.py.
grpc-tools:
	command -v h2load > /dev/null || (apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nghttp2-client)

# The real Triton 2.51 the differential tests compare Naiad with (tests/triton_peer.py), from
# the package registries. A failed install (no network) does not stop `make` here: the tests
# then skip with the reason, or fail where CI is set (.ci/run sets it).
triton-peer: $(STAMP)
	-PYTHON=$(PY) perf/setup_triton.sh

# Two processes: the gRPC client tests cannot share one with naiad.protos
# (tests/grpc_clients/conftest.py).
test-python: $(STAMP) deploy-tools grpc-tools triton-peer
	$(PY) -m pytest -q --durations=25
	NAIAD_GRPC_CLIENT_TESTS=1 $(PY) -m pytest -q tests/grpc_clients

# The documentation site (docs/, mkdocs.yml) into build/site/; --strict fails on a broken
# link or #anchor (not with --quiet, which hides the warnings from the count).
# tests/test_docs.py checks README.md's links and commands.
.PHONY: docs
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The C++ unit tests run under ASan/UBSan and under TSan: the same tests as `make
# test-core` (the quick plain build, for development) with the sanitizers' checks added.
test: lint docs test-core-sanitize test-fuzz test-server-sanitize test-python

include tests/fuzz/fuzz.mk

clean:
	rm -rf build $(VENV) pysrc/naiad/*.so pysrc/naiad/_core.cpp pysrc/naiad/protos/*_pb2*.py

# --- perf/: benchmarks against the real Triton and the regression gate (perf/README.md) ---
PERF_PY := perf/.tools/venv/bin/python
.PHONY: bench bench-compare perf-tools perf-check perf-check-test bench-core-threads

perf-tools:
	perf/setup_tools.sh

bench: $(STAMP) perf-tools
	$(PERF_PY) perf/bench.py --servers naiad

bench-compare: $(STAMP) perf-tools
	$(PERF_PY) perf/bench.py --servers naiad,triton

perf-check: $(STAMP) perf-tools
	perf/check

perf-check-test: $(STAMP) perf-tools
	$(PERF_PY) -m pytest -p no:cacheprovider perf/tests -v

# The core's own cost per request (issue 4's microbenchmark), single thread.
build/core_bench: $(wildcard csrc/*/*.cc csrc/*/*.h) perf/core_bench.cc perf/bench_support.h
	mkdir -p build
	$(CXX) -std=c++17 -O2 -pthread -Icsrc -Iperf csrc/*/*.cc perf/core_bench.cc -o $@ $(CORE_LIBS)

# The infer fast lane's C++ cost per request, HTTP bytes in to HTTP bytes out.
build/lane_bench: $(wildcard csrc/*/*.cc csrc/*/*.h) perf/lane_bench.cc perf/bench_support.h \
		tests/csrc/add_sub_model.h
	mkdir -p build
	$(CXX) -std=c++17 -O2 -pthread -Icsrc -Iperf -Itests/csrc csrc/*/*.cc perf/lane_bench.cc -o $@ $(CORE_LIBS)

# A C++ I/O loop for lane connections, prototyped: CPU per request under wrk (issue 15).
build/lane_io_bench: $(wildcard csrc/*/*.cc csrc/*/*.h) perf/lane_io_bench.cc perf/bench_support.h \
		tests/csrc/add_sub_model.h
	mkdir -p build
	$(CXX) -std=c++17 -O2 -pthread -Icsrc -Iperf -Itests/csrc csrc/*/*.cc perf/lane_io_bench.cc -o $@ $(CORE_LIBS)

# The C++ I/O engine on 1 or N loops, each on a thread of its own, under wrk
# (perf/io_threads.py; issue 40 item 1).
build/io_threads_bench: $(wildcard csrc/*/*.cc csrc/*/*.h) perf/io_threads_bench.cc perf/bench_support.h \
		tests/csrc/add_sub_model.h
	mkdir -p build
	$(CXX) -std=c++17 -O2 -pthread -Icsrc -Iperf -Itests/csrc csrc/*/*.cc perf/io_threads_bench.cc -o $@ $(CORE_LIBS)

# The core under 1 and 2 submitting threads (issue 40): what a second I/O thread would do;
# the last run without Core::Turn (a lock per submit), as the core took them before.
build/core_threads_bench: $(wildcard csrc/*/*.cc csrc/*/*.h) perf/core_threads_bench.cc perf/bench_support.h
	mkdir -p build
	$(CXX) -std=c++17 -O2 -pthread -Icsrc -Iperf csrc/*/*.cc perf/core_threads_bench.cc -o $@ $(CORE_LIBS)

bench-core-threads: build/core_threads_bench
	build/core_threads_bench 1
	build/core_threads_bench 2
	build/core_threads_bench 2 32 20000 shared each

# The physical limit of large tensors in band: a bare loopback echo (perf/echo_limit.py).
build/echo_limit: perf/echo_limit.cc
	mkdir -p build
	$(CXX) -std=c++17 -O2 perf/echo_limit.cc -o $@

bench-core: build/core_bench build/lane_bench
	build/core_bench 1
	build/core_bench 8
	build/core_bench 32
	build/lane_bench 1
	build/lane_bench 8

# Rebuild the ONNX models of model_repository/ and perf/models/ from code (committed; the
# tests check that the committed files are what this builds).
.PHONY: onnx-models
onnx-models: $(STAMP)
	$(PY) tools/build_onnx_models.py
