"""The gRPC shared-memory RPCs (SystemSharedMemory*/CudaSharedMemory*): the same
registry as the HTTP routes (naiad/memory/shm.py), Triton's status codes."""

from __future__ import annotations

from naiad.grpc import status
from naiad.grpc.status import GrpcError
from naiad.memory import shm
from naiad.protos import grpc_service_pb2 as pb


def _call(function, *args):
    try:
        return function(*args)
    except shm.AlreadyExists as exc:
        raise GrpcError(status.ALREADY_EXISTS, exc.message) from None


def system_status(manager, request) -> pb.SystemSharedMemoryStatusResponse:
    response = pb.SystemSharedMemoryStatusResponse()
    for entry in manager.shm.status(shm.SYSTEM, request.name):
        region = response.regions[entry["name"]]
        region.name = entry["name"]
        region.key = entry["key"]
        region.offset = entry["offset"]
        region.byte_size = entry["byte_size"]
    return response


def system_register(manager, request) -> pb.SystemSharedMemoryRegisterResponse:
    _call(manager.shm.register_system, request.name, request.key, request.offset, request.byte_size)
    return pb.SystemSharedMemoryRegisterResponse()


def system_unregister(manager, request) -> pb.SystemSharedMemoryUnregisterResponse:
    manager.shm.unregister(shm.SYSTEM, request.name)
    return pb.SystemSharedMemoryUnregisterResponse()


def cuda_status(manager, request) -> pb.CudaSharedMemoryStatusResponse:
    response = pb.CudaSharedMemoryStatusResponse()
    for entry in manager.shm.status(shm.CUDA, request.name):
        region = response.regions[entry["name"]]
        region.name = entry["name"]
        region.device_id = entry["device_id"]
        region.byte_size = entry["byte_size"]
    return response


def cuda_register(manager, request) -> pb.CudaSharedMemoryRegisterResponse:
    _call(
        manager.shm.register_cuda,
        request.name,
        bytes(request.raw_handle),
        request.device_id,
        request.byte_size,
    )
    return pb.CudaSharedMemoryRegisterResponse()


def cuda_unregister(manager, request) -> pb.CudaSharedMemoryUnregisterResponse:
    manager.shm.unregister(shm.CUDA, request.name)
    return pb.CudaSharedMemoryUnregisterResponse()
