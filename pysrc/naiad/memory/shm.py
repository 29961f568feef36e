"""Triton's shared-memory extensions, protocol-neutral: the HTTP routes
(http/shm_routes.py) and the gRPC RPCs (grpc/service.py) register, list and unregister
regions here, and both general paths resolve the tensors a request names by
`shared_memory_region` / `shared_memory_offset` / `shared_memory_byte_size`.

The registry itself is C++ (csrc/shm/shm_registry.h, through _core.ShmRegistry): a system
region is opened and mapped once, at registration, after its checks; the core reads
inputs from that mapping (one copy, into the batch). Outputs are written by the worker
straight into the client's region: the request block tells it where
(`regions`, see worker/shm_outputs.py), and the worker maps each region once.

Every tensor a request places in a region holds a `_core.RegionRef` until the request is
answered, so the region stays mapped (in the frontend and in the workers' table) while
it is in use; unregistering only removes the name.
"""

from __future__ import annotations

import base64
import os

import orjson

from naiad import _core
from naiad.datatypes import element_count, element_size
from naiad.errors import Internal, InvalidArgument, NotFound, error_of_kind

SYSTEM = _core.SHM_SYSTEM
CUDA = _core.SHM_CUDA

# Environment variable that tells workers where the live-region table is in the arena.
TABLE_ENV = "NAIAD_SHM_TABLE"


class AlreadyExists(InvalidArgument):
    """A region name registered twice: HTTP 400, gRPC ALREADY_EXISTS (as Triton)."""

    kind = _core.ERROR_ALREADY_EXISTS


def _refusal(refused: _core.ShmRegistryError) -> Exception:
    """The frontend's error for a refusal of the registry."""
    if refused.kind == _core.ERROR_ALREADY_EXISTS:
        return AlreadyExists(refused.message)
    return error_of_kind(refused.kind, refused.message)


class SharedMemory:
    """The server's shared-memory regions (one per server, created with the core)."""

    def __init__(self, core, max_regions: int = _core.SHM_DEFAULT_MAX_REGIONS):
        global _current
        # `max_regions`: the regions held at once, all clients together (--shm-max-regions).
        self.registry = _core.ShmRegistry(core, max_regions)
        # Workers started from now on inherit where the live-region table is.
        os.environ[TABLE_ENV] = str(self.registry.table_offset)
        self._pid = os.getpid()
        _current = self
        from naiad.memory import cuda_ipc
        from naiad.repository.metadata import SUPPORTED_EXTENSIONS

        # Only what works here: CUDA shm needs cuda-python and a device.
        names = ["system_shared_memory"]
        if cuda_ipc.unavailable_reason(0) is None:
            names.append("cuda_shared_memory")
        for name in names:
            if name not in SUPPORTED_EXTENSIONS:
                SUPPORTED_EXTENSIONS.append(name)

    # -- control plane -----------------------------------------------------------------
    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        try:
            self.registry.register_system(name, key, offset, byte_size)
        except _core.ShmRegistryError as refused:
            raise _refusal(refused) from None

    def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        from naiad.memory import cuda_ipc

        reason = cuda_ipc.unavailable_reason(device_id)
        if reason is not None:
            # Triton's answer where CUDA cannot open the handle; Naiad says why.
            raise InvalidArgument(
                f"failed to register shared memory region: invalid args ({reason})"
            )
        try:
            self.registry.register_cuda(name, raw_handle, device_id, byte_size)
        except _core.ShmRegistryError as refused:
            raise _refusal(refused) from None

    def unregister(self, kind: int, name: str = "") -> None:
        try:
            self.registry.unregister(kind, name)
        except _core.ShmRegistryError as refused:
            raise _refusal(refused) from None

    def status(self, kind: int, name: str = "") -> list[dict]:
        """Triton's status entries: system {name, key, offset, byte_size}, CUDA
        {name, device_id, byte_size}."""
        try:
            listed = self.registry.status(kind, name)
        except _core.ShmRegistryError as refused:
            raise _refusal(refused) from None
        if kind == SYSTEM:
            return [
                {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
                for r in listed
            ]
        return [
            {"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size} for r in listed
        ]

    def stats(self) -> dict:
        """Copy counters and regions mapped (GET /v2/naiad/shm)."""
        return self.registry.stats()

    # -- data path (general path of HTTP and gRPC) ---------------------------------------
    def resolve(self, name: str, offset: int, size: int):
        """A pinned _core.RegionRef for [offset, offset + size) of region `name`."""
        try:
            return self.registry.resolve(name, offset, size)
        except _core.ShmRegistryError as refused:
            raise _refusal(refused) from None

    def input_data(self, tensor_name: str, params: dict):
        """The bytes of an input named by shm parameters: a RegionRef (a read-only
        buffer over the region, or a CUDA region's reference the worker fills from)."""
        name, offset, size = tensor_parameters(tensor_name, params)
        return self.resolve(name, offset, size)

    def output_ref(self, tensor_name: str, params: dict):
        name, offset, size = tensor_parameters(tensor_name, params)
        return self.resolve(name, offset, size)

    def block_regions(self, inputs: list, outputs: list | None) -> bytes:
        """The request block's `regions` JSON for the worker: where to write each shm
        output, the CUDA inputs it fills, and each region's name by id (the worker names
        a region truncated under it); b"" when the request uses no region."""
        out = {}
        cuda_inputs = []
        names = {}
        for index, tensor in enumerate(inputs):
            ref = tensor.data
            if type(ref) is not _core.RegionRef:
                continue
            names[str(ref.id)] = tensor.parameters.get("shared_memory_region", "")
            if ref.kind == CUDA:
                cuda_inputs.append(
                    [
                        index,
                        ref.id,
                        _b64(ref.raw_handle),
                        ref.device_id,
                        ref.object_offset,
                        ref.size,
                    ]
                )
        for output in outputs or ():
            ref = output.parameters.get(REF_KEY)
            if ref is None:
                continue
            names[str(ref.id)] = output.parameters.get("shared_memory_region", "")
            if ref.kind == SYSTEM:
                out[output.name] = [
                    ref.id,
                    SYSTEM,
                    f"/proc/{self._pid}/fd/{ref.fd}",
                    ref.region_offset,
                    ref.region_size,
                    ref.object_offset - ref.region_offset,
                    ref.size,
                ]
            else:
                out[output.name] = [
                    ref.id,
                    CUDA,
                    _b64(ref.raw_handle),
                    ref.device_id,
                    ref.region_size,
                    ref.object_offset,
                    ref.size,
                ]
        if not names:
            return b""
        if not out and not cuda_inputs:
            return _INPUTS_ONLY + orjson.dumps(names) + b"}"
        return orjson.dumps({"outputs": out, "cuda_inputs": cuda_inputs, "names": names})


# The `regions` of a request whose only regions are system-shm inputs, up to its names:
# the response cache still serves it (its inputs are read for the key, as on the lanes).
_INPUTS_ONLY = b'{"outputs":{},"cuda_inputs":[],"names":'


def bypasses_cache(regions: bytes) -> bool:
    """Whether a request whose block names `regions` (block_regions) bypasses the
    response cache: outputs in client regions, or CUDA inputs."""
    return bool(regions) and not regions.startswith(_INPUTS_ONLY)


_current: SharedMemory | None = None


def current() -> SharedMemory | None:
    """The server's SharedMemory (one per process), for the protocol parsers."""
    return _current


def input_from_parameters(tensor_name: str, params: dict, http: bool = False):
    """An input's RegionRef from its shm parameters (Triton's errors; `http`: the HTTP
    front end's wording for malformed values)."""
    if http:
        _check_http_types(params)
    name, offset, size = tensor_parameters(tensor_name, params)
    shm = _current
    if shm is None:
        raise NotFound(f"Unable to find shared memory region: '{name}'")
    # A BYTES tensor in a CUDA region is checked element by element by the worker,
    # after its copy to the host (worker/shm_outputs.py fill_cuda_inputs).
    return shm.resolve(name, offset, size)


def output_from_parameters(tensor_name: str, params: dict, http: bool = False):
    """Resolves a requested output's shm parameters and keeps the RegionRef in them."""
    if http:
        _check_http_types(params)
    ref = input_from_parameters(tensor_name, params)
    if ref.kind != SYSTEM and ref.kind != CUDA:
        raise InvalidArgument(f"unknown shared memory kind for output '{tensor_name}'")
    params[REF_KEY] = ref
    return ref


def _check_http_types(params: dict) -> None:
    """Triton's HTTP front end reads these with rapidjson: its messages, HTTP 500."""
    region = params.get("shared_memory_region")
    if region is not None and type(region) is not str:
        raise Internal(
            "Unable to parse 'shared_memory_region': attempt to access JSON non-string as string"
        )
    for key in ("shared_memory_offset", "shared_memory_byte_size"):
        value = params.get(key)
        if value is not None and (type(value) is not int or value < 0):
            raise Internal(
                f"Unable to parse '{key}': attempt to access JSON non-unsigned-integer as "
                "unsigned-integer"
            )
    if region is not None and "shared_memory_byte_size" not in params:
        raise InvalidArgument(f"Invalid offset + byte size for shared memory region: '{region}'")


def block_regions(request) -> bytes:
    """The request block's `regions` for `request` (b"" when it uses no region)."""
    shm = _current
    if shm is None:
        return b""
    return shm.block_regions(request.inputs, request.outputs)


# The RegionRef of an output placed in shm travels in its RequestedOutput's parameters
# under this key (never sent anywhere: the encoders skip outputs in shm).
REF_KEY = "\0naiad_region"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def tensor_parameters(tensor_name: str, params: dict) -> tuple[str, int, int]:
    """(region, offset, byte size) from a tensor's parameters, with Triton's checks."""
    region = params.get("shared_memory_region")
    offset = params.get("shared_memory_offset", 0)
    size = params.get("shared_memory_byte_size")
    if region is None:
        if "shared_memory_byte_size" in params:
            raise InvalidArgument(
                "'shared_memory_byte_size' can not be specified without "
                f"'shared_memory_region' parameter for tensor '{tensor_name}'"
            )
        if "shared_memory_offset" in params:
            raise InvalidArgument(
                "'shared_memory_offset' can not be specified without "
                f"'shared_memory_region' parameter for tensor '{tensor_name}'"
            )
    if type(region) is not str:
        raise InvalidArgument(
            f"invalid value type for 'shared_memory_region' parameter for tensor '{tensor_name}'"
        )
    if type(offset) is not int or offset < 0:
        raise InvalidArgument(
            f"invalid value type for 'shared_memory_offset' parameter for tensor '{tensor_name}'"
        )
    if size is None:
        raise InvalidArgument(
            "'shared_memory_byte_size' must be specified along with "
            f"'shared_memory_region' parameter for tensor '{tensor_name}'"
        )
    if type(size) is not int or size < 0:
        raise InvalidArgument(
            f"invalid value type for 'shared_memory_byte_size' parameter for tensor '{tensor_name}'"
        )
    return region, offset, size


def expected_input_size(datatype: str, shape: list) -> int | None:
    """The byte size shape and datatype imply, None for BYTES (checked element by element
    by the validator)."""
    size = element_size(datatype)
    if not size:
        return None
    return element_count(shape) * size


def truncated_error(request) -> str | None:
    """The error of `request` when a region it used was truncated while it was in flight
    (a fault absorbed in the frontend's mapping: ShmRegistry::truncated), else None.
    Asked when it is answered, after any write into its regions, as the lanes do."""
    if _current is None:
        return None
    for tensor in request.inputs:
        if type(tensor.data) is _core.RegionRef:
            error = tensor.data.truncated()
            if error is not None:
                return error
    for wanted in request.outputs or ():
        ref = wanted.parameters.get(REF_KEY)
        if ref is not None:
            error = ref.truncated()
            if error is not None:
                return error
    return None


def write_returned_outputs(request, response) -> None:
    """Writes into their regions the outputs `request` placed in system shm whose bytes
    came back in `response` (an ensemble's answer: no worker wrote them; a worker leaves
    none), as the lanes do in C++ (KServeCodec::write_shm_output). Internal with Triton's
    message when one does not fit."""
    if not request.outputs:
        return
    for output in response.outputs:
        data = output.data
        if not len(data):
            continue
        for wanted in request.outputs:
            ref = wanted.parameters.get(REF_KEY) if wanted.name == output.name else None
            if ref is None:
                continue
            error = ref.write_output(output.name, data)
            if error is not None:
                raise Internal(error)
            output.data = b""
