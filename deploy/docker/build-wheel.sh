#!/bin/sh
# Builder stage of Dockerfile and Dockerfile.gpu: build naiad's wheel (the C++ core compiled
# through Cython, the protobuf modules generated) from the source tree in the current
# directory into WHEEL_DIR. tests/test_deploy_image.py runs this same script.
#
#   sh deploy/docker/build-wheel.sh WHEEL_DIR
#
# PYTHON: the interpreter the wheel is built for (default python3); it must be the one the
# runtime stage installs into, since the wheel is for one CPython version.
set -eu
WHEEL_DIR=${1:?usage: build-wheel.sh WHEEL_DIR}
PYTHON=${PYTHON:-python3}
BUILD_VENV=$(mktemp -d)
"$PYTHON" -m venv "$BUILD_VENV"
# pip builds the wheel in an isolated environment with pyproject.toml's build requirements
# (setuptools, wheel, Cython, grpcio-tools, numpy for its headers); only naiad itself is
# built, no dependency.
"$BUILD_VENV/bin/pip" wheel --no-deps --wheel-dir "$WHEEL_DIR" .
rm -rf "$BUILD_VENV"
ls -l "$WHEEL_DIR"
