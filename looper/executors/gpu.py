"""GPU health through NVML (the ``pynvml`` module of nvidia-ml-py).

Every NVML call goes through :class:`NvmlProbe` (one reading, for preflight) or
:class:`GpuSampler` (polling during a run), so tests can inject a library that is missing,
a machine with no device, or a device that disappears mid-run.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable
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

    ALWAYS = ("ok", "problem", "count", "name", "memory_total_mb", "memory_used_mb", "memory_free_mb")

    def as_dict(self) -> dict[str, Any]:
        """Every field a reader parses, always (an empty ``problem`` on a good reading); the optional ones
        only where the device reported them."""
        return {k: v for k, v in self.__dict__.items() if k in self.ALWAYS or v is not None}


_NVML_LOCK = threading.RLock()


class Serialized:
    """NVML with every call of this process made one at a time. Several samplers share the daemon's process
    (each run's, the night's): on an H200 with 8 runs side by side the daemon died of SIGSEGV as one run's
    sampler shut NVML down while the others were inside it; a call never overlaps another now."""

    def __init__(self, nv: Any) -> None:
        self._nv = nv

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._nv, name)
        if not callable(attr) or isinstance(attr, type):  # constants and the error classes, as they are
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with _NVML_LOCK:
                return attr(*args, **kwargs)

        return call


def nvml_lib(injected: Any = None) -> Any:
    """The NVML module (``pynvml`` of nvidia-ml-py, or a fake a test injects), its calls serialized."""
    if injected is None:
        import pynvml  # provided by nvidia-ml-py

        injected = pynvml
    return injected if isinstance(injected, Serialized) else Serialized(injected)


class NvmlProbe:
    """Reads one device through NVML. ``nvml`` may be injected (a fake module) in tests."""

    def __init__(self, index: int = 0, nvml: Any = None) -> None:
        self.index = index
        self._nvml = nvml

    def _lib(self) -> Any:
        self._nvml = nvml_lib(self._nvml)
        return self._nvml

    def at(self, index: int) -> NvmlProbe:
        """The same NVML's reading of GPU ``index`` (another worker's)."""
        return self if index == self.index else NvmlProbe(index, self._nvml)

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


def device_index(device: str, otherwise: int) -> int:
    """The GPU a run's ``LOOPER_DEVICE`` names (``N`` or ``cuda:N``), for its sampler; ``otherwise`` (``[executor]
    gpu_index``) where it names none (``cuda``).

    >>> device_index("2", 0), device_index("cuda:3", 0), device_index("cuda", 1)
    (2, 3, 1)
    """
    last = device.split(":")[-1]
    return int(last) if last.isdigit() else otherwise


# -- sampling during a run ----------------------------------------------------------------

# XIDs after which a run's numbers cannot be trusted (the device is gone or its memory
# corrupt): 48 double-bit ECC, 79 fallen off the bus, 94/95 contained/uncontained ECC,
# 119/120 GSP firmware errors. Other XIDs are recorded but do not end a run.
FATAL_XIDS = frozenset({48, 79, 94, 95, 119, 120})


def _mb(value: float) -> float:
    return round(float(value) / 2**20, 1)


class GpuSampler:
    """Polls one device every ``interval`` seconds on a thread while a run goes on.

    Records peak memory used, mean utilisation, uncorrected ECC errors at start and end,
    critical XID events (where the driver delivers them), and whether the device was lost
    mid-run. A device that answered at start and stops answering (any NVML error while
    sampling), a fatal XID, or a rising uncorrected-ECC count sets ``lost`` with the reason:
    the run's result must then be treated as a harness error.

    Use as a context manager or ``start()`` / ``stop()``; ``stop()`` returns :meth:`summary`.
    """

    def __init__(self, index: int = 0, nvml: Any = None, interval: float = 1.0,
                 on_sample: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.index = index
        self.interval = interval
        self._nvml = nvml
        self._on_sample = on_sample
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._handle: Any = None
        self._events: Any = None
        self._inited = False
        self.available = False
        self.problem = ""
        self.name = ""
        self.memory_total_mb = 0.0
        self.samples = 0
        self.peak_memory_mb = 0.0
        self._util_sum = 0.0
        self._util_n = 0
        self._busy_n = 0  # samples with a kernel running (utilisation > 0): the busy share
        self.ecc_start: int | None = None
        self.ecc_end: int | None = None
        self.xids: list[int] = []
        self.lost = False
        self.lost_reason = ""

    # -- lifecycle ---------------------------------------------------------------------
    def _lib(self) -> Any:
        self._nvml = nvml_lib(self._nvml)
        return self._nvml

    def start(self) -> GpuSampler:
        """Open the device and start the polling thread; a GPU absent at start is no loss."""
        try:
            nv = self._lib()
        except ImportError as exc:
            self.problem = f"NVML library not importable: {exc}"
            return self
        try:
            nv.nvmlInit()
            self._inited = True
        except Exception as exc:
            self.problem = f"NVML could not start (no driver or no GPU): {exc}"
            return self
        try:
            count = int(nv.nvmlDeviceGetCount())
            if count <= self.index:
                self.problem = f"no GPU at index {self.index} (NVML sees {count})"
                return self
            self._handle = nv.nvmlDeviceGetHandleByIndex(self.index)
            name = nv.nvmlDeviceGetName(self._handle)
            self.name = name.decode() if isinstance(name, bytes) else str(name)
            self.memory_total_mb = _mb(nv.nvmlDeviceGetMemoryInfo(self._handle).total)
        except Exception as exc:
            self.problem = f"NVML error opening GPU {self.index}: {exc}"
            return self
        self.available = True
        self.ecc_start = self._ecc()
        self._register_xid_events()
        self.sample_once()
        self._thread = threading.Thread(target=self._loop, name=f"gpu-sampler-{self.index}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, self.interval * 3))
        if self.available and not self.lost:
            self.ecc_end = self._ecc()
            if self.ecc_start is not None and self.ecc_end is not None and self.ecc_end > self.ecc_start:
                self._mark_lost(f"uncorrected ECC errors rose from {self.ecc_start} to {self.ecc_end} "
                                f"on GPU {self.index} during the run")
        if self._inited:
            nv = self._nvml
            if self._events is not None:
                try:
                    nv.nvmlEventSetFree(self._events)
                except Exception:
                    pass
            try:
                nv.nvmlShutdown()
            except Exception:
                pass
            self._inited = False
        return self.summary()

    def __enter__(self) -> GpuSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- sampling ----------------------------------------------------------------------
    def _ecc(self) -> int | None:
        try:
            # memory error type 1 = uncorrected, counter type 1 = aggregate (survives reboots)
            return int(self._nvml.nvmlDeviceGetTotalEccErrors(self._handle, 1, 1))
        except Exception:
            return None  # not supported on this device (most consumer GPUs)

    def _register_xid_events(self) -> None:
        nv = self._nvml
        try:
            events = nv.nvmlEventSetCreate()
            nv.nvmlDeviceRegisterEvents(self._handle, int(nv.nvmlEventTypeXidCriticalError), events)
            self._events = events
        except Exception:
            self._events = None  # not supported here (or a fake): poll with a plain sleep

    def _mark_lost(self, reason: str) -> None:
        with self._lock:
            if not self.lost:
                self.lost = True
                self.lost_reason = reason

    def sample_once(self) -> bool:
        """Take one sample; False (and ``lost`` set) when the device stopped answering."""
        nv = self._nvml
        try:
            mem = nv.nvmlDeviceGetMemoryInfo(self._handle)
            used = _mb(mem.used)
            util: float | None
            try:
                util = float(nv.nvmlDeviceGetUtilizationRates(self._handle).gpu)
            except Exception as exc:
                if _is_gpu_lost(nv, exc):
                    raise
                util = None  # utilisation not supported (some virtual GPUs)
        except Exception as exc:
            self._mark_lost(f"GPU {self.index} ({self.name or 'unknown'}) stopped answering NVML "
                            f"mid-run: {exc}")
            return False
        with self._lock:
            self.samples += 1
            self.peak_memory_mb = max(self.peak_memory_mb, used)
            if util is not None:
                self._util_sum += util
                self._util_n += 1
                self._busy_n += util > 0
        if self._on_sample is not None:
            try:
                self._on_sample(self.summary())
            except Exception:
                pass
        return True

    def _wait(self) -> None:
        """Take a critical XID event if one is waiting (a poll: NVML is never held while this thread
        sleeps), then sleep one interval."""
        if self._events is not None:
            self._take_event()
        self._stop.wait(self.interval)

    def _take_event(self) -> None:
        nv = self._nvml
        try:
            wait = getattr(nv, "nvmlEventSetWait_v2", None) or nv.nvmlEventSetWait
            data = wait(self._events, 0)
        except Exception as exc:
            if type(exc).__name__ != "NVMLError_Timeout":
                self._events = None  # event wait broke: sampling alone finds a loss
            return
        xid = int(getattr(data, "eventData", 0) or 0)
        with self._lock:
            self.xids.append(xid)
        if xid in FATAL_XIDS:
            self._mark_lost(f"GPU {self.index} ({self.name or 'unknown'}) reported critical XID {xid} mid-run")

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wait()
            if self._stop.is_set() or self.lost:
                break
            if not self.sample_once():
                break

    def summary(self) -> dict[str, Any]:
        """Plain numbers for RunResult.gpu and the database."""
        with self._lock:
            out: dict[str, Any] = {"index": self.index, "available": self.available, "lost": self.lost,
                                   "samples": self.samples}
            if self.problem:
                out["problem"] = self.problem
            if self.available:
                out.update(name=self.name, memory_total_mb=self.memory_total_mb,
                           peak_memory_mb=self.peak_memory_mb,
                           mean_utilization_pct=(round(self._util_sum / self._util_n, 1)
                                                 if self._util_n else None),
                           busy_pct=round(100.0 * self._busy_n / self._util_n, 1) if self._util_n else None)
            if self.ecc_start is not None:
                out["ecc_uncorrected_start"] = self.ecc_start
            if self.ecc_end is not None:
                out["ecc_uncorrected_end"] = self.ecc_end
            if self.xids:
                out["xid"] = list(self.xids)
            if self.lost:
                out["lost_reason"] = self.lost_reason
            return out


def _is_gpu_lost(nv: Any, exc: BaseException) -> bool:
    lost = getattr(nv, "NVMLError_GpuIsLost", None)
    return (isinstance(lost, type) and isinstance(exc, lost)) or "lost" in str(exc).lower()


# -- remote reading: ``python -m looper.executors.gpu read --index N`` (looper.remote samples itself) --

def main(argv: list[str] | None = None) -> int:
    """Print one NvmlProbe reading as JSON (the ssh executor's GPU preflight on the host)."""
    parser = argparse.ArgumentParser(prog="python -m looper.executors.gpu")
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("read", help="print one NvmlProbe reading as JSON")
    r.add_argument("--index", type=int, default=0)
    args = parser.parse_args(argv)
    print(json.dumps(NvmlProbe(args.index).read().as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
