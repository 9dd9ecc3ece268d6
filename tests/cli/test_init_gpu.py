"""`looper init --gpu`: a night sized for this machine's GPU (NVML's reading, the cores), written into looper.toml
and said; without a GPU to read, a clear error and no folder; a GPU seen without --gpu is said once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fakes.nvml import FakeNvml
from typer.testing import CliRunner

from looper.cli import app
from looper.config import load_config
from looper.core.run.slots import fill_words, gpu_slots, runs_per_gpu
from looper.night import cores

runner = CliRunner()


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """This machine as NVML and the scheduler see it: a fake pynvml module (no GPU here) and 16 cores."""
    def make(nvml: FakeNvml, n_cores: int = 16) -> FakeNvml:
        monkeypatch.setitem(sys.modules, "pynvml", nvml)
        monkeypatch.setattr(cores, "usable_cores", lambda: list(range(n_cores)))
        return nvml
    return make


def _committed_toml(root: Path) -> str:
    return subprocess.run(["git", "show", "HEAD:looper.toml"], cwd=root, capture_output=True, text=True,
                          check=True).stdout


def test_init_gpu_on_a_one_gpu_machine_writes_a_night_its_preflight_allows(tmp_path: Path, machine) -> None:  # noqa: ANN001
    machine(FakeNvml(count=1, used_mb=[100.0]))  # 81,820 MB free
    r = runner.invoke(app, ["init", str(tmp_path / "w"), "--preset", "demo", "--gpu"])
    assert r.exit_code == 0, r.output
    cfg = load_config(tmp_path / "w" / "looper.toml")
    assert cfg.executor.require_gpu is True
    assert (cfg.loop.seed_jobs, cfg.loop.workers) == (4, 1)  # the demo's cap of 4 seeds; 2 x 4 processes fit 15
    assert (cfg.loop.max_steps, cfg.loop.baseline_seeds) == (169, 8)  # the preset's other keys stand
    plan = gpu_slots(81_820, None, 16)
    sj, w = cfg.loop.seed_jobs, cfg.loop.workers  # what was written: the preflight's memory rule holds, no fill note
    assert runs_per_gpu(sj, w, 0, 1, prestart=True) <= plan.by_memory and fill_words(plan, sj, w, 0, 1, True) == ""
    assert "require_gpu = true" in _committed_toml(tmp_path / "w")  # in the workspace's first commit
    assert "GPU night: Fake GPU 80GB (GPU 0 of 1 GPU, 81,820 MB free) and 16 cores: the GPU takes 8 runs" in r.output
    assert "seed_jobs = 4 (a challenger's seeds side by side, at most 4 with noise_reruns 3), workers = 1" in r.output
    assert "max_steps" not in r.output  # a fixed number of steps: nothing to warn of


def test_init_gpu_without_a_preset_caps_the_seeds_by_the_gpu_s_memory(tmp_path: Path, machine) -> None:  # noqa: ANN001
    machine(FakeNvml(count=1, used_mb=[100.0]))
    r = runner.invoke(app, ["init", str(tmp_path / "w"), "--gpu"])
    assert r.exit_code == 0, r.output
    cfg = load_config(tmp_path / "w" / "looper.toml")
    # a cap of 8 seeds (noise_reruns 7), 8 slots by the cores, but 8 trainings and 8 evaluations beside them need
    # 16 runs' memory and 15 fit: 4
    assert (cfg.executor.require_gpu, cfg.loop.seed_jobs, cfg.loop.workers, cfg.loop.max_steps) == (True, 4, 1, "auto")
    assert "at most 8 with noise_reruns 7), workers = 1" in r.output


def test_init_gpu_without_a_gpu_to_read_names_nvml_s_problem_and_makes_nothing(tmp_path: Path, machine) -> None:  # noqa: ANN001
    machine(FakeNvml(fail_init=True))
    r = runner.invoke(app, ["init", str(tmp_path / "w"), "--preset", "demo", "--gpu"])
    assert r.exit_code == 2, r.output
    assert "looper init --gpu: no GPU to size a night on: NVML could not start (no driver or no GPU)" in r.output
    assert "Driver Not Loaded" in r.output and not (tmp_path / "w").exists()


def test_init_without_gpu_on_a_gpu_machine_says_the_runs_train_on_the_cpu(tmp_path: Path, machine) -> None:  # noqa: ANN001
    machine(FakeNvml(count=2))
    r = runner.invoke(app, ["init", str(tmp_path / "w")])
    assert r.exit_code == 0, r.output
    assert load_config(tmp_path / "w" / "looper.toml").executor.require_gpu is False
    assert ("this machine has 2 GPUs and [executor] require_gpu = false: the runs train on the CPU" in r.output
            and "looper init --gpu also sizes [loop] seed_jobs and workers for a GPU night" in r.output)
    machine(FakeNvml(fail_init=True))  # no GPU: nothing said of one
    r = runner.invoke(app, ["init", str(tmp_path / "v")])
    assert r.exit_code == 0 and "GPU" not in r.output, r.output
