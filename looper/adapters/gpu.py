"""GPU health through NVML (the ``pynvml`` module of nvidia-ml-py).

Every NVML call goes through :class:`NvmlProbe`, so tests can inject a library that is
missing, a machine with no device, or a device that disappears mid-run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class GpuReading:
    ok: bool
    problem: str = ""  # in words, when not ok
    count: int = 0
    name: str = ""
    memory_total_mb: float = 0.0
    memory_used_mb: float = 0.0
    memory_free_mb: float = 0.0
    utilization_pct: float | None = None
    ecc_uncorrected: int | None = None
    retired_pages_pending: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "")}


class NvmlProbe:
    """Reads one device through NVML. ``nvml`` may be injected (a fake module) in tests."""

    def __init__(self, index: int = 0, nvml: Any = None) -> None:
        self.index = index
        self._nvml = nvml

    def _lib(self) -> Any:
        if self._nvml is None:
            import pynvml  # provided by nvidia-ml-py

            self._nvml = pynvml
        return self._nvml

    def read(self) -> GpuReading:
        try:
            nv = self._lib()
        except ImportError as exc:
            return GpuReading(ok=False, problem=f"NVML library not importable: {exc}")
        try:
            nv.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            return GpuReading(ok=False, problem=f"NVML could not start (no driver or no GPU): {exc}")
        try:
            count = int(nv.nvmlDeviceGetCount())
            if count <= self.index:
                return GpuReading(ok=False, count=count,
                                  problem=f"no GPU at index {self.index} (NVML sees {count})")
            h = nv.nvmlDeviceGetHandleByIndex(self.index)
            name = nv.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            reading = GpuReading(ok=True, count=count, name=name,
                                 memory_total_mb=mem.total / 2**20, memory_used_mb=mem.used / 2**20,
                                 memory_free_mb=mem.free / 2**20)
            try:
                reading.utilization_pct = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            except Exception:
                pass
            try:
                reading.ecc_uncorrected = int(nv.nvmlDeviceGetTotalEccErrors(h, 1, 1))
            except Exception:
                pass
            try:
                reading.retired_pages_pending = bool(nv.nvmlDeviceGetRetiredPagesPendingStatus(h))
            except Exception:
                pass
            if reading.retired_pages_pending:
                reading.ok = False
                reading.problem = "GPU has retired pages pending (a reset is needed)"
            return reading
        except Exception as exc:
            return GpuReading(ok=False, problem=f"NVML error reading GPU {self.index}: {exc}")
        finally:
            try:
                nv.nvmlShutdown()
            except Exception:
                pass
