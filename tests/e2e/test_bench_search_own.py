"""bench_search --remeasure-own through real Ultralytics training and the real evaluate.py.

A saved bench (results.json with a tune arm's best hyperparameters) on tiny data: the Tuner's
answer and the baseline's settings are each re-trained by ``model.train`` for a few seconds,
``best.pt`` converted to weights-as-data and scored by evaluate.py; the records and the table
row land in results.json and on stdout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from looper.core.propose.hyperblock import read_knobs
from looper.workspace.create import shipped_pretrained

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def test_remeasure_own_trains_and_scores_the_tuners_answer(tiny_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "search"
    shutil.copytree(tiny_data, out / "repeat0" / "data")
    base = {"runs": [{"seed": 1000, "score": 0.0}, {"seed": 1001, "score": 0.01}], "mean": 0.005, "low": -0.06,
            "high": 0.07, "classes_found": 1}
    entry = {"repeat": 0, "baseline": base,
             "arms": {"tune": {"experiments": 2, "keeps": None, "best_in_loop": 0.0,
                               "best_hyperparameters": {"lr0": 0.005, "mosaic": 0.0, "shear": 0.0}}}}
    args = {"minutes": 1, "budget": 8, "scale": "tiny", "reseeds": 1, "device": "cpu"}
    (out / "results.json").write_text(json.dumps({"args": args, "repeats": [entry]}))
    done = subprocess.run([sys.executable, str(REPO / "bench" / "bench_search.py"), "--remeasure-own", "0",
                           "--out", str(out), "--reseeds", "1", "--budget", "8", "--scale", "tiny"],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    saved = json.loads((out / "results.json").read_text())["repeats"][0]
    for own in (saved["arms"]["tune"]["remeasured_own"], saved["baseline_own"]):
        assert own["training"] == "ultralytics model.train, best.pt"
        [run] = own["runs"]
        assert run["seed"] == 1000 and "error" not in run, run
        assert 0.0 <= run["score"] <= 1.0 and run["epochs"] >= 1
        assert own["mean"] == round(run["score"], 4)
    # the Tuner's answer was trained with its hyperparameters: Ultralytics' args.yaml of the run says so
    trained = (out / "repeat0" / "remeasure-tune-own" / "seed0" / "train" / "args.yaml").read_text()
    assert "lr0: 0.005" in trained
    # from train.py's starting checkpoint, as an Ultralytics .pt a YOLO user passes as pretrained=
    assert f"pretrained: {out / 'repeat0' / 'pretrained' / 'start.pt'}" in trained
    assert (out / "repeat0" / "pretrained" / "start.safetensors").read_bytes() == shipped_pretrained().read_bytes()
    lr0 = read_knobs((REPO / "train.py").read_text())["LR0"]  # the baseline's own settings
    assert f"lr0: {lr0}" in (out / "repeat0" / "remeasure-baseline-own" / "seed0" / "train" / "args.yaml").read_text()
    assert "| 0 | tune: its best hyperparameters, Ultralytics' own training (best.pt) |" in done.stdout
    assert "| 0 | baseline settings, Ultralytics' own training (best.pt) |" in done.stdout
