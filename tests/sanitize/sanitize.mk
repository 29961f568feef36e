# The real server with its core (the Cython extension) built a second and a third time,
# under ASan/UBSan and under TSan, each into build/sanitize/<name>/ (gcc, as the regular
# build); tests/sanitize/smoke_server.py runs a server on each and fails on any report.
# Included by the Makefile, whose sanitized C++ unit tests link the same csrc/ objects;
# `make test` runs test-server-sanitize (docs/fuzzing.md).
SAN_CXXFLAGS := -std=c++17 -O1 -g1 -fPIC -fno-omit-frame-pointer -pthread -Icsrc
SAN_FLAGS_asan := -fsanitize=address,undefined -fno-sanitize-recover=undefined
SAN_FLAGS_tsan := -fsanitize=thread -Wno-tsan
SAN_NAMES := asan tsan
SAN_CORES := $(foreach s,$(SAN_NAMES),build/sanitize/$(s)/_core.so)
SAN_CSRC_OBJS_asan := $(patsubst csrc/%.cc,build/sanitize/asan/obj/%.o,$(wildcard csrc/*/*.cc))
SAN_CSRC_OBJS_tsan := $(patsubst csrc/%.cc,build/sanitize/tsan/obj/%.o,$(wildcard csrc/*/*.cc))

.PHONY: test-server-sanitize

# One object per source, so that a sub-make builds them two at a time.
define san_core
build/sanitize/$(1)/obj/%.o: csrc/%.cc $(wildcard csrc/*/*.h)
	@mkdir -p $$(@D)
	$$(CXX) $$(SAN_CXXFLAGS) $$(SAN_FLAGS_$(1)) -c $$< -o $$@

build/sanitize/$(1)/obj/_core.o: $$(STAMP) $(wildcard csrc/*/*.h)
	@mkdir -p $$(@D)
	$$(CXX) $$(SAN_CXXFLAGS) $$(SAN_FLAGS_$(1)) \
		-I"$$$$($$(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
		-I"$$$$($$(PY) -c 'import numpy; print(numpy.get_include())')" \
		-c pysrc/naiad/_core.cpp -o $$@

build/sanitize/$(1)/_core.so: build/sanitize/$(1)/obj/_core.o $$(SAN_CSRC_OBJS_$(1))
	$$(CXX) -shared $$(SAN_FLAGS_$(1)) $$^ -o $$@ $$(CORE_LIBS)
endef
$(foreach s,$(SAN_NAMES),$(eval $(call san_core,$(s))))

test-server-sanitize: $(STAMP)
	$(MAKE) -j2 $(SAN_CORES)
	$(PY) tests/sanitize/smoke_server.py asan build/sanitize/asan/_core.so
	$(PY) tests/sanitize/smoke_server.py tsan build/sanitize/tsan/_core.so
