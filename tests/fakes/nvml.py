"""A pynvml stand-in (tests/executors/test_gpu.py, tests/executors/test_device_check.py)."""

from __future__ import annotations

import types
from typing import Any

MB = 2**20


class FakeNvmlError(Exception):
    pass


class NVMLError_Timeout(FakeNvmlError):  # noqa: N801 - the name pynvml uses
    pass


class FakeNvml:
    """A pynvml stand-in: one or more devices whose answers a test can script."""

    nvmlEventTypeXidCriticalError = 8

    def __init__(self, count: int = 1, used_mb: list[float] | None = None, util: list[float] | None = None,
                 fail_init: bool = False, lose_after: int | None = None, ecc: list[int] | None = None,
                 events: list[int] | None = None, retired_pending: bool = False) -> None:
        self.count = count
        self.used = list(used_mb or [100.0])
        self.util = list(util or [50.0])
        self.fail_init = fail_init
        self.lose_after = lose_after  # memory reads that succeed before the device is lost
        self.ecc = list(ecc) if ecc is not None else None
        self.events = list(events) if events is not None else None
        self.retired_pending = retired_pending
        self.mem_calls = 0
        self.inits = 0
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise FakeNvmlError("Driver Not Loaded")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetName(self, h: str) -> bytes:
        return b"Fake GPU 80GB"

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
        self.mem_calls += 1
        if self.lose_after is not None and self.mem_calls > self.lose_after:
            raise FakeNvmlError("GPU is lost")
        used = self.used[min(self.mem_calls - 1, len(self.used) - 1)]
        return types.SimpleNamespace(total=81920 * MB, used=used * MB, free=(81920 - used) * MB)

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        i = min(max(self.mem_calls - 1, 0), len(self.util) - 1)
        return types.SimpleNamespace(gpu=self.util[i], memory=0)

    def nvmlDeviceGetTotalEccErrors(self, h: str, err_type: int, counter: int) -> int:
        if self.ecc is None:
            raise FakeNvmlError("Not Supported")
        return self.ecc.pop(0) if len(self.ecc) > 1 else self.ecc[0]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: str) -> int:
        return 1 if self.retired_pending else 0

    # events: only when the test scripts some
    def nvmlEventSetCreate(self) -> str:
        if self.events is None:
            raise FakeNvmlError("Not Supported")
        return "set"

    def nvmlDeviceRegisterEvents(self, h: str, kinds: int, s: str) -> None:
        return None

    def nvmlEventSetWait_v2(self, s: str, timeout_ms: int) -> Any:
        if self.events:
            return types.SimpleNamespace(eventData=self.events.pop(0))
        raise NVMLError_Timeout("Timeout")

    def nvmlEventSetFree(self, s: str) -> None:
        return None
