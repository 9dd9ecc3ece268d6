"""looper predict end to end: the night's best weights (or --weights) on whole pages through the workspace's
evaluate.py, and each page's boxes are the ones evaluate.py's MATCHES.json lists for it (the same tiles,
NMS, seam drop and merge: no second tiler), on the tiny test pages (one tile each) and on a 1536-px mosaic
(4 tiles, seams crossing symbols). Also ``looper export`` and ``predict`` default to the last night's tag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from looper.ship.predict import RESULTS_NAME, predict
from looper.store import Store
from tests.e2e.test_export import LOOPER, REPO, WEIGHTS, _mosaic, _workspace

pytestmark = pytest.mark.e2e


def _matches(data: Path, weights: Path, out: Path) -> dict[str, list[tuple]]:
    done = subprocess.run([sys.executable, str(REPO / "evaluate.py"), "--weights", str(weights), "--data", str(data),
                           "--out", str(out / "METRICS.json")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    pages = json.loads((out / "MATCHES.json").read_text())["pages"]
    assert all(not p.get("fp_dropped") for p in pages)  # every box listed: the comparison is whole
    return {p["page"]: sorted((d["class"], tuple(d["box"]), d["score"]) for d in p["predictions"]) for p in pages}


def _ours(results: dict) -> dict[str, list[tuple]]:
    names = {c["id"]: c["name"] for c in results["categories"]}
    files = {im["id"]: Path(im["file_name"]).name for im in results["images"]}
    out: dict[str, list[tuple]] = {f: [] for f in files.values()}
    for a in results["annotations"]:
        x, y, w, h = a["bbox"]
        box = tuple(round(float(v), 1) for v in (x, y, x + w, y + h))
        out[files[a["image_id"]]].append((names[a["category_id"]], box, round(a["score"], 4)))
    return {k: sorted(v) for k, v in out.items()}


def test_predict_gives_each_page_the_boxes_evaluate_py_matched(tiny_data: Path, tiny_weights: Path, tmp_path: Path):
    root = _workspace(tmp_path, tiny_data, tiny_weights)
    pages = sorted((tiny_data / "pages" / "test").glob("*.png"))
    env = dict(os.environ, LOOPER_WORKSPACE=str(root), YOLO_OFFLINE="1", YOLO_CONFIG_DIR=str(root / ".yolo"))
    done = subprocess.run([str(LOOPER), "predict", *map(str, pages), "--out", str(tmp_path / "pred")], cwd=root,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "with experiment #1 of tag 't' (run 2, seed 0 scored 0.5000" in done.stdout, done.stdout
    theirs = _matches(tiny_data, root / WEIGHTS, tmp_path / "eval")
    ours = _ours(json.loads((tmp_path / "pred" / RESULTS_NAME).read_text()))
    assert ours == theirs and sum(map(len, ours.values())) > 0
    for page in pages:
        assert (tmp_path / "pred" / f"{page.stem}.boxes.png").is_file()
    mosaic = _mosaic(tiny_data, tmp_path / "mosaic")  # 4 tiles of 832 px: boxes dropped at seams and merged
    got = predict(sorted((mosaic / "pages" / "test").glob("*.png")), root / WEIGHTS, tmp_path / "pm",
                  root / "evaluate.py", drawn=False)
    assert [f.name for f in got.files] == [RESULTS_NAME]
    theirs = _matches(mosaic, root / WEIGHTS, tmp_path / "em")
    assert _ours(json.loads((tmp_path / "pm" / RESULTS_NAME).read_text())) == theirs
    assert sum(map(len, theirs.values())) > 0


def test_export_and_predict_default_to_the_last_night_runs_tag(tiny_data: Path, tiny_weights: Path, tmp_path: Path):
    """looper.toml says tag "other", the last night ran tag "t": export ships t's best, as the report reads it."""
    root = _workspace(tmp_path, tiny_data, tiny_weights)
    (root / "looper.toml").write_text(f'[loop]\ntag = "other"\n[data]\ndir = "{tiny_data}"\n')
    store = Store(root / "experiments.db")
    store.add_event("t", "start", "daemon started")
    store.close()
    env = dict(os.environ, LOOPER_WORKSPACE=str(root), YOLO_OFFLINE="1", YOLO_CONFIG_DIR=str(root / ".yolo"))
    done = subprocess.run([str(LOOPER), "export", "--out", str(tmp_path / "best.pt")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "exported experiment #1" in done.stdout, done.stderr + done.stdout
    done = subprocess.run([str(LOOPER), "export", "--out", str(tmp_path / "o.pt"), "--tag", "other"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "tag 'other' has no best yet" in done.stdout + done.stderr
