"""looper export end to end: a real tiny run's weights, recorded with their hash as the harness records
a run, exported with the command, loaded with ``ultralytics.YOLO`` and predicting the boxes evaluate.py
matched on the test pages (MATCHES.json), within a small tolerance; ONNX through Ultralytics' exporter."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from looper.core.scoring.metrics import Detection, drop_seam_boxes, merge_detections
from looper.core.scoring.tilegrid import tile_grid
from looper.core.verdicts.verdict import Outcome
from looper.ship import export as export_mod
from looper.store import Store
from looper.workspace.hashes import file_sha256

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
LOOPER = Path(sys.executable).with_name("looper")
WEIGHTS = "runs/t/00001/main-s0/out/weights.pt"


def _workspace(tmp_path: Path, tiny_data: Path, tiny_weights: Path) -> Path:
    """A workspace whose store holds one kept baseline with one run, recorded as record_run records it."""
    root = tmp_path / "ws"
    root.mkdir()
    for name in ("evaluate.py", "train.py", "prepare.py"):
        shutil.copy2(REPO / name, root / name)
    (root / "looper.toml").write_text(f'[loop]\ntag = "t"\n[data]\ndir = "{tiny_data}"\n')
    w = root / WEIGHTS
    w.parent.mkdir(parents=True)
    shutil.copy2(tiny_weights / "weights.pt", w)
    store = Store(root / "experiments.db")
    store.put_tag("t", branch="looper/t", base_commit="0" * 40, data_hash="d",
                  fixed_hashes={"evaluate.py": file_sha256(root / "evaluate.py")})  # what a night pins
    eid = store.start_experiment(tag="t", kind="baseline", config={}, description="baseline")
    store.record_outcome(eid, outcome=Outcome.KEEP, score=0.5, verdict={"status": "pass"})
    store.add_run(eid, role="rerun", seed=1, score=0.1, metrics={"weighted_f1": 0.1})  # no hash: never shipped
    store.add_run(eid, role="main", seed=0, score=0.5, metrics={"weighted_f1": 0.5},
                  weights_path=WEIGHTS, weights_sha256=file_sha256(w))
    store.close()
    return root


def _looper(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LOOPER_WORKSPACE=str(root), YOLO_OFFLINE="1", YOLO_CONFIG_DIR=str(root / ".yolo"))
    return subprocess.run([str(LOOPER), "export", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def _evaluate_module():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("evaluate_for_export_test", REPO / "evaluate.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _mosaic(tiny_data: Path, folder: Path) -> Path:
    """A data folder with one 1536-px test page, the tiny test pages 2 x 2 (0 1 / 1 0) with their truth:
    evaluate.py cuts it into 4 tiles of 832 px whose seams cross drawn symbols (a tiny page is one tile)."""
    from PIL import Image

    pages = sorted((tiny_data / "pages" / "test").glob("page_*.json"))[:2]
    images = [Image.open(p.with_suffix(".png")).convert("L") for p in pages]
    truths = [json.loads(p.read_text())["boxes"] for p in pages]
    side = images[0].width
    assert len(pages) == 2 and all(im.size == (side, side) for im in images)
    big = Image.new("L", (2 * side, 2 * side), 255)
    boxes = []
    for (c, r), k in zip(((0, 0), (1, 0), (0, 1), (1, 1)), (0, 1, 1, 0), strict=True):
        big.paste(images[k], (c * side, r * side))
        boxes += [{"class": b["class"], "box": [b["box"][0] + c * side, b["box"][1] + r * side,
                                                 b["box"][2] + c * side, b["box"][3] + r * side]} for b in truths[k]]
    test = folder / "pages" / "test"
    test.mkdir(parents=True)
    big.save(test / "page_000.png")
    (test / "page_000.json").write_text(json.dumps({"boxes": boxes}))
    shutil.copy2(tiny_data / "manifest.json", folder / "manifest.json")
    return folder


def _yolo_page(model, image: Path, ev, conf: float) -> tuple[list[Detection], int, int]:  # noqa: ANN001
    """One page through ultralytics.YOLO.predict tile by tile, merged as evaluate.py merges tiles; with
    the boxes dropped at a seam and those merged away (a duplicate from an overlapping tile)."""
    import numpy as np
    from PIL import Image

    page = np.asarray(Image.open(image).convert("L"), dtype=np.uint8)
    h, w = page.shape
    side = ev.tile_side(w, h, ev.TILE, ev.OVERLAP, ev.LEAST)
    assert min(w, h) >= side  # the tiny pages need no paper padding
    found: list[Detection] = []
    seen = 0
    for x0, y0 in tile_grid(w, h, side, ev.OVERLAP):
        tile = page[y0:y0 + side, x0:x0 + side]
        res = model.predict(np.stack([tile] * 3, axis=-1), imgsz=side, conf=conf, iou=ev.NMS_IOU,
                            max_det=ev.tile_max_det(side), verbose=False)[0]
        dets = [Detection(str(int(c)), (a + x0, b + y0, cc + x0, d + y0), float(s))
                for (a, b, cc, d), s, c in zip(res.boxes.xyxy.tolist(), res.boxes.conf.tolist(),
                                               res.boxes.cls.tolist(), strict=True)]
        seen += len(dets)
        found += drop_seam_boxes(dets, (x0, y0), side, (w, h))
    merged = merge_detections(found)
    return [d for d in merged if d.score >= conf], seen - len(found), len(found) - len(merged)


def _same(ours: list[tuple[str, tuple, float]], theirs: list[tuple[str, tuple, float]], tol: float) -> None:
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    for (c1, b1, s1), (c2, b2, s2) in zip(sorted(ours), sorted(theirs), strict=True):
        assert c1 == c2 and abs(s1 - s2) <= tol and max(abs(a - b) for a, b in zip(b1, b2, strict=True)) <= 0.05, \
            ((c1, b1, s1), (c2, b2, s2))


def test_export_loads_in_ultralytics_and_predicts_evaluates_boxes(tiny_data: Path, tiny_weights: Path,
                                                                  tmp_path: Path) -> None:
    from ultralytics import YOLO

    root = _workspace(tmp_path, tiny_data, tiny_weights)
    proc = _looper(root, "--out", str(tmp_path / "best.pt"))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "exported experiment #1 (run 2, seed 0 scored 0.5000, the highest of 1 run(s)" in proc.stdout
    model = YOLO(str(tmp_path / "best.pt"))
    classes = json.loads((tiny_data / "manifest.json").read_text())["classes"]
    assert [model.names[i] for i in sorted(model.names)] == classes
    ev = _evaluate_module()
    net = ev.load_model(root / WEIGHTS, "cpu")
    mosaic = _mosaic(tiny_data, tmp_path / "mosaic")
    assert len(tile_grid(1536, 1536, ev.tile_side(1536, 1536, ev.TILE, ev.OVERLAP, ev.LEAST), ev.OVERLAP)) == 4
    for data in (tiny_data, mosaic):  # the tiny pages one tile each; the mosaic 4 tiles, merged across seams
        out = tmp_path / "eval" / data.name / "METRICS.json"
        done = subprocess.run([sys.executable, str(REPO / "evaluate.py"), "--weights", str(root / WEIGHTS),
                               "--data", str(data), "--out", str(out)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        pinned = low = at_seams = merged_away = 0
        for page in json.loads(out.with_name("MATCHES.json").read_text())["pages"]:
            image = data / "pages" / "test" / page["page"]
            kept, dropped, merged = _yolo_page(model, image, ev, ev.CONFIDENCE)
            at_seams += dropped
            merged_away += merged
            ours = [(classes[int(d.cls)], d.box, d.score) for d in kept]
            theirs = [(p["class"], tuple(p["box"]), p["score"]) for p in page["predictions"]]
            _same(ours, theirs, 2e-3)  # MATCHES.json rounds scores to 4 places
            pinned += len(theirs)
            low += _same_tiles(model, net, image, ev, len(classes))
        assert pinned > 0 and low > pinned, (data.name, pinned, low)  # never an empty comparison
        if data is mosaic:  # the seams were there to be handled: boxes dropped at them and merged across them
            assert at_seams > 0 and merged_away > 0, (at_seams, merged_away)


def _same_tiles(model, net, image: Path, ev, nc: int) -> int:  # noqa: ANN001
    """Every box evaluate.py's AP ranks (score >= 0.001), tile by tile: YOLO.predict's against the
    evaluator's own forward pass and NMS (Ultralytics clips boxes to the tile; evaluate.py does not)."""
    import numpy as np
    import torch
    from PIL import Image

    page = np.asarray(Image.open(image).convert("L"), dtype=np.uint8)
    side = ev.tile_side(page.shape[1], page.shape[0], ev.TILE, ev.OVERLAP, ev.LEAST)
    n = 0
    for x0, y0 in tile_grid(page.shape[1], page.shape[0], side, ev.OVERLAP):
        tile = page[y0:y0 + side, x0:x0 + side]
        res = model.predict(np.stack([tile] * 3, axis=-1), imgsz=side, conf=0.001, iou=ev.NMS_IOU,
                            max_det=ev.tile_max_det(side), verbose=False)[0]
        ours = [(int(c), tuple(b), float(s)) for b, s, c in zip(res.boxes.xyxy.tolist(), res.boxes.conf.tolist(),
                                                               res.boxes.cls.tolist(), strict=True)]
        x = torch.from_numpy(tile[None].copy()).float().div_(255.0).unsqueeze(1).expand(-1, 3, -1, -1).contiguous()
        with torch.inference_mode():
            (raw,) = ev.tile_nms(net(x), nc, 0.001, side)
        theirs = [(int(c), tuple(min(max(v, 0.0), float(side)) for v in (a, b, cc, d)), float(s))
                  for a, b, cc, d, s, c in raw[:, :6].tolist()]
        _same(ours, theirs, 1e-4)
        n += len(theirs)
    return n


def test_export_refuses_weights_that_changed_since_the_harness_recorded_them(tiny_data: Path, tiny_weights: Path,
                                                                            tmp_path: Path) -> None:
    root = _workspace(tmp_path, tiny_data, tiny_weights)
    with open(root / WEIGHTS, "ab") as f:
        f.write(b" ")
    proc = _looper(root, "--out", str(tmp_path / "best.pt"))
    assert proc.returncode == 2
    assert "the harness recorded" in proc.stderr and "refusing to export it" in proc.stderr
    assert not (tmp_path / "best.pt").exists()


def test_export_onnx_through_ultralytics_exporter(tiny_data: Path, tiny_weights: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnx", reason="the export extra (pip install 'looper[export]') is not installed")
    root = _workspace(tmp_path, tiny_data, tiny_weights)
    proc = _looper(root, "--out", str(tmp_path / "best.onnx"), "--format", "onnx")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    import onnx

    graph = onnx.load(str(tmp_path / "best.onnx"))
    ev = _evaluate_module()
    assert [d.dim_value for d in graph.graph.input[0].type.tensor_type.shape.dim] == [1, 3, ev.TILE, ev.TILE]
    assert export_mod.IMGSZ == ev.TILE  # the shipped default is the evaluator's largest tile
    names = {p.key: p.value for p in graph.metadata_props}
    assert json.loads((tiny_data / "manifest.json").read_text())["classes"][0] in names["names"]
