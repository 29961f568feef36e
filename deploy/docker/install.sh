#!/bin/sh
# Runtime stage of Dockerfile and Dockerfile.gpu: a virtual environment at NAIAD_PREFIX with
# naiad's wheel from WHEEL_DIR, its dependencies from the package index and the extras named in
# NAIAD_EXTRAS (Dockerfile: openai; Dockerfile.gpu: gpu,openai). tests/test_deploy_image.py
# runs this same script.
#
#   NAIAD_PREFIX=/opt/naiad NAIAD_EXTRAS=gpu sh deploy/docker/install.sh WHEEL_DIR
set -eu
WHEEL_DIR=${1:?usage: install.sh WHEEL_DIR}
PREFIX=${NAIAD_PREFIX:-/opt/naiad}
PYTHON=${PYTHON:-python3}
EXTRAS=${NAIAD_EXTRAS:-}
set -- "$WHEEL_DIR"/naiad-*.whl
if [ "$#" -ne 1 ] || [ ! -f "$1" ]; then
    echo "install.sh: expected exactly one naiad wheel in $WHEEL_DIR" >&2
    exit 1
fi
WHEEL=$1
"$PYTHON" -m venv "$PREFIX"
# The wheel by its path (with the extras appended), never `naiad` by name from the index.
"$PREFIX/bin/pip" install "$WHEEL${EXTRAS:+[$EXTRAS]}"
case ",$EXTRAS," in
*,gpu,*)
    # onnxruntime (a dependency) and onnxruntime-gpu (the gpu extra) install the same
    # `onnxruntime` package over each other: keep only the GPU build.
    "$PREFIX/bin/pip" uninstall -y onnxruntime onnxruntime-gpu
    "$PREFIX/bin/pip" install --no-deps "onnxruntime-gpu>=1.18"
    ;;
esac
# pip is not needed at run time; the smoke check below fails the image build if the entry
# point or the compiled core cannot be loaded.
"$PREFIX/bin/naiad" serve --help > /dev/null
"$PREFIX/bin/python" -c "import naiad._core, naiad.server"
