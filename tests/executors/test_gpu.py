"""NvmlProbe and GpuSampler against injected fake NVML modules, and the real library once."""

from __future__ import annotations

import json
import time
import types
from typing import Any

import pytest
import tiers
from fakes.nvml import MB, FakeNvml

from looper.executors import gpu
from looper.executors.gpu import FATAL_XIDS, GpuSampler, NvmlProbe


def _probe_without_library() -> NvmlProbe:
    probe = NvmlProbe(0)

    def boom() -> Any:
        raise ImportError("No module named 'pynvml'")

    probe._lib = boom  # type: ignore[method-assign]
    return probe


# -- NvmlProbe -------------------------------------------------------------------------------

def test_probe_import_missing_is_not_ok_with_reason() -> None:
    r = _probe_without_library().read()
    assert not r.ok and "not importable" in r.problem and "pynvml" in r.problem


def test_probe_init_failure_names_the_driver() -> None:
    r = NvmlProbe(0, nvml=FakeNvml(fail_init=True)).read()
    assert not r.ok and "Driver Not Loaded" in r.problem


def test_probe_zero_devices() -> None:
    fake = FakeNvml(count=0)
    r = NvmlProbe(0, nvml=fake).read()
    assert not r.ok and r.count == 0 and "no GPU at index 0" in r.problem
    assert fake.shutdowns == 1  # NVML is always shut down again


def test_probe_index_beyond_count() -> None:
    r = NvmlProbe(2, nvml=FakeNvml(count=2)).read()
    assert not r.ok and "index 2" in r.problem and "sees 2" in r.problem


def test_probe_healthy_device_reports_numbers() -> None:
    r = NvmlProbe(0, nvml=FakeNvml(used_mb=[2048.0], util=[37.0], ecc=[0])).read()
    assert r.ok and r.problem == ""
    assert r.name == "Fake GPU 80GB" and r.count == 1
    assert r.memory_total_mb == pytest.approx(81920.0) and r.memory_used_mb == pytest.approx(2048.0)
    assert r.utilization_pct == 37.0 and r.ecc_uncorrected == 0
    assert r.as_dict()["ok"] is True


def test_a_healthy_reading_as_printed_holds_every_field_a_reader_parses() -> None:
    """The remote reading of a good device: ``ok`` true and ``problem`` empty, both present (on the H200 the
    printed reading lacked them: empty values were dropped), the memory figures with them."""
    d = NvmlProbe(0, nvml=FakeNvml(used_mb=[2048.0], util=[37.0], ecc=None)).read().as_dict()
    assert d["ok"] is True and d["problem"] == "" and d["count"] == 1
    assert d["memory_total_mb"] == pytest.approx(81920.0) and d["memory_free_mb"] == pytest.approx(81920.0 - 2048.0)
    assert "ecc_uncorrected" not in d  # not reported by this device: absent, not a made-up 0


def test_probe_device_lost_while_reading() -> None:
    r = NvmlProbe(0, nvml=FakeNvml(lose_after=0)).read()
    assert not r.ok and "GPU is lost" in r.problem


def test_probe_retired_pages_pending_is_not_ok() -> None:
    r = NvmlProbe(0, nvml=FakeNvml(retired_pending=True)).read()
    assert not r.ok and "retired pages" in r.problem


# The real NVML, one test per machine condition; which one applies is decided by nvidia-smi
# (tests/tiers.py), not by the probe under test.

@tiers.NEEDS_GPU
def test_real_nvml_probe_names_the_gpu() -> None:
    r = NvmlProbe(0).read()
    assert r.ok, r.problem
    assert r.name and r.count == len(tiers.nvidia_gpus())
    assert r.memory_total_mb > 0 and 0 <= r.memory_used_mb <= r.memory_total_mb
    assert r.as_dict()["ok"] is True


@tiers.NEEDS_NO_GPU
def test_real_nvml_probe_without_a_gpu_says_why() -> None:
    r = NvmlProbe(0).read()
    assert not r.ok and r.count == 0 and r.name == ""
    assert "NVML" in r.problem or "GPU" in r.problem, r.problem


@tiers.NEEDS_GPU
def test_real_sampler_samples_the_gpu() -> None:
    s = GpuSampler(0, interval=0.05)
    s.start()
    time.sleep(0.5)
    summary = s.stop()
    assert summary["available"] is True and summary["lost"] is False, summary
    assert summary["samples"] >= 1, summary


@tiers.NEEDS_NO_GPU
def test_real_sampler_without_a_gpu_says_why_and_is_never_lost() -> None:
    summary = GpuSampler(0, interval=0.05).start().stop()
    assert summary["available"] is False and summary["lost"] is False, summary
    assert summary["samples"] == 0 and summary["problem"], summary


# -- GpuSampler -------------------------------------------------------------------------------

def test_sampler_healthy_records_peak_and_mean() -> None:
    # the first memory read opens the device (total only); the next three are samples
    fake = FakeNvml(used_mb=[0.0, 100.0, 900.0, 400.0], util=[0.0, 10.0, 90.0, 50.0], ecc=[0])
    s = GpuSampler(0, nvml=fake, interval=0.01)
    s.start()
    s._stop.set()  # drive samples by hand for exact numbers
    assert s._thread is not None
    s._thread.join()
    samples_before = s.samples
    for _ in range(3 - samples_before):
        s.sample_once()
    summary = s.stop()
    assert summary["available"] and not summary["lost"]
    assert summary["samples"] == 3
    assert summary["peak_memory_mb"] == pytest.approx(900.0)
    assert summary["mean_utilization_pct"] == pytest.approx(50.0)
    assert summary["ecc_uncorrected_start"] == 0 and summary["ecc_uncorrected_end"] == 0
    assert fake.shutdowns == 1


def test_sampler_thread_polls_until_stopped() -> None:
    fake = FakeNvml(used_mb=[100.0, 200.0, 300.0])
    with GpuSampler(0, nvml=fake, interval=0.01) as s:
        import time

        deadline = time.monotonic() + 5
        while s.samples < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    summary = s.summary()
    assert summary["samples"] >= 3 and summary["peak_memory_mb"] == pytest.approx(300.0)


def test_sampler_import_missing_is_unavailable_not_lost() -> None:
    s = GpuSampler(0)

    def boom() -> Any:
        raise ImportError("No module named 'pynvml'")

    s._lib = boom  # type: ignore[method-assign]
    summary = s.start().stop()
    assert summary["available"] is False and summary["lost"] is False
    assert "not importable" in summary["problem"]


def test_sampler_init_failure_and_zero_devices() -> None:
    a = GpuSampler(0, nvml=FakeNvml(fail_init=True)).start().stop()
    assert a["available"] is False and "Driver Not Loaded" in a["problem"]
    b = GpuSampler(0, nvml=FakeNvml(count=0)).start().stop()
    assert b["available"] is False and "no GPU at index 0" in b["problem"] and not b["lost"]


def test_sampler_device_lost_mid_run() -> None:
    # start() opens the device (1 read) and takes the first sample (1 read); then it is gone
    fake = FakeNvml(lose_after=2)
    s = GpuSampler(0, nvml=fake, interval=0.01)
    s.start()
    assert s._thread is not None
    s._thread.join(timeout=5)  # the loop ends by itself once the device is lost
    summary = s.stop()
    assert summary["lost"] is True
    assert "stopped answering NVML mid-run" in summary["lost_reason"] and "GPU is lost" in summary["lost_reason"]
    assert summary["samples"] == 1


def test_sampler_fatal_xid_marks_lost_and_benign_xid_does_not() -> None:
    fatal = sorted(FATAL_XIDS)[0]
    s = GpuSampler(0, nvml=FakeNvml(events=[fatal]), interval=0.01)
    s.start()
    assert s._thread is not None
    s._thread.join(timeout=5)
    summary = s.stop()
    assert summary["lost"] and f"XID {fatal}" in summary["lost_reason"] and summary["xid"] == [fatal]

    s2 = GpuSampler(0, nvml=FakeNvml(events=[13]), interval=0.01)
    s2.start()
    import time

    deadline = time.monotonic() + 5  # until the sampler's thread has taken the event
    while not s2.xids and time.monotonic() < deadline:
        time.sleep(0.005)
    summary2 = s2.stop()
    assert summary2["xid"] == [13] and summary2["lost"] is False


def test_sampler_rising_ecc_marks_lost() -> None:
    fake = FakeNvml(ecc=[3, 5])
    summary = GpuSampler(0, nvml=fake, interval=0.01).start().stop()
    assert summary["lost"] and "rose from 3 to 5" in summary["lost_reason"]


def test_remote_read_prints_one_reading(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m looper.executors.gpu read``: what the ssh executor's GPU preflight parses."""
    assert gpu.main(["read", "--index", "0"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"ok", "problem", "count", "memory_total_mb"}
    # a reading either found a device or names why not: never "not ok" without a reason
    assert data["ok"] is (data["count"] > 0 and not data["problem"])
    assert data["ok"] or data["problem"]


def test_nvml_calls_of_every_sampler_in_the_process_never_overlap() -> None:
    """Each run's sampler and the night's share the daemon's process: their NVML calls go one at a time (on an
    H200, 8 runs' samplers and the night's calling at once ended the daemon with SIGSEGV)."""
    import time as _time

    inside, overlaps = [0], [0]

    class Slow(FakeNvml):
        def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
            inside[0] += 1
            overlaps[0] += inside[0] > 1
            _time.sleep(0.002)
            inside[0] -= 1
            return types.SimpleNamespace(total=81920 * MB, used=1024 * MB, free=80896 * MB)

    samplers = [GpuSampler(0, nvml=Slow(), interval=0.001).start() for _ in range(6)]
    deadline = _time.monotonic() + 5  # all six sampling at once until each has taken more than 3 samples
    while any(s.samples <= 3 for s in samplers) and _time.monotonic() < deadline:
        _time.sleep(0.005)
    summaries = [s.stop() for s in samplers]
    assert all(s["samples"] > 3 and not s["lost"] for s in summaries), summaries
    assert overlaps[0] == 0

