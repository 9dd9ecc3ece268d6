"""Detect symbols on drawing pages with a night's detector (``looper predict``; docs/SHIPPING.md).

    looper predict sheet-1.png sheet-2.png --out pred/          # the last night's best weights
    looper predict plans/*.png --out pred/ --weights runs/.../weights.pt

A page goes through the workspace's own evaluate.py, the pinned file that scored the night: its
``load_model`` (weights read as data, the same architecture check) and its ``detect_page`` (tiles of up
to 1024 px, the same batches, within-tile NMS, seam drop and merge across tiles). There is no second
tiler: a page's boxes are those evaluate.py's MATCHES.json lists for it, at the pinned confidence
(``tests/e2e/test_predict.py``). Written into ``out``: ``predictions.json`` (COCO: ``images``,
``categories`` with ids from 1, ``annotations`` each with its ``score``: the annotations list is COCO's
results format) and one drawn page per input, ``<stem>.boxes.png`` (the page with every box and its
class).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from looper.errors import UsageError

RESULTS_NAME = "predictions.json"
COLOURS = ((230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180), (70, 240, 240),
           (240, 50, 230), (128, 128, 0), (0, 0, 128), (170, 110, 40))


class PredictError(UsageError):
    """looper predict cannot run as asked (exit 2); the message names the file."""


@dataclass(frozen=True)
class PagePrediction:
    page: Path
    width: int
    height: int
    boxes: tuple[tuple[str, tuple[float, float, float, float], float], ...]  # (class, x1 y1 x2 y2 px, score)


@dataclass(frozen=True)
class Predicted:
    out: Path
    classes: tuple[str, ...]
    pages: tuple[PagePrediction, ...]
    files: tuple[Path, ...]


def load_evaluator(path: Path) -> ModuleType:
    """The workspace's evaluate.py as a module (the fixed file: its tiling and merging are the scored ones)."""
    spec = importlib.util.spec_from_file_location("looper_predict_evaluate", path)
    if not Path(path).is_file() or spec is None or spec.loader is None:
        raise PredictError(f"{path} does not exist: looper predict runs the workspace's evaluate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model(ev: ModuleType, weights: Path, device: str) -> tuple[Any, str, tuple[str, ...]]:
    """(network, torch device, class names) loaded by evaluate.py; its refusal (an exit) as a PredictError."""
    import torch

    torch._C._set_deterministic_algorithms(True, warn_only=True)  # as evaluate.py's main  # noqa: SLF001
    dev = "cuda:0" if device not in ("cpu", "mps") and torch.cuda.is_available() else "cpu"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            model = ev.load_model(Path(weights), dev)
    except SystemExit:
        raise PredictError(f"{weights}: {err.getvalue().strip().removeprefix('evaluate.py: ')}") from None
    names = getattr(model, "names", None) or {}
    classes = tuple(str(names[i]) for i in sorted(names)) if isinstance(names, dict) else tuple(map(str, names))
    return model, dev, classes


def detect(ev: ModuleType, model: Any, page: Path, device: str, classes: Sequence[str]) -> PagePrediction:
    """One page's boxes scored at or above the pinned confidence, exactly as evaluate.py finds them (it
    detects down to its AP threshold and matches at the pinned confidence: the same boxes)."""
    from PIL import Image

    with Image.open(page) as im:
        width, height = im.size
    found = ev.detect_page(model, page, device, len(classes), ev.STREAM_CONFIDENCE)
    boxes = tuple((classes[c], tuple(float(v) for v in box), float(score))
                  for c, box, score in found if score >= ev.CONFIDENCE)
    return PagePrediction(page, width, height, boxes)  # type: ignore[arg-type]


def coco_results(pages: Sequence[PagePrediction], classes: Sequence[str]) -> dict[str, Any]:
    """The predictions as COCO: images (ids from 1, in the order given), categories (ids from 1, the
    weights' class order), annotations with ``bbox`` [x, y, width, height] px and ``score``."""
    anns = []
    for i, p in enumerate(pages, 1):
        for cls, (x1, y1, x2, y2), score in p.boxes:
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": classes.index(cls) + 1,
                         "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1), "score": score,
                         "iscrowd": 0})
    return {"images": [{"id": i, "file_name": str(p.page), "width": p.width, "height": p.height}
                       for i, p in enumerate(pages, 1)],
            "categories": [{"id": k + 1, "name": c, "supercategory": ""} for k, c in enumerate(classes)],
            "annotations": anns}


def draw(p: PagePrediction, classes: Sequence[str], out: Path) -> Path:
    """The page in colour with every box drawn and labelled with its class and score."""
    from PIL import Image, ImageDraw

    with Image.open(p.page) as im:
        img = im.convert("RGB")
    pen = ImageDraw.Draw(img)
    width = max(1, round(max(p.width, p.height) / 1000))
    for cls, (x1, y1, x2, y2), score in p.boxes:
        colour = COLOURS[classes.index(cls) % len(COLOURS)]
        pen.rectangle((x1, y1, x2, y2), outline=colour, width=width)
        pen.text((x1 + 2, max(0, y1 - 11)), f"{cls} {score:.2f}", fill=colour)
    img.save(out, format="PNG", compress_level=6)
    return out


def predict(pages: Sequence[Path], weights: Path, out: Path, evaluator: Path, device: str = "cpu",
            drawn: bool = True) -> Predicted:
    """Detect on every page with ``weights`` through ``evaluator`` (a workspace's evaluate.py); write
    ``out/predictions.json`` and, with ``drawn``, ``out/<stem>.boxes.png`` per page."""
    pages = [Path(p) for p in pages]
    missing = [str(p) for p in pages if not p.is_file()]
    if missing:
        raise PredictError(f"no such page file: {', '.join(missing[:5])}")
    stems = [p.stem for p in pages]
    twice = sorted({s for s in stems if stems.count(s) > 1})
    if twice:
        raise PredictError(f"two pages named {twice[0]!r}: their drawn pages would overwrite each other; "
                           "predict them into separate --out folders")
    os.environ.setdefault("YOLO_OFFLINE", "1")
    ev = load_evaluator(evaluator)
    model, dev, classes = _model(ev, weights, device)
    done = tuple(detect(ev, model, p, dev, classes) for p in pages)
    out.mkdir(parents=True, exist_ok=True)
    files = [out / RESULTS_NAME]
    (out / RESULTS_NAME).write_text(json.dumps(coco_results(done, classes), indent=1) + "\n")
    if drawn:
        files += [draw(p, classes, out / f"{p.page.stem}.boxes.png") for p in done]
    return Predicted(out, classes, done, tuple(files))
