"""GPU readings for Triton's GPU metrics, through NVML (`nvidia-ml-py`, the `gpu` extra).

Triton 2.51 reads DCGM for every CUDA-visible GPU at each metrics poll and labels each
sample with `gpu_uuid` (the device's "GPU-..." UUID): utilization (a ratio), total and
used frame-buffer memory (whole MiB, in bytes), power usage and the power-management
limit (watts), and the energy used since the server started (joules, a counter). NVML
gives the same quantities; `NvmlGpus.read()` returns them per device.

Without the package, the library or a device, `open_gpus()` returns None and the GPU
families are absent from the page, as on a Triton without GPUs.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

log = logging.getLogger("naiad")

_MIB = 1 << 20


class GpuReading(NamedTuple):
    uuid: str
    utilization: float  # [0, 1]
    memory_total: int  # bytes
    memory_used: int  # bytes
    power_usage: float  # watts
    power_limit: float  # watts
    energy: float  # joules since the first reading


class NvmlGpus:
    """The CUDA-visible devices, read through an NVML module (pynvml's API)."""

    def __init__(self, nvml, handles: list):
        self.nvml = nvml
        self.handles = handles
        self.uuids = [self._text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
        self._first_energy: list[int | None] = [None] * len(handles)
        self._energy = [0.0] * len(handles)

    @staticmethod
    def _text(value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    def _value(self, call, *args, default=0):
        try:
            return call(*args)
        except self.nvml.NVMLError:  # a field this device does not report: 0, as Triton
            return default

    def read(self) -> list[GpuReading]:
        nvml = self.nvml
        out = []
        for index, handle in enumerate(self.handles):
            rates = self._value(nvml.nvmlDeviceGetUtilizationRates, handle, default=None)
            memory = self._value(nvml.nvmlDeviceGetMemoryInfo, handle, default=None)
            energy_mj = self._value(nvml.nvmlDeviceGetTotalEnergyConsumption, handle, default=None)
            if energy_mj is not None:
                if self._first_energy[index] is None:
                    self._first_energy[index] = energy_mj
                self._energy[index] = (energy_mj - self._first_energy[index]) * 0.001
            out.append(
                GpuReading(
                    self.uuids[index],
                    (rates.gpu if rates is not None else 0) * 0.01,
                    (memory.total // _MIB * _MIB) if memory is not None else 0,
                    (memory.used // _MIB * _MIB) if memory is not None else 0,
                    self._value(nvml.nvmlDeviceGetPowerUsage, handle) / 1000.0,
                    self._value(nvml.nvmlDeviceGetPowerManagementLimit, handle) / 1000.0,
                    self._energy[index],
                )
            )
        return out


def open_gpus(nvml=None) -> NvmlGpus | None:
    """The host's CUDA-visible GPUs for metrics, or None (no package, driver or device)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
    except Exception as exc:  # NVMLError: no driver, no library
        log.debug("no GPU metrics: %s", exc)
        return None
    from naiad.memory.gpu import visible_nvml_indices

    indices = visible_nvml_indices(list(range(count)))
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
    if not handles:
        return None
    gpus = NvmlGpus(nvml, handles)
    for number, handle in enumerate(handles):  # Triton's words, with the device's name
        name = gpus._value(nvml.nvmlDeviceGetName, handle, default=gpus.uuids[number])
        log.info("Collecting metrics for GPU %d: %s", number, NvmlGpus._text(name))
    return gpus
