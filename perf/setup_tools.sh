#!/bin/bash
# Installs perf/'s own tools under perf/.tools/ (git-ignored), from the package registries only:
#   venv/        Python for the harness: numpy, matplotlib, onnxruntime, grpcio (the h2load
#                scenarios' answer check), and tritonclient 2.41.0
#                (its manylinux wheel ships Triton's perf_analyzer binary) + nvidia-cuda-runtime-cu12
#                (perf_analyzer links libcudart.so.12 even on a CPU-only host)
#   triton/      the real Triton Inference Server 2.51 with its Python backend
#                (perf/setup_triton.sh, which the differential tests' `make test` runs too)
# Debian packages: libb64-0d (perf_analyzer), python3-numpy (Triton's Python backend stub runs
# under /usr/bin/python3 and needs numpy 1.x there), wrk (the light HTTP client of
# perf/cost.py and the wrk scenarios) and nghttp2-client (h2load: the light gRPC client of
# the h2load scenarios, perf/h2load_load.py). Idempotent; re-running is cheap.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOOLS=${NAIAD_PERF_TOOLS:-$HERE/.tools}
PYTHON=${PYTHON:-python3}
mkdir -p "$TOOLS/dl"

if ! dpkg -s libb64-0d python3-numpy wrk nghttp2-client >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq >/dev/null 2>&1 || true
  $SUDO apt-get install -y -qq libb64-0d python3-numpy wrk nghttp2-client >/dev/null
fi

VENV=$TOOLS/venv
if [ ! -x "$VENV/.ready" ]; then
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" download -q --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
    -d "$TOOLS/dl" "tritonclient==2.41.0"
  "$VENV/bin/pip" install -q "$TOOLS/dl/tritonclient-2.41.0-py3-none-manylinux1_x86_64.whl" \
    nvidia-cuda-runtime-cu12 numpy matplotlib onnxruntime pytest
  printf '#!/bin/sh\n' >"$VENV/.ready" && chmod +x "$VENV/.ready"
fi
# Added after the first venvs were made: installed where it is missing.
"$VENV/bin/python" -c 'import grpc' 2>/dev/null || "$VENV/bin/pip" install -q grpcio

PYTHON=$VENV/bin/python "$HERE/setup_triton.sh"
echo "perf tools ready under $TOOLS"
