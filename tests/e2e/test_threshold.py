"""End to end: the threshold evaluation (issue 47) on the tiny data with the session's one tiny real model.

The local executor's ``evaluate_stream`` runs evaluate.py unchanged in the evaluation sandbox (with it
off too), on the val and the test split: its METRICS.json and MATCHES.json are byte for byte what
evaluate.py writes alone, its STREAM.json bears out that METRICS.json, and the test F1 the pure rule reads
off the stream at each class's val threshold is what evaluate.py itself reports with that confidence
pinned (recomputed here by running evaluate.py's own main with its CONFIDENCE replaced)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from looper.core.scoring import threshold as th
from looper.executors import EvalJob
from looper.executors.local import LocalExecutor
from looper.executors.sandbox import SandboxPolicy

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def _plain(weights: Path, data: Path, out: Path, split: str) -> None:
    out.parent.mkdir(parents=True)
    p = subprocess.run([sys.executable, str(REPO / "evaluate.py"), "--weights", str(weights), "--data", str(data),
                        "--out", str(out), "--split", split, "--device", "cpu"], cwd=out.parent, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr


def _at_confidence(weights: Path, data: Path, out: Path, t: float) -> dict:
    """evaluate.py's own main on the test split with its pinned confidence replaced by ``t``."""
    spec = importlib.util.spec_from_file_location("evaluate_at_t", REPO / "evaluate.py")
    ev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ev)
    ev.CONFIDENCE = t
    assert ev.main(["--weights", str(weights), "--data", str(data), "--out", str(out), "--device", "cpu"]) == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("mode", ["bwrap", "none"])
def test_the_threshold_evaluation_agrees_with_evaluate_py(tiny_data: Path, tiny_weights: Path, tmp_path: Path,
                                                          mode: str) -> None:
    if mode == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bwrap is not installed")
    ck = tmp_path / "ck"
    ck.mkdir()
    shutil.copy(REPO / "evaluate.py", ck / "evaluate.py")
    ex = LocalExecutor(tmp_path, python=sys.executable, sandbox=SandboxPolicy(mode=mode))
    ex.use_data(str(tiny_data))
    weights = tiny_weights / "weights.pt"
    streams = {}
    for split in ("val", "test"):
        metrics = tmp_path / "tuned" / split / "METRICS.json"
        metrics.parent.mkdir(parents=True)
        r = ex.evaluate_stream(EvalJob(checkout=ck, weights=weights, metrics_path=metrics,
                                       log_path=metrics.with_name("eval.log"), timeout_seconds=300,
                                       stall_seconds=120), split)
        assert r.clean_exit, r.log_tail[-3000:]
        plain = tmp_path / "plain" / split / "METRICS.json"
        _plain(weights, tiny_data, plain, split)
        assert metrics.read_bytes() == plain.read_bytes()  # evaluate.py's output, unchanged
        assert metrics.with_name("MATCHES.json").read_bytes() == plain.with_name("MATCHES.json").read_bytes()
        stream = json.loads(metrics.with_name("STREAM.json").read_text())
        assert th.problems(stream, split) == []
        assert th.disagreements(stream, json.loads(metrics.read_text())) == []
        streams[split] = stream
    rows = th.class_rows(streams["val"], streams["test"])
    tuned = [r for r in rows if r.threshold is not None and r.test_support > 0]
    assert tuned and all(r.why for r in rows if r.threshold is None)
    for t in sorted({r.threshold for r in tuned})[:3]:  # each a full evaluation: three at most
        again = _at_confidence(weights, tiny_data, tmp_path / f"at-{t}" / "METRICS.json", t)
        for r in (r for r in tuned if r.threshold == t):
            assert r.test_f1_tuned == pytest.approx(again["classes"][r.cls]["f1"], abs=1e-6), r
