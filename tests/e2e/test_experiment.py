"""End to end: tiny data, one short real training run, evaluate twice -> identical, complete METRICS.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from looper.core.scoring import matches as core_matches
from looper.core.scoring.classes import CLASSES

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def evaluate(weights: Path, data: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "evaluate.py"), "--weights", str(weights), "--data", str(data),
                           "--out", str(out), "--device", "cpu"], cwd=out.parent, capture_output=True, text=True,
                          timeout=300)


def test_train_then_evaluate_twice(tiny_data: Path, tiny_weights: Path, tmp_path: Path) -> None:
    train = json.loads((tiny_weights / "train.json").read_text())
    assert train["steps"] > 0 and train["epochs"] >= 1 and train["device"] == "cpu"
    assert set(train["final_losses"]) == {"box", "cls", "dfl"} and train["seconds"] > 0
    # THREADS = 0: torch steps on the threads the environment names (under xdist the worker's share, set by
    # tests/conftest.py), else on every core this process may use (Ultralytics alone sets one fewer; both
    # branches: tests/e2e/test_pretrained.py::test_train_py_steps_on_the_cores_it_may_use)
    omp = os.environ.get("OMP_NUM_THREADS")
    assert train["threads"] == (int(omp) if omp else len(os.sched_getaffinity(0)))
    a, b = tmp_path / "a" / "METRICS.json", tmp_path / "b" / "METRICS.json"
    for out in (a, b):
        out.parent.mkdir()
        proc = evaluate(tiny_weights / "weights.pt", tiny_data, out)
        assert proc.returncode == 0, proc.stderr
    assert a.read_bytes() == b.read_bytes()
    # the matched boxes beside it: same bytes, and the page-level counts they imply are METRICS.json's
    ma, mb = a.with_name("MATCHES.json"), b.with_name("MATCHES.json")
    assert ma.read_bytes() == mb.read_bytes()
    matches = json.loads(ma.read_text())
    assert core_matches.problems(matches) == []
    assert [p["page"] for p in matches["pages"]] == sorted(p.name for p in (tiny_data / "pages" / "test").glob("*.png"))
    implied = core_matches.implied_counts(matches)
    metrics = json.loads(a.read_text())
    for name, c in metrics["classes"].items():
        assert implied.get(name, {"tp": 0, "fp": 0, "fn": 0}) == {"tp": c["tp"], "fp": c["fp"], "fn": c["fn"]}, name
    m = json.loads(a.read_text())
    assert set(m["classes"]) == set(CLASSES)
    assert m["pages"] == 2 and m["truth"] == sum(c["support"] for c in m["classes"].values()) > 0
    assert m["predictions"] == sum(c["tp"] + c["fp"] for c in m["classes"].values())
    for name, c in m["classes"].items():
        assert set(c) == {"tp", "fp", "fn", "support", "precision", "recall", "f1", "count_error", "weight",
                          "ap50", "found"}, name
        assert len(c["found"]) == c["support"] and sum(c["found"]) == c["tp"] and set(c["found"]) <= {0, 1}, name
        assert (c["ap50"] is None) == (c["support"] == 0) and (c["ap50"] is None or 0.0 <= c["ap50"] <= 1.0), name
    assert m["confidence"] == 0.25 and m["ap_confidence"] == 0.001
    aps = [c["ap50"] for c in m["classes"].values() if c["support"]]
    assert m["map50"] == pytest.approx(sum(aps) / len(aps), abs=1e-5)


def test_evaluate_refuses_missing_inputs(tiny_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    proc = evaluate(tmp_path / "nope.pt", tiny_data, out)
    assert proc.returncode != 0 and "nope.pt" in proc.stderr and not out.exists()
    bogus = tmp_path / "bogus.pt"
    bogus.write_bytes(b"not a checkpoint")
    proc = evaluate(bogus, tmp_path / "no_data", out)
    assert proc.returncode != 0 and "no_data" in proc.stderr and not out.exists()
    proc = evaluate(bogus, tiny_data, out)
    assert proc.returncode != 0 and "bogus.pt" in proc.stderr and not out.exists()
