"""The night's threshold evaluation (looper/night/tuned.py): for the best and the baseline, the val and the
test stream through the executor, checked, then THRESHOLD.json; every failure is "not measured" with the
reason, never an exception (a stand-in context and executor: what the step does with what they say)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from looper.core.scoring.threshold import f1_at
from looper.executors import RunResult
from looper.night import tuned

TAG = "t"
STREAMS = {
    "val": {"a": [[0.9, True], [0.1, True], [0.05, False]]},
    "test": {"a": [[0.8, True], [0.2, True], [0.15, False]], "b": [[0.3, True]]},
}
SUPPORT = {"val": {"a": 2}, "test": {"a": 3, "b": 1}}


class Executor:
    name = "local"

    def __init__(self, forge: str = "", fail: str = "") -> None:
        self.calls: list[str] = []
        self.forge, self.fail = forge, fail

    def evaluate_stream(self, job, split: str, on_line=None, cancel=None) -> RunResult:  # noqa: ANN001
        self.calls.append(split)
        if split == self.fail:
            return RunResult(exit_code=2, log_tail="evaluate.py: no page folder SECRET/pages/val\n")
        stream = {"schema": 1, "split": split, "classes": ["a", "b"], "support": SUPPORT[split],
                  "ranked": STREAMS[split]}
        metrics = {"classes": {c: {"support": stream["support"].get(c, 0),
                                   "f1": f1_at([tuple(r) for r in stream["ranked"].get(c, [])],
                                               stream["support"].get(c, 0), 0.25)} for c in ("a", "b")}}
        if split == self.forge:
            metrics["classes"]["a"]["f1"] = 0.99
        job.metrics_path.write_text(json.dumps(metrics))
        job.metrics_path.with_name("STREAM.json").write_text(json.dumps(stream))
        return RunResult(exit_code=0, seconds=1.5)


def _ctx(root: Path, executor, best: int = 7, base: int = 1):  # noqa: ANN001
    notes: list[str] = []
    for exp_id in {best, base}:
        w = root / "runs" / TAG / f"{exp_id:05d}" / "main-s0" / "out" / "weights.pt"
        w.parent.mkdir(parents=True)
        w.write_bytes(b"w")
    store = SimpleNamespace(best=lambda tag: SimpleNamespace(id=best))
    return SimpleNamespace(
        root=root, store=store, executor=executor, tag=SimpleNamespace(name=TAG),
        main_worker=lambda: SimpleNamespace(wt=SimpleNamespace(path=root), device="cpu"),
        night=SimpleNamespace(cancel=threading.Event()),
        cfg=SimpleNamespace(loop=SimpleNamespace(budget_seconds=60, stall_seconds=60),
                            limits=SimpleNamespace(json_max_bytes=1 << 20, json_max_depth=64)),
        display=SimpleNamespace(note=notes.append),
        journal=SimpleNamespace(event=lambda *a, **k: notes.append(a[1]), redact=lambda s: s.replace("SECRET", "***")),
        notes=notes,
    ), base


@pytest.fixture
def baseline(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    def use(base: int) -> None:
        monkeypatch.setattr(tuned.queries, "tag_baseline", lambda store, tag: SimpleNamespace(id=base))
    return use


def _read(root: Path, exp_id: int) -> dict:
    return json.loads(tuned.result_path(root, TAG, exp_id).read_text())


def test_the_best_and_the_baseline_are_measured(tmp_path: Path, baseline) -> None:  # noqa: ANN001
    ex = Executor()
    ctx, base = _ctx(tmp_path, ex)
    baseline(base)
    tuned.measure_thresholds(ctx)
    assert ex.calls == ["val", "test", "val", "test"]
    got = _read(tmp_path, 7)
    assert got["status"] == "measured" and got["weights"] == f"runs/{TAG}/00007/main-s0/out/weights.pt"
    rows = {r["class"]: r for r in got["classes"]}
    assert rows["a"]["threshold"] == (0.05 + 0.1) / 2 and rows["b"]["threshold"] is None and got["eval_seconds"] == {
        "val": 1.5, "test": 1.5}
    assert _read(tmp_path, 1)["status"] == "measured"
    assert any("tuned thresholds of #7: weighted F1" in n for n in ctx.notes)


@pytest.mark.parametrize(("executor", "words"), [
    (Executor(fail="val"), "the val evaluation failed (exit 2): evaluate.py: no page folder ***/pages/val"),
    (Executor(forge="test"), "the test stream does not bear out its METRICS.json: class a: f1 0.99"),
    (SimpleNamespace(name="ssh"), "the ssh executor has no threshold evaluation (the local executor only)"),
])
def test_a_failure_is_not_measured_with_the_reason(tmp_path: Path, baseline, executor, words: str) -> None:  # noqa: ANN001
    ctx, base = _ctx(tmp_path, executor, best=3, base=3)
    baseline(base)
    tuned.measure_thresholds(ctx)  # never raises
    got = _read(tmp_path, 3)
    assert got["status"] == "not measured" and got["reason"].startswith(words), got["reason"]


def test_no_weights_a_stop_and_a_bug_are_not_measured(tmp_path: Path, baseline, monkeypatch) -> None:  # noqa: ANN001
    ctx, base = _ctx(tmp_path, Executor(), best=3, base=3)
    baseline(base)
    (tmp_path / "runs" / TAG / "00003" / "main-s0" / "out" / "weights.pt").unlink()
    tuned.measure_thresholds(ctx)
    assert _read(tmp_path, 3)["reason"] == f"no weights of #3 are left in runs/{TAG}/00003"
    (tmp_path / "runs" / TAG / "00003" / "canary-eval-s0" / "out").mkdir(parents=True)
    (tmp_path / "runs" / TAG / "00003" / "canary-eval-s0" / "out" / "weights.pt").write_bytes(b"w")
    assert tuned.run_weights(tmp_path, TAG, 3) is None  # a canary's weights are never the experiment's
    (tmp_path / "runs" / TAG / "00003" / "rerun-s4" / "out").mkdir(parents=True)
    (tmp_path / "runs" / TAG / "00003" / "rerun-s4" / "out" / "weights.pt").write_bytes(b"w")
    ctx.night.cancel.set()
    tuned.measure_thresholds(ctx)
    assert _read(tmp_path, 3)["reason"] == "the daemon was stopped before it finished"
    monkeypatch.setattr(tuned, "_measure", lambda ctx, exp_id: 1 / 0)
    tuned.measure_thresholds(ctx)
    assert _read(tmp_path, 3)["reason"] == "internal error: ZeroDivisionError: division by zero"


def test_a_broken_store_is_a_note(tmp_path: Path) -> None:
    ctx, _ = _ctx(tmp_path, Executor())
    ctx.store = SimpleNamespace(best=lambda tag: 1 / 0)
    tuned.measure_thresholds(ctx)
    assert ctx.notes == ["tuned thresholds not measured: ZeroDivisionError: division by zero"]
