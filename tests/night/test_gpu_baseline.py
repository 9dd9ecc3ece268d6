"""A tag's baseline and the device it trained on, through the real Loop's setup on the fake executor with real git
and a real Store: a night on a GPU of another model than the baseline's, or on other cores than its budget was
measured on, measures a new baseline (looper.core.tag.drift); the same device keeps it."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from fakes.agent import ScriptedAgent
from fakes.executor import FakeExecutor
from harness import build_ws

from looper.config import load_config
from looper.core.verdicts.verdict import Verdict
from looper.night.display import Display
from looper.night.loop import Loop
from looper.night.notify import AppriseNotifier
from looper.store import Store
from night.test_gpu_slots import OneGpu

pytestmark = pytest.mark.e2e  # the real Loop's setup with real git (about 1 s each)


class ModelGpu(FakeExecutor):
    """The fake executor on a machine with one GPU of model ``name``: its runs train on cuda and come back with
    the harness's NVML figures naming it, as the local executor's sampler records them."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.probe = OneGpu(free_mb=140_000)
        self.probe.reading = dataclasses.replace(self.probe.reading, name=name)

    def preflight(self, require_gpu: bool, gpu: int | None = None) -> Verdict:
        super().preflight(require_gpu, gpu)
        return Verdict.passed({"executor": self.name, "gpu": self.probe.read().as_dict()})

    def train(self, job, on_line, cancel):  # type: ignore[no-untyped-def]
        tr = super().train(job, on_line, cancel)
        j = job.out_dir / "train.json"
        j.write_text(json.dumps({**json.loads(j.read_text()), "device": "cuda"}))
        tr.gpu = {"index": 0, "name": self.probe.reading.name, "mean_utilization_pct": 40.0, "busy_pct": 60.0,
                  "peak_memory_mb": 900.0, "samples": 3}
        return tr


def night(root, executor: FakeExecutor, said: io.StringIO) -> Loop:
    return Loop(root, load_config(root / "looper.toml"), Store(root / "experiments.db"), executor, ScriptedAgent({}),
                AppriseNotifier([]), display=Display(said), program_md="")


def baselines(root) -> list[int]:
    return [e.id for e in Store(root / "experiments.db").find_experiments(tag="t", kind="baseline", limit=10)]


def test_a_night_on_a_gpu_of_another_model_measures_a_new_baseline_and_the_same_model_keeps_it(tmp_path):
    """A person rents an H200 one night and an H100 the next: the tag's baseline (its noise, its step budget, its
    scores) was measured on the H200; the H100's runs would be compared with it. Before, only the config counted."""
    ws = build_ws(tmp_path / "ws", tmp_path / "queue", "", exec_sandbox="none", exec_require_gpu=True)
    said = io.StringIO()
    assert night(ws.root, ModelGpu("NVIDIA H200"), said).setup() is None
    (first,) = baselines(ws.root)
    assert night(ws.root, ModelGpu("NVIDIA H200"), said).setup() is None  # the same model: the same baseline
    assert baselines(ws.root) == [first]
    assert night(ws.root, ModelGpu("NVIDIA H100 80GB HBM3"), said).setup() is None
    assert len(baselines(ws.root)) == 2
    line = f"GPU NVIDIA H200 -> NVIDIA H100 80GB HBM3 since baseline #{first} was measured: measuring a new baseline"
    events = [e.message for e in Store(ws.root / "experiments.db").journal(kind="baseline")]
    assert line in events and line in said.getvalue()


def test_a_tag_measured_on_the_cpu_measures_a_new_baseline_when_its_runs_move_to_the_gpu(tmp_path):
    ws = build_ws(tmp_path / "ws", tmp_path / "queue", "", exec_sandbox="none")
    said = io.StringIO()
    assert night(ws.root, FakeExecutor(), said).setup() is None
    (first,) = baselines(ws.root)
    toml = ws.root / "looper.toml"
    toml.write_text(toml.read_text().replace('[executor]\n', '[executor]\nrequire_gpu = true\n'))
    assert night(ws.root, ModelGpu("NVIDIA H200"), said).setup() is None
    assert len(baselines(ws.root)) == 2
    assert f"executor.require_gpu False -> True since baseline #{first} was measured" in said.getvalue()


def test_a_budget_measured_on_other_cores_measures_a_new_baseline(tmp_path, monkeypatch):
    """The warm-up pinned the tag's steps on this machine's cores (each run's threads its share of them); the
    workspace moved to a machine of 16 cores (or back): the budget is stale, a new baseline measures it there."""
    import looper.night.cores as cores

    ws = build_ws(tmp_path / "ws", tmp_path / "queue", "", exec_sandbox="none", loop_max_steps="auto")
    said = io.StringIO()
    monkeypatch.setattr(cores, "usable_cores", lambda: [0, 1])
    assert night(ws.root, FakeExecutor(), said).setup() is None
    (first,) = baselines(ws.root)
    warm = Store(ws.root / "experiments.db").tag_record("t").noise["warmup"]
    assert warm["cores"] == 2
    assert night(ws.root, FakeExecutor(), said).setup() is None  # the same cores: the same baseline
    assert baselines(ws.root) == [first]
    monkeypatch.setattr(cores, "usable_cores", lambda: list(range(16)))
    assert night(ws.root, FakeExecutor(), said).setup() is None
    assert len(baselines(ws.root)) == 2
    assert f"cores this process may use 2 -> 16 since baseline #{first} was measured" in said.getvalue()
    assert Store(ws.root / "experiments.db").tag_record("t").noise["warmup"]["cores"] == 16
