"""A fake executor: the :class:`looper.executors.Executor` Protocol, in-process.

It runs nothing. A run's outcome is decided by the fixture train.py's knobs (tests/fixture_ws/train.py:
SCENARIO, QUALITY, NOISE, BONUS, WEAK_CLASS, WEAK_RECALL, STEPS_FIT), read from the checkout's train.py,
and its score and matched boxes by the fixture evaluate.py's own rules (:func:`metrics_of`,
:func:`matches_of`, imported from that file), so a
night on this executor decides as the same night on the local executor would, in milliseconds a run.
``down = True`` makes every run a transport fault (the harness, not the change, is broken).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import threading
from pathlib import Path
from typing import Any

from looper.core.propose.pysource import parse
from looper.core.verdicts.verdict import Verdict
from looper.executors.base import EvalJob, LineSink, RunResult, TrainJob

FIXTURE = Path(__file__).resolve().parents[1] / "fixture_ws"
DATA_HASH = "fake-data-0001"


def _fixture_evaluate() -> Any:
    spec = importlib.util.spec_from_file_location("fixture_evaluate", FIXTURE / "evaluate.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


_FIXTURE_EVALUATE = _fixture_evaluate()
metrics_of, matches_of = _FIXTURE_EVALUATE.metrics_of, _FIXTURE_EVALUATE.matches_of


def knobs(train_py: Path) -> dict[str, Any]:
    """The UPPER_CASE literal assignments of a train.py (its knobs), by name."""
    out: dict[str, Any] = {}
    for node in parse(train_py.read_text(), "train.py").body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.isupper():
                try:
                    out[name] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    return out


class FakeExecutor:
    """Executor: preflight, ensure_data, data_hash, train, evaluate, reap; every call is in ``calls`` (``plan``'s
    figures in ``planned``)."""

    name = "fake"
    prestarts = False  # a gated run's slot is taken by the caller (looper.night.slots)

    def close(self) -> None:
        self._called("close")

    def plan(self, data_dir: str, runs: int) -> str:
        self.planned = (data_dir, runs)  # not in ``calls``: once per loop, before them
        return ""

    def gpu_count(self) -> int | None:
        """A fake GPU machine's count (a test's ``probe``), else not known."""
        probe = getattr(self, "probe", None)
        reading = probe.read() if probe is not None else None
        return reading.count if reading is not None and reading.ok else None

    def watch_gpus(self, gpus: object) -> None:
        return None  # a fake machine's GPUs are not sampled over the night

    def __init__(self, down: bool = False) -> None:
        self.down = down
        self.calls: list[tuple[str, int | None]] = []
        self._lock = threading.Lock()

    def _called(self, what: str, seed: int | None = None) -> None:
        with self._lock:
            self.calls.append((what, seed))

    def preflight(self, require_gpu: bool, gpu: int | None = None) -> Verdict:
        self._called("preflight")
        return Verdict.passed({"executor": self.name})

    def ensure_data(self, prepare_py: Path, data_dir: str, scale: str, seed: int) -> Verdict:
        self._called("ensure_data")
        return Verdict.passed({"hash": DATA_HASH})

    def data_hash(self, data_dir: str) -> Verdict:
        return Verdict.passed({"hash": DATA_HASH})

    def reap(self) -> list[str]:
        return []

    def train(self, job: TrainJob, on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        self._called("train", job.seed)
        job.out_dir.mkdir(parents=True, exist_ok=True)
        if self.down:
            return RunResult(exit_code=255, transport_exit_code=255, transport_error="ssh: connect to host gpu1: "
                             "Connection refused")
        k = knobs(job.checkout / "train.py")
        scenario = k.get("SCENARIO", "ok")
        job.log_path.write_text(f"fake train.py starting {scenario}\n")
        if scenario == "crash":
            return RunResult(exit_code=1, log_tail="Traceback (most recent call last):\n  File \"train.py\", line 40\n"
                             f"ValueError: boom at step {job.seed + 17}: bad tensor shape (3, 224)\n")
        if scenario == "oom":
            return RunResult(exit_code=1, log_tail="Traceback (most recent call last):\n"
                             "MemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
        if scenario == "vacuous":
            return RunResult(exit_code=0, log_tail="done, nothing saved\n")
        quality = k.get("QUALITY", 0.5) + k.get("BONUS", 0.0) + k.get("NOISE", 0.0) * ((job.seed % 3) - 1)
        (job.out_dir / "weights.pt").write_text(json.dumps(
            {"quality": quality, "weak_class": k.get("WEAK_CLASS", ""), "weak_recall": k.get("WEAK_RECALL", 0.0),
             "seed": job.seed}))
        fit = int(k.get("STEPS_FIT", 10))
        steps = 0 if scenario == "zero_steps" else min(fit, job.max_steps) if job.max_steps else fit
        (job.out_dir / "train.json").write_text(json.dumps(
            {"steps": steps, "epochs": 1, "seconds": 0.01, "peak_memory_mb": 1.0, "final_losses": {"box": 1.0},
             "device": "cpu", "seed": job.seed, "budget_seconds": job.budget_seconds, "max_steps": job.max_steps,
             "stopped_by": "steps" if job.max_steps and steps >= job.max_steps else "time"}))
        return RunResult(exit_code=0, seconds=0.01, log_tail=f"LOOPER_SUMMARY steps={steps}\n")

    def evaluate(self, job: EvalJob, on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        self._called("evaluate")
        job.metrics_path.unlink(missing_ok=True)
        weights = json.loads(job.weights.read_text())
        metrics = metrics_of(weights)
        (job.metrics_path.parent / "MATCHES.json").write_text(json.dumps(matches_of(metrics), sort_keys=True))
        job.metrics_path.write_text(json.dumps(metrics, sort_keys=True))
        return RunResult(exit_code=0, seconds=0.01)
