"""The real thing through the loop: looper init, the real prepare.py (tiny scale), the real
train.py under the loop's budget, the real evaluate.py, the built-in planner with the real
program.md. Whatever a 20-second model manages, the loop must tell the truth about it:
a measured result with all 26 classes, or a halt that says the baseline cannot gate; never a
harness error about the data (Ultralytics writes label caches into the data folder)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from looper.workspace import init_workspace

pytestmark = pytest.mark.e2e


def test_real_night_on_tiny_data(tmp_path: Path):
    root = init_workspace(tmp_path / "ws", preset="tiny")
    r = subprocess.run([sys.executable, "-m", "looper.cli", "run", "--max-experiments", "1"], cwd=root,
                       capture_output=True, text=True, timeout=600)
    con = sqlite3.connect(root / "experiments.db")
    con.row_factory = sqlite3.Row
    rows = [dict(x) for x in con.execute("SELECT * FROM experiments ORDER BY id")]
    base, cand = rows[0], rows[1]
    assert base["kind"] == "baseline" and base["status"] == "keep", (r.stdout, r.stderr)
    classes = con.execute("SELECT class_name FROM class_metrics WHERE experiment_id=?", (base["id"],)).fetchall()
    assert len(classes) == 26  # every class of the real data set, measured on whole test pages
    metrics = json.loads(base["metrics_json"])
    assert metrics["pages"] == 2 and metrics["truth"] > 0
    # the planner's first step of phase 1, applied to the real train.py's block
    assert cand["kind"] == "candidate" and cand["description"].startswith("LR0 ")
    assert "data" not in (cand["blocking_json"] or "").lower() or "cannot gate" in cand["blocking_json"]
    if metrics["predictions"] == 0:
        # a baseline that found nothing cannot gate anything: the loop says so and halts
        assert r.returncode == 3, r.stdout + r.stderr
        assert cand["status"] == "error" and "cannot gate" in cand["blocking_json"]
    else:
        assert r.returncode == 0, r.stdout + r.stderr
        assert cand["status"] in ("keep", "discard", "inconclusive"), cand
    assert (root / "data" / "manifest.json").is_file()
    assert list((root / "runs" / "tiny").glob("*/*/out/weights.pt"))
