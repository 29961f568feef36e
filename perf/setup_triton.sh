#!/bin/bash
# Installs the real Triton Inference Server 2.51 with its Python backend under
# $NAIAD_PERF_TOOLS/triton (default perf/.tools/triton, git-ignored), from the package
# registries only: unpacked from the nvidia-pytriton 0.7.0 wheel. perf/ benchmarks against
# it (perf/setup_tools.sh runs this) and the differential tests compare Naiad with it
# (`make test` runs this; tests/triton_peer.py finds it).
#
# Debian packages: python3-numpy and libpython3.X. Triton's Python backend stub runs under
# /usr/bin/python3 (the stub for that Python's version is installed) and needs numpy 1.x
# there: a numpy 2.x python yields empty output tensors.
# PYTHON names a Python with pip (default python3). Idempotent; re-running is cheap.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOOLS=${NAIAD_PERF_TOOLS:-$HERE/.tools}
PYTHON=${PYTHON:-python3}
TRITON=$TOOLS/triton
[ -x "$TRITON/bin/tritonserver" ] && exit 0

apt_install() {
  dpkg -s "$@" >/dev/null 2>&1 && return
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq >/dev/null 2>&1 || true
  $sudo apt-get install -y -qq "$@" >/dev/null
}
apt_install python3-numpy
VERSION=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
apt_install "libpython$VERSION"

WHEEL=nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_x86_64.whl
mkdir -p "$TOOLS/dl"
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_35_x86_64 \
  -d "$TOOLS/dl" "nvidia-pytriton==0.7.0"
rm -rf "$TOOLS/pytriton"
"$PYTHON" -m zipfile -e "$TOOLS/dl/$WHEEL" "$TOOLS/pytriton"
SRV=$TOOLS/pytriton/pytriton/tritonserver
STUB=$SRV/python_backend_stubs/$VERSION/triton_python_backend_stub
if [ ! -f "$STUB" ]; then
  echo "$WHEEL has no Python backend stub for /usr/bin/python3 ($VERSION):" \
    "$(ls "$SRV/python_backend_stubs" | tr '\n' ' ')" >&2
  exit 1
fi
rm -rf "$TRITON" && mkdir -p "$TRITON/bin" "$TRITON/backends/python"
cp "$SRV"/backends/python/* "$STUB" "$TRITON/backends/python/"
chmod +x "$SRV/bin/tritonserver" "$TRITON/backends/python/triton_python_backend_stub"
ln -sfn "$TOOLS/pytriton/nvidia_pytriton.libs" "$TRITON/lib"
# Last: its presence is what marks the install complete.
ln -sf "$SRV/bin/tritonserver" "$TRITON/bin/tritonserver"
echo "Triton 2.51 ready under $TRITON"
