#!/bin/bash
# Installs what perf/http_frontend_bench.py needs (uvicorn beside the project's .venv, wrk
# from Debian) and runs the comparison. Usage: perf/http_frontend_bench.sh (after make install)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=${NAIAD_PERF_TOOLS:-$ROOT/perf/.tools}
if ! command -v wrk >/dev/null; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq >/dev/null 2>&1 || true
  $SUDO apt-get install -y -qq wrk >/dev/null
fi
if [ ! -d "$TOOLS/uvicorn/uvicorn" ]; then
  "$ROOT/.venv/bin/pip" install -q --target "$TOOLS/uvicorn" "uvicorn==0.54.*"
fi
PYTHONPATH="$TOOLS/uvicorn" "$ROOT/.venv/bin/python" "$ROOT/perf/http_frontend_bench.py" compare
