"""The preflight's look at the run's device the way a run sees it (looper/executors/devicecheck.py): the real
sandbox (bwrap), the real run limits (prlimit's RLIMIT_DATA), the real torch, in fresh processes. On this CPU
machine the device is the CPU, or a CUDA device torch cannot use; on a GPU the same code runs on CUDA
(bench/gpu_check.py's night goes through it)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from fakes.nvml import FakeNvml

from looper.config import LimitsConfig
from looper.core.run.probe import BARE, BOX, NO_MEMORY_LIMIT, NO_SANDBOX
from looper.executors import devicecheck, sandbox
from looper.executors import limits as run_limits
from looper.executors.gpu import GpuReading, NvmlProbe
from looper.executors.local import LocalExecutor

pytestmark = pytest.mark.e2e  # torch imported in fresh sandboxed processes: 3-12 s a test

NO_SUCH_GPU = "cuda:99"  # no torch here can use it: a CPU build has no driver, a GPU machine not 100 GPUs


@pytest.fixture
def limited():
    """The daemon's run limits as a night sets them (two runs at a time), put back after."""
    before = run_limits.current()

    def configure(memory: int = 0) -> run_limits.Settings:
        return run_limits.configure(LimitsConfig(memory_max_bytes=memory), 2)

    yield configure
    run_limits._SETTINGS[0] = before


def test_a_box_whose_torch_can_use_the_device_passes_in_one_attempt_and_leaves_nothing(tmp_path: Path, limited) -> None:
    limited()  # each run's share of 75 % of this machine's memory
    ex = LocalExecutor(tmp_path / "ws", python=sys.executable)
    did, problem = ex.device_check("cpu")
    assert (did, problem) == ("torch on cpu in a run's box: ok (box)", "")
    assert list((tmp_path / "ws" / ".looper" / "boxes").iterdir()) == []  # its box folder removed


def test_a_memory_limit_torch_cannot_start_under_is_named_with_the_key_that_sets_it(tmp_path: Path, limited) -> None:
    """200 MiB of RLIMIT_DATA: torch's import dies in the box; without the limit it answers, so the words say the
    memory limit is the part, and the key (issue 46's unmeasured risk: CUDA under the share)."""
    limited(200 << 20)
    did, problem = LocalExecutor(tmp_path / "ws", python=sys.executable).device_check("cpu")
    assert did == "torch on cpu in a run's box: failed (box, no memory limit)"
    assert problem.startswith("torch cannot use cpu in a run's box (exit ")
    assert "without the run's memory limit it can" in problem and "[limits] memory_max_bytes = 209715200" in problem


def test_a_sandbox_that_cannot_start_is_named_as_the_part_that_breaks_it(tmp_path: Path, limited) -> None:
    """A bwrap that fails (here a stand-in that exits 1; on a machine, one that does not bind the GPU): the box
    fails with and without the memory limit, and outside the sandbox torch answers."""
    limited()
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: cannot bind /dev/nvidia0' >&2\nexit 1\n")
    fake.chmod(0o755)
    s = run_limits.current()
    tried = devicecheck.attempts("cpu", python=sys.executable, env={}, policy=sandbox.SandboxPolicy(bwrap=str(fake)),
                                 caps=s.caps, folder=tmp_path / "check")
    assert [a.where for a in tried] == [BOX, NO_MEMORY_LIMIT, NO_SANDBOX]
    assert [a.answered("cpu") for a in tried] == [False, False, True]
    assert "bwrap: cannot bind /dev/nvidia0" in tried[0].output


def test_a_device_torch_cannot_use_at_all_is_said_after_every_part_is_taken_away(tmp_path: Path, limited) -> None:
    limited()
    did, problem = LocalExecutor(tmp_path / "ws", python=sys.executable).device_check(NO_SUCH_GPU)
    assert did == f"torch on {NO_SUCH_GPU} in a run's box: failed (box, no memory limit, no sandbox, bare)"
    assert f"torch here cannot use {NO_SUCH_GPU} at all" in problem
    assert "not without its memory limit, not outside the sandbox, not without any run limit either" in problem


def test_without_run_limits_or_a_sandbox_only_the_parts_there_are_taken_away(tmp_path: Path, limited) -> None:
    before = run_limits.current()
    run_limits._SETTINGS[0] = dataclasses.replace(before, caps=run_limits.core.Caps())  # [limits] run_limits = false
    tried = devicecheck.attempts(NO_SUCH_GPU, python=sys.executable, env={}, policy=sandbox.SandboxPolicy("none"),
                                 caps=run_limits.current().caps, folder=tmp_path / "check")
    assert [a.where for a in tried] == [BOX]  # nothing to take away: the box is the bare interpreter
    tried = devicecheck.attempts(NO_SUCH_GPU, python=sys.executable, env={}, policy=sandbox.SandboxPolicy(),
                                 caps=run_limits.current().caps, folder=tmp_path / "check2")
    assert [a.where for a in tried] == [BOX, NO_SANDBOX]
    assert BARE not in [a.where for a in tried]


class SeenGpu:
    """NVML's reading of a GPU (what the preflight read before): here one the runs cannot use."""

    def read(self) -> GpuReading:
        return GpuReading(ok=True, count=1, name="NVIDIA H200", memory_total_mb=143_000.0, memory_free_mb=140_000.0)


def test_a_gpu_nvml_sees_but_a_run_cannot_use_stops_the_preflight_before_any_run(tmp_path: Path, limited) -> None:
    """Before, a reading that was ok passed the preflight, and every run of the night then crashed on CUDA."""
    limited()
    ex = LocalExecutor(tmp_path / "ws", python=sys.executable, gpu_index=99, probe=SeenGpu())
    (tmp_path / "ws").mkdir()
    v = ex.preflight(require_gpu=True)
    assert not v.ok
    assert [b for b in v.blocking if b.startswith(f"torch cannot use {NO_SUCH_GPU} in a run's box")], v.blocking
    assert v.metrics["device_check"].startswith(f"torch on {NO_SUCH_GPU} in a run's box: failed (box,")
    assert "device_check" not in ex.preflight(require_gpu=False).metrics  # the CPU night: no check, no cost


def test_every_run_s_environment_numbers_gpus_as_nvml_does(tmp_path: Path) -> None:
    """[executor] gpu_index is NVML's index (the preflight, the sampler); CUDA's own order puts the fastest GPU
    first, so the runs are told to number them by PCI bus as NVML does."""
    from looper.executors.base import TrainJob

    ex = LocalExecutor(tmp_path / "ws", python=sys.executable)
    job = TrainJob(checkout=tmp_path, out_dir=tmp_path / "out", log_path=tmp_path / "log", seed=0, budget_seconds=1,
                   grace_seconds=1, stall_seconds=1, device="1")
    env = ex.train_env(job)
    assert (env["CUDA_DEVICE_ORDER"], env["LOOPER_DEVICE"]) == ("PCI_BUS_ID", "1")


def test_a_passed_check_holds_for_the_night_and_a_failed_one_is_made_again(tmp_path: Path, limited) -> None:
    """The preflight runs before every experiment: the check (a fresh box, torch's import: seconds) only until it
    passes once, so that the GPU does not wait for it each experiment; NVML is read each time."""
    limited()
    ex = LocalExecutor(tmp_path / "ws", python=sys.executable, gpu_index=99, probe=SeenGpu())
    (tmp_path / "ws").mkdir()
    calls: list[str] = []
    real = ex.device_check

    def counted(device: str) -> tuple[str, str]:
        calls.append(device)
        return real("cpu") if len(calls) > 1 else real(device)  # fails first (cuda:99), then passes (the CPU)

    ex.device_check = counted  # type: ignore[method-assign]
    assert not ex.preflight(require_gpu=True).ok
    assert ex.preflight(require_gpu=True).ok and ex.preflight(require_gpu=True).ok
    assert calls == [NO_SUCH_GPU, NO_SUCH_GPU]  # made again after the failure, then held


def _two_gpus(tmp_path: Path) -> tuple[LocalExecutor, list[str]]:
    """The local executor on a machine of 2 GPUs (a fake NVML), its check in a run's box recorded (the devices it
    was asked for) and passing."""
    ex = LocalExecutor(tmp_path / "ws", python=sys.executable, gpu_index=0, probe=NvmlProbe(0, nvml=FakeNvml(count=2)))
    (tmp_path / "ws").mkdir()
    checked: list[str] = []

    def check(device: str) -> tuple[str, str]:
        checked.append(device)
        return f"torch on {device} in a run's box: ok (box)", ""

    ex.device_check = check  # type: ignore[method-assign]
    return ex, checked


def test_a_worker_s_preflight_reads_and_checks_the_gpu_its_runs_use(tmp_path: Path, limited) -> None:
    """Workers on GPUs 0 and 1: the preflight before a worker's experiment reads that worker's GPU through the
    same NVML and checks a run can use it (each GPU's pass held for the night); a GPU NVML does not see is
    named, and nothing is checked on it."""
    limited()
    ex, checked = _two_gpus(tmp_path)
    assert ex.preflight(require_gpu=True, gpu=1).metrics["device_check"] == "torch on cuda:1 in a run's box: ok (box)"
    assert ex.preflight(require_gpu=True).ok and ex.preflight(require_gpu=True, gpu=1).ok
    assert checked == ["cuda:1", "cuda:0"]  # each GPU once a night
    v = ex.preflight(require_gpu=True, gpu=5)
    assert "require_gpu is set but no usable GPU: no GPU at index 5 (NVML sees 2)" in v.blocking
    assert checked == ["cuda:1", "cuda:0"]


@pytest.mark.parametrize("visible, blocked", [("1", True), ("1,0", True), ("0,1", False), ("0", False), (None, False)])
def test_a_cuda_visible_devices_that_renumbers_the_runs_gpus_stops_the_preflight_before_the_check(
        tmp_path: Path, limited, monkeypatch, visible, blocked) -> None:
    """The runs get the daemon's CUDA_VISIBLE_DEVICES (the sandbox passes it), and number the GPUs by PCI bus: with
    ``1`` a run told cuda:0 trains on NVML's GPU 1, while the preflight, the sampler and the slots read NVML's GPU 0.
    On a machine of 2 GPUs that is a harness error naming the key to set, and nothing is checked in a box."""
    limited()
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    boxed = sandbox._env_args({}, clear=True)  # what a sandboxed run's environment is built from
    passed = [boxed[i + 2] for i, a in enumerate(boxed) if a == "--setenv" and boxed[i + 1] == "CUDA_VISIBLE_DEVICES"]
    assert passed == ([] if visible is None else [visible])
    ex, checked = _two_gpus(tmp_path)
    v = ex.preflight(require_gpu=True)
    if not blocked:
        assert v.ok and checked == ["cuda:0"], v.blocking
        return
    assert v.blocking == [f"CUDA_VISIBLE_DEVICES={visible} in looper's environment renumbers the GPUs for the runs "
                          "(their cuda:0 is NVML's GPU 1) but not for NVML, by which [executor] gpu_index names the GPU "
                          "the night checks, samples and sizes: unset CUDA_VISIBLE_DEVICES there and set [executor] "
                          "gpu_index = 1 (nvidia-smi's index)"], v.blocking
    assert checked == []
