"""The SSH executor and the host's GPU, against a real sshd on 127.0.0.1: the preflight's GPU facts and
GPU check in a run's box, a host whose sessions renumber the GPUs, sampling during training, and the
night's watch on the host.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import tiers
from ssh_jobs import Make, _job

from looper.core.verdicts.verdict import Status
from looper.executors.ssh.executor import SshExecutor

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


# The "remote" is this machine (sshd on 127.0.0.1): one test per machine condition, decided
# by nvidia-smi (tests/tiers.py), not by the probe under test.

@tiers.NEEDS_GPU
def test_preflight_require_gpu_names_the_remote_gpu(make_executor: Make) -> None:
    v = make_executor(require_gpu=True).preflight(require_gpu=True)
    gpu = v.metrics.get("gpu", {})
    assert v.status is Status.PASS, v.blocking
    assert gpu.get("ok") is True and gpu["name"], gpu


@tiers.NEEDS_NO_GPU
def test_preflight_require_gpu_without_a_remote_gpu_is_an_error(make_executor: Make) -> None:
    v = make_executor(require_gpu=True).preflight(require_gpu=True)
    assert v.status is Status.ERROR
    assert not v.metrics.get("gpu", {}).get("ok")
    assert any("looper-test" in b and "GPU" in b for b in v.blocking), v.blocking


def test_a_host_whose_sessions_renumber_the_gpus_stops_the_gpu_preflight_naming_the_variable(make_executor: Make,
                                                                                           cuda1_host: str) -> None:
    """A host whose sessions set CUDA_VISIBLE_DEVICES=1 (a login's rc file; here the ssh client sends it): its runs get
    it (the host's sandbox passes it) and number the GPUs by PCI bus, so a run told cuda:0 trains on NVML's GPU 1
    while the preflight and the night's watch read GPU 0. The host says what its sessions get (``facts``); the
    preflight names it and checks nothing in a box. Where NVML sees one GPU there is no other to train on, and the
    GPU check in a run's box is what fails (cuda:0 is no GPU to torch there)."""
    ex = make_executor(host=cuda1_host)
    v = ex.preflight(require_gpu=True)
    assert ex.remote.ask("facts", what="the host's facts")["cuda_visible_devices"] == "1"
    words = (f"CUDA_VISIBLE_DEVICES=1 in the environment of {cuda1_host} renumbers the GPUs for the runs (their "
             "cuda:0 is NVML's GPU 1) but not for NVML")
    if (v.metrics.get("gpu") or {}).get("count") == 1:
        assert any("torch cannot use cuda:0" in b for b in v.blocking), v.blocking
        return
    assert any(b.startswith(words) for b in v.blocking) and "device_check" not in v.metrics, v.blocking
    plain = make_executor().preflight(require_gpu=True)  # the same host, its sessions without the variable
    assert not any("CUDA_VISIBLE_DEVICES" in b for b in plain.blocking), plain.blocking


def test_the_gpu_check_runs_on_the_host_as_a_run_runs_there_and_names_the_part_that_breaks_it(
        make_executor: Make) -> None:
    """The preflight's GPU check (looper/executors/devicecheck.py) on an ssh host: torch on the device in the host's
    sandbox under the limits the daemon asks for, judged here. On this CPU host the device is the CPU; a memory
    limit torch cannot start under is named, with its key; a request the host cannot read is refused."""
    from looper.core.run.limits import Caps
    from looper.executors import limits

    before = limits.current()
    ex = make_executor()
    host = ex.host
    assert ex.preflight(require_gpu=False).ok  # the host's folder and package, as a night's first preflight makes
    try:
        limits._SETTINGS[0] = limits.Settings(Caps(memory_max_bytes=4 << 30, pids_max=512), runs=1)
        assert ex.device_check("cpu") == (f"torch on cpu in a run's box on {host}: ok (box)", "")
        limits._SETTINGS[0] = limits.Settings(Caps(memory_max_bytes=200 << 20), runs=1)
        did, problem = ex.device_check("cpu")
        assert did == f"torch on cpu in a run's box on {host}: failed (box, no memory limit)"
        assert problem.startswith(f"on {host}: torch cannot use cpu in a run's box (exit ")
        assert "without the run's memory limit it can" in problem and "memory_max_bytes = 209715200" in problem
        limits._SETTINGS[0] = limits.Settings(Caps(memory_max_bytes=200 << 20), runs=0)
        did, problem = ex.device_check("cpu")
        assert did.endswith("not checked") and "refused the check: LOOPER_LIMITS: runs must be" in problem
    finally:
        limits._SETTINGS[0] = before
    assert list(Path(ex.remote.root()).joinpath("runs").glob("check-device-*")) == []  # removed on the host


@tiers.NEEDS_NO_GPU
def test_train_gpu_sampling_reports_without_gpu(make_executor: Make, checkout: Path, tmp_path: Path) -> None:
    r = make_executor().train(_job(checkout, tmp_path, device="cuda:0"), None, None)
    assert r.clean_exit
    assert r.gpu.get("lost") is False and r.gpu.get("available") is False
    assert r.gpu.get("problem"), r.gpu  # no GPU here: says why, never "lost"


@tiers.NEEDS_GPU
def test_train_gpu_sampling_samples_the_remote_gpu(make_executor: Make, checkout: Path, tmp_path: Path) -> None:
    r = make_executor().train(_job(checkout, tmp_path, device="cuda:0"), None, None)
    assert r.clean_exit
    assert r.gpu.get("available") is True and r.gpu.get("lost") is False, r.gpu


# -- the night's watch -----------------------------------------------------------------------------

def _watch_the_night(ex: SshExecutor) -> list[dict]:
    assert ex.preflight(require_gpu=False).ok  # the host's folder and package, as the night has them by then
    watch = ex.watch_gpus({0})
    assert watch is not None
    time.sleep(2)  # the night
    return watch.stop()


@tiers.NEEDS_GPU
def test_the_night_s_gpu_is_watched_on_the_host_over_its_own_connection(make_executor: Make) -> None:
    figures = _watch_the_night(make_executor())
    assert [(g["index"], g["host"]) for g in figures] == [(0, "looper-test")]
    assert figures[0]["samples"] >= 2 and figures[0]["name"] and figures[0]["busy_pct"] is not None, figures


@tiers.NEEDS_NO_GPU
def test_the_night_s_gpu_watch_on_a_host_without_one_answers_why_from_the_host(make_executor: Make) -> None:
    """The ssh executor's night watch (looper/executors/nightgpu.py) is the host's own process, told to finish
    when the night ends: here its answer is NVML's own reason (not a transport's: it ran there and answered)."""
    figures = _watch_the_night(make_executor())
    assert [(g["index"], g["host"], g["samples"]) for g in figures] == [(0, "looper-test", 0)]
    assert "NVML" in figures[0]["problem"] and "the watch ended" not in figures[0]["problem"], figures
