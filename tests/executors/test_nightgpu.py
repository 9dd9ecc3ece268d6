"""The night's watch of its GPUs (looper/executors/nightgpu.py): sampled here through a fake NVML, on a host by a
real ``python -m looper.executors.nightgpu watch`` process (its ssh end is tests/executors/ssh/test_ssh_executor_gpu.py)."""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path

import pytest
from fakes.nvml import FakeNvml

from looper import proc
from looper.executors import nightgpu
from looper.executors.gpu import NvmlProbe
from looper.executors.local import LocalExecutor


class Named(FakeNvml):
    def nvmlDeviceGetName(self, h: str) -> bytes:
        return f"GPU-{h}".encode()


def _night(executor: object, require_gpu: bool = True, gpu_index: int = 1) -> tuple[types.SimpleNamespace, list]:
    notes: list[tuple[str, str]] = []
    ctx = types.SimpleNamespace(
        cfg=types.SimpleNamespace(executor=types.SimpleNamespace(require_gpu=require_gpu, gpu_index=gpu_index)),
        executor=executor, journal=types.SimpleNamespace(event=lambda kind, words: notes.append((kind, words))))
    return ctx, notes


def test_the_night_note_says_every_gpu_its_workers_use_each_with_its_own_figures(tmp_path: Path) -> None:
    """Workers on several GPUs: the night's note sampled gpu_index's GPU alone; now each GPU the workers use, in
    one note, in GPU order (the report shows the night's last note)."""
    ex = LocalExecutor(tmp_path / "ws", gpu_index=1, probe=NvmlProbe(1, nvml=Named(count=3)))
    ctx, notes = _night(ex)
    with nightgpu.night_gpu(ctx, {2, 1}):
        pass
    with nightgpu.night_gpu(ctx):  # no GPU named: gpu_index's
        pass
    with nightgpu.night_gpu(ctx, {5}):  # one NVML does not see: said, not left out
        pass
    ctx.cfg.executor.require_gpu = False
    with nightgpu.night_gpu(ctx, {2}):  # a CPU night: nothing watched, no note
        pass
    assert [kind for kind, _ in notes] == ["note", "note", "note"]
    both, one, unseen = (words for _, words in notes)
    assert both.startswith(f"{nightgpu.NIGHT_GPU} busy 100.0% of 1 samples (1 s), mean utilisation 50.0%"), both
    assert "on GPU 1 (GPU-h1)" in both and "on GPU 2 (GPU-h2)" in both and "GPU 0" not in both
    assert both.index("on GPU 1") < both.index("; busy") < both.index("on GPU 2")
    assert "on GPU 1 (GPU-h1)" in one and "GPU 2" not in one
    assert unseen == f"{nightgpu.NIGHT_GPU} GPU 5 not sampled (no GPU at index 5 (NVML sees 3))"


def test_an_executor_that_cannot_watch_leaves_no_note(tmp_path: Path) -> None:
    ctx, notes = _night(types.SimpleNamespace(watch_gpus=lambda gpus: None))
    with nightgpu.night_gpu(ctx, {0}):
        pass
    assert notes == []


def _launch(code: str) -> proc.Launched:
    return proc.launch([sys.executable, "-c", code], cwd=Path.cwd(), env=None, hold=True)


@pytest.mark.e2e  # real processes (a second each)
def test_the_host_s_watch_samples_until_told_to_finish_and_answers_its_figures() -> None:
    """The real module as the host runs it: it samples until its standard input closes, then prints one line
    (here NVML cannot start: no GPU on this machine, or one; either way a figure for each GPU asked for)."""
    launched = proc.launch([sys.executable, "-m", "looper.executors.nightgpu", "watch", "--index=0", "--index=1"],
                           cwd=Path.cwd(), env=None, hold=True)
    time.sleep(0.5)
    assert launched.proc.poll() is None  # still watching: the night goes on
    figures = nightgpu.RemoteWatch(launched, "gpu-box", {0, 1}).stop()
    assert [(g["index"], g["host"]) for g in figures] == [(0, "gpu-box"), (1, "gpu-box")]
    assert all(g["samples"] > 0 or "NVML" in g.get("problem", "") or "no GPU at index" in g.get("problem", "")
               for g in figures), figures
    assert launched.proc.poll() is not None


@pytest.mark.e2e
def test_a_watch_that_dies_or_never_answers_is_said_as_such_never_as_figures() -> None:
    died = nightgpu.RemoteWatch(_launch("import sys; print('ssh: connection closed'); sys.exit(255)"), "gpu-box", {0})
    time.sleep(0.3)
    assert died.stop() == [{"index": 0, "samples": 0, "host": "gpu-box",
                            "problem": "the watch ended with exit 255: ssh: connection closed"}]
    wrong = nightgpu.RemoteWatch(_launch("print('{\"figures\": 3}')"), "gpu-box", {0})
    assert wrong.stop()[0]["problem"].startswith("the watch ended with exit 0: {")
    deaf = _launch("import time; time.sleep(60)")  # ignores its standard input closing
    started = time.monotonic()
    assert nightgpu.RemoteWatch(deaf, "gpu-box", {3}, finish_s=1).stop() == [
        {"index": 3, "samples": 0, "host": "gpu-box", "problem": "no answer in 1 s"}]
    assert time.monotonic() - started < 10 and deaf.proc.poll() is not None  # its group killed
    line = nightgpu.night_gpu_line([{"index": 3, "samples": 0, "host": "gpu-box", "problem": "no answer in 1 s"}])
    assert line == f"{nightgpu.NIGHT_GPU} GPU 3 of gpu-box not sampled (no answer in 1 s)"
