#!/bin/bash
# The tests that need a CUDA device, on a GPU host where naiad is built (`make install`,
# or `setup.py build_ext --inplace` with pysrc on PYTHONPATH); elsewhere they skip.
# Needs cuda-python (`naiad[gpu]`) and tritonclient; torch with CUDA, onnxruntime-gpu and
# TensorRT each add the tests of their backend, and pytest-xdist makes it quicker (-n).
# The last lines list what still skipped, with the reasons: read them, a skip is no pass.
#
#   tools/gpu_checks.sh [extra pytest args]      PY=python3 to choose the interpreter
set -o pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
GPU_TESTS=(
  tests/test_cuda_shm.py tests/test_gpu_instances.py tests/test_gpu_tensors_to_host.py
  tests/test_cuda_backends.py tests/test_pytorch_backend.py tests/test_metrics_summaries.py
  tests/test_tensorrt_backend.py tests/test_onnx_backend.py tests/test_shm_worker.py
  tests/test_pytorch_load.py tests/test_shm.py tests/test_repository.py tests/test_metrics.py
)
$PY -c "from naiad import gpu, cuda_ipc
print('CUDA devices:', gpu.devices(), '| CUDA shm:', cuda_ipc.unavailable_reason(0) or 'served')"
$PY -m pytest -q -rsfE "${GPU_TESTS[@]}" "$@"
status=$?
# tritonclient.grpc cannot share a process with naiad.protos (tests/grpc_clients/conftest.py).
NAIAD_GRPC_CLIENT_TESTS=1 $PY -m pytest -q -rsfE tests/grpc_clients/test_grpc_shm.py \
  tests/grpc_clients/test_grpc_server.py -k "cuda or features_not_built" || status=1
exit $status
