"""What a tag's baseline depends on (looper.core.tag.drift): a change since it was measured measures a new one."""

from __future__ import annotations

import json

import pytest

from looper.core.tag.drift import baseline_drift


def test_what_a_baseline_depends_on_budget_step_budget_data_scale_and_seed_executor_kind_and_gpu():
    then = {"loop": {"budget_seconds": 20, "max_steps": 0, "tag": "a"}, "data": {"scale": "tiny", "seed": 0},
            "executor": {"kind": "local"}, "agent": {"kind": "planner"}}
    now = json.loads(json.dumps(then))
    assert baseline_drift(then, now) == []
    now["loop"]["tag"], now["agent"]["kind"] = "b", "command"  # not what a baseline measures
    assert baseline_drift(then, now) == []
    now["loop"]["budget_seconds"], now["data"]["scale"], now["data"]["seed"] = 90, "demo", 1
    now["executor"]["kind"], now["loop"]["max_steps"] = "ssh", "auto"
    assert baseline_drift(then, now) == ["loop.budget_seconds 20 -> 90", "loop.max_steps 0 -> auto",
                                         "data.scale tiny -> demo", "data.seed 0 -> 1", "executor.kind local -> ssh"]
    assert baseline_drift(None, now) == [] and baseline_drift({"loop": {}}, now) == []  # unknown: unchanged


@pytest.mark.parametrize("then, now, said", [
    ((1, 1, "local"), (1, 2, "local"), "runs at a time (loop.seed_jobs x loop.workers) 1 -> 2"),  # the GPU slots' advice
    ((4, 1, "local"), (2, 2, "local"), None),     # 4 at a time either way
    ((2, 2, "local"), (2, 1, "local"), "runs at a time (loop.seed_jobs x loop.workers) 4 -> 2"),
    ((1, 1, "ssh"), (1, 2, "ssh"), "runs at a time (loop.seed_jobs x loop.workers) 1 -> 2"),  # all on the host
    ((1, 2, "local"), (1, 2, "ssh"), None),       # 2 at a time here, then 2 on the ssh host (its kind: changed)
    ((2, 2, "ssh"), (1, 2, "slurm"), "runs at a time (loop.seed_jobs x loop.workers) 4 -> 1"),  # SLURM: one a job
])
def test_a_baseline_depends_on_the_runs_at_a_time_its_budget_was_measured_under(then, now, said):
    """The warm-up's steps, the fit run's wall clock and a wall-clock run's steps were measured under the runs
    that trained at once; raising workers (as the GPU slots note advises) would cut the tag's runs short."""
    def cfg(seed_jobs: int, workers: int, kind: str) -> dict:
        return {"loop": {"budget_seconds": 20, "max_steps": 30, "seed_jobs": seed_jobs, "workers": workers},
                "data": {"scale": "tiny", "seed": 0}, "executor": {"kind": kind}}
    changed = [c for c in baseline_drift(cfg(*then), cfg(*now)) if not c.startswith("executor.kind")]
    assert changed == ([said] if said else [])


@pytest.mark.parametrize("then_gpus, now_gpu, said", [
    ({"NVIDIA H200"}, "NVIDIA H100 80GB HBM3", "GPU NVIDIA H200 -> NVIDIA H100 80GB HBM3"),  # another model
    ({"NVIDIA H200"}, "NVIDIA H200", None),                  # the same model
    ({"NVIDIA A10", "NVIDIA H200"}, "NVIDIA H200", None),    # a baseline whose runs trained on both: one of them
    ({"NVIDIA H200", "NVIDIA A10"}, "NVIDIA L4", "GPU NVIDIA A10 / NVIDIA H200 -> NVIDIA L4"),
    (set(), "NVIDIA H200", None),                            # the baseline's GPU not known (CPU runs, a SLURM node)
    ({"NVIDIA H200"}, "", None),                             # the night's GPU not known: the preflight says why
])
def test_a_baseline_depends_on_the_model_of_gpu_its_runs_trained_on(then_gpus, now_gpu, said):
    cfg = {"loop": {"budget_seconds": 20}, "executor": {"kind": "local", "require_gpu": True}}
    assert baseline_drift(cfg, cfg, then_gpus, now_gpu) == ([said] if said else [])


@pytest.mark.parametrize("then, now, said", [
    (False, True, "executor.require_gpu False -> True"),  # CPU runs then, GPU runs now: another regime
    (True, False, "executor.require_gpu True -> False"),
    (None, True, None),                                    # a baseline recorded before the key: unknown
])
def test_a_baseline_depends_on_whether_its_runs_trained_on_a_gpu(then, now, said):
    def cfg(require_gpu: bool | None) -> dict:
        return {"executor": {"kind": "local", **({} if require_gpu is None else {"require_gpu": require_gpu})}}
    assert baseline_drift(cfg(then), cfg(now)) == ([said] if said else [])



@pytest.mark.parametrize("then, now, said", [
    (16, 8, "cores this process may use 16 -> 8"),   # the step budget was measured on 16 cores
    (2, 16, "cores this process may use 2 -> 16"),
    (16, 16, None),
    (None, 8, None),                                 # not recorded (a budget pinned before, or none pinned)
    (16, None, None),                                # not known now (another executor's machine)
])
def test_a_baseline_depends_on_the_cores_its_budget_was_measured_on(then, now, said):
    cfg = {"executor": {"kind": "local"}}
    assert baseline_drift(cfg, cfg, then_cores=then, now_cores=now) == ([said] if said else [])
