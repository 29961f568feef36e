# libFuzzer targets of the C++ request path (tests/fuzz/, docs/fuzzing.md), included by
# the Makefile. clang (Debian's) builds them with ASan/UBSan; gcc stays the compiler of
# everything else. `make test-fuzz` (in `make test`) runs each target briefly over its
# seeds; `make fuzz` runs them long, for nightly runs.
FUZZ_CXX := clang++
FUZZ_SAN := address,undefined
FUZZ_CXXFLAGS := -std=c++17 -g -O1 -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
	-pthread -Icsrc -Itests/csrc -Itests/fuzz
FUZZ_NAMES := $(patsubst tests/fuzz/fuzz_%.cc,%,$(wildcard tests/fuzz/fuzz_*.cc))
FUZZ_TARGETS := $(addprefix build/fuzz/fuzz_,$(FUZZ_NAMES))
FUZZ_CORE_OBJS := $(patsubst csrc/%.cc,build/fuzz/obj/%.o,$(wildcard csrc/*/*.cc))
# Seconds per target: the short run of `make test`, and the nightly one.
FUZZ_SECONDS ?= 15
FUZZ_NIGHTLY_SECONDS ?= 1800

.PHONY: fuzz-tools fuzz-build test-fuzz fuzz

# clang and its compiler-rt (libFuzzer, the sanitizer runtimes), Debian's packages.
fuzz-tools:
	command -v $(FUZZ_CXX) > /dev/null && test -n "$$(find /usr/lib/llvm-*/lib/clang -name \
		'libclang_rt.fuzzer-x86_64.a' 2> /dev/null)" || (apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends clang \
		libclang-rt-14-dev)

build/fuzz/obj/%.o: csrc/%.cc $(wildcard csrc/*/*.h) | fuzz-tools
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link,$(FUZZ_SAN) -c $< -o $@

build/fuzz/fuzz_%: tests/fuzz/fuzz_%.cc $(FUZZ_CORE_OBJS) $(wildcard tests/fuzz/*.h tests/csrc/*.h)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer,$(FUZZ_SAN) $< $(FUZZ_CORE_OBJS) -o $@ $(CORE_LIBS)

# Kept: a target rebuilds without recompiling the core.
.SECONDARY: $(FUZZ_CORE_OBJS)

fuzz-build: $(FUZZ_TARGETS)

# make test's short run starts from a fixed seed, so a clean run repeats; the nightly
# one draws its own.
test-fuzz: fuzz-tools
	$(MAKE) -j2 fuzz-build
	FUZZ_SEED=1 tests/fuzz/run_fuzzers.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz: fuzz-tools
	$(MAKE) -j2 fuzz-build
	tests/fuzz/run_fuzzers.sh $(FUZZ_NIGHTLY_SECONDS) $(FUZZ_TARGETS)
