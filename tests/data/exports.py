"""Third-party exports for the import tests, written the way the labelling tools write them (plain
JSON as CVAT / Label Studio / pycocotools write COCO; the Ultralytics folder layout with normalised
``class cx cy w h`` lines), never with looper's own writer. The page pictures come from prepare.py's
drawing functions (symbols on a cluttered sheet), saved as the tools' users would have them: JPEG or
PNG files with no looper naming."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import prepare  # noqa: E402

SCALE = prepare.SCALES["tiny"]


def pages(n: int, classes: list[str], side: int = 768, seed: int = 7, per_page: int = 26):
    """``n`` drawn pages with their truth (class name, [x1, y1, x2, y2])."""
    rng = np.random.RandomState(seed)
    out = []
    for i in range(n):
        pick = [classes[(i + k) % len(classes)] for k in range(per_page)]
        img, truth = prepare.make_page(np.random.RandomState([seed, i]), side, pick, SCALE)
        out.append((img, truth))
        rng.rand()
    return out


def write_coco(folder: Path, n: int = 6, classes: list[str] | None = None, side: int = 768,
               mutate=None) -> Path:  # noqa: ANN001
    """A COCO export: ``folder/annotations.json`` and ``folder/images/*.png``; category ids from 1
    (as CVAT writes them), bbox [x, y, w, h] floats. ``mutate(doc)`` edits the JSON before it is written."""
    classes = classes or list(prepare.CLASSES)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    doc: dict = {"info": {"description": "export"}, "licenses": [], "images": [], "annotations": [],
                 "categories": [{"id": i + 1, "name": c, "supercategory": ""} for i, c in enumerate(classes)]}
    aid = 0
    for i, (img, truth) in enumerate(pages(n, classes, side)):
        name = f"sheet-{i + 1}.png"
        img.save(folder / "images" / name)
        doc["images"].append({"id": i + 1, "file_name": f"images/{name}", "width": img.width, "height": img.height})
        for t in truth:
            aid += 1
            x1, y1, x2, y2 = t["box"]
            doc["annotations"].append({"id": aid, "image_id": i + 1, "category_id": classes.index(t["class"]) + 1,
                                       "bbox": [float(x1), float(y1), float(x2 - x1), float(y2 - y1)],
                                       "area": float((x2 - x1) * (y2 - y1)), "iscrowd": 0, "segmentation": []})
    if mutate:
        mutate(doc)
    path = folder / "annotations.json"
    path.write_text(json.dumps(doc))
    return path


def write_yolo(folder: Path, splits: dict[str, int] | None = None, classes: list[str] | None = None,
               side: int = 768) -> Path:
    """An Ultralytics export: ``data.yaml`` (path, train, val, test, names) and
    ``images/<split>/*.jpg`` + ``labels/<split>/*.txt``."""
    classes = classes or list(prepare.CLASSES)
    splits = splits or {"train": 4, "val": 1, "test": 2}
    drawn = pages(sum(splits.values()), classes, side)
    k = 0
    for split, n in splits.items():
        (folder / "images" / split).mkdir(parents=True, exist_ok=True)
        (folder / "labels" / split).mkdir(parents=True, exist_ok=True)
        for _ in range(n):
            img, truth = drawn[k]
            k += 1
            img.convert("RGB").save(folder / "images" / split / f"IMG_{k:04d}.png")
            lines = [f"{classes.index(t['class'])} {(t['box'][0] + t['box'][2]) / 2 / img.width:.6f} "
                     f"{(t['box'][1] + t['box'][3]) / 2 / img.height:.6f} {(t['box'][2] - t['box'][0]) / img.width:.6f} "
                     f"{(t['box'][3] - t['box'][1]) / img.height:.6f}" for t in truth]
            (folder / "labels" / split / f"IMG_{k:04d}.txt").write_text("\n".join(lines) + "\n")
    names = "\n".join(f"  {i}: {c}" for i, c in enumerate(classes))
    keys = "".join(f"{s}: images/{s}\n" for s in splits)
    path = folder / "data.yaml"
    path.write_text(f"path: .\n{keys}names:\n{names}\n")
    return path


def write_with_supervision(folder: Path, fmt: str, splits: dict[str, int], classes: list[str],
                           side: int = 768) -> Path:
    """The drawn pages written by supervision (Roboflow's library), in Roboflow's layout of split folders
    ``train``, ``valid``, ``test``: ``fmt = "coco"`` each with its images and ``_annotations.coco.json``
    (``DetectionDataset.as_coco``), returns the folder; ``fmt = "yolo"`` each with ``images/`` and
    ``labels/`` (``as_yolo``) and a ``data.yaml``, returned. supervision's data.yaml holds ``nc`` and
    ``names`` only; the split keys are added as Roboflow's export adds them."""
    import supervision as sv
    import yaml

    drawn = pages(sum(splits.values()), classes, side)
    originals = folder.with_name(folder.name + "-originals")  # the labelling tool's own copies of the pages
    originals.mkdir(parents=True, exist_ok=True)
    k = 0
    for split, n in splits.items():
        where = folder / ("valid" if split == "val" else split)
        annotations: dict[str, sv.Detections] = {}
        for _ in range(n):
            img, truth = drawn[k]
            k += 1
            key = str(originals / f"IMG_{k:04d}.png")
            img.convert("RGB").save(key)
            annotations[key] = sv.Detections(xyxy=np.array([t["box"] for t in truth], dtype=np.float64),
                                             class_id=np.array([classes.index(t["class"]) for t in truth]))
        ds = sv.DetectionDataset(classes=classes, images=list(annotations), annotations=annotations)
        if fmt == "coco":
            ds.as_coco(images_directory_path=str(where), annotations_path=str(where / "_annotations.coco.json"))
        else:
            ds.as_yolo(images_directory_path=str(where / "images"), annotations_directory_path=str(where / "labels"),
                       data_yaml_path=str(folder / "data.yaml"))
    if fmt == "coco":
        return folder
    path = folder / "data.yaml"
    doc = yaml.safe_load(path.read_text())
    doc.update({s: f"{'valid' if s == 'val' else s}/images" for s in splits})
    path.write_text(yaml.safe_dump(doc))
    return path


FOUR = ["thermostat", "vav_box", "exhaust_fan", "fire_damper"]  # four classes of the 26, for small exports


def four_class_exports(root: Path, coco_pages: int = 5) -> Path:
    """Under ``root``: a COCO export of ``coco_pages`` pages and a YOLO export (3 / 1 / 1 pages) of :data:`FOUR`,
    400 px pages (made once per test module; each test copies the one it changes with :func:`copy_of`)."""
    write_coco(root / "coco", n=coco_pages, classes=FOUR, side=400)
    write_yolo(root / "yolo", {"train": 3, "val": 1, "test": 1}, classes=FOUR, side=400)
    return root


def copy_of(exports: Path, tmp_path: Path, kind: str) -> Path:
    """A test's own copy of one export: ``coco`` (its annotations.json) or ``yolo`` (its folder)."""
    import shutil

    shutil.copytree(exports / kind, tmp_path / kind)
    return tmp_path / kind / "annotations.json" if kind == "coco" else tmp_path / kind


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Path:  # noqa: ANN001
    """The test module's :func:`four_class_exports` (import it with ``coco`` and ``yolo`` as fixtures)."""
    return four_class_exports(tmp_path_factory.mktemp("exports"))


@pytest.fixture
def coco(exports, tmp_path) -> Path:  # noqa: ANN001
    return copy_of(exports, tmp_path, "coco")


@pytest.fixture
def yolo(exports, tmp_path) -> Path:  # noqa: ANN001
    return copy_of(exports, tmp_path, "yolo")
