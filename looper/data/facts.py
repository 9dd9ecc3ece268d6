"""The facts the data checks judge (looper.core.data.check), read from files: an export's pages before
an import, or a data folder (prepare.py's or an import's) before a night.

Images are opened for their header (size) and verified (PIL's ``verify``: a PNG's chunks and CRCs)
one at a time, never all held: the facts of 100 pages of 6000 x 4000 px stay small.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from PIL import Image

from looper.core.data.check import REIMPORT, SPLITS, BoxFact, DataFacts, DataProblem, ImageFact
from looper.data import tiles
from looper.data.formats import Source, SourceBox, SourcePage, line_problem
from looper.data.paths import BUDGET_FIX, DEFAULT_MAX_PIXELS, OUTSIDE_FIX, over_budget, pixel_budget

MAX_PIXELS = DEFAULT_MAX_PIXELS  # the default pixel budget per image (looper data import --max-pixels)


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def image_size(path: Path, verify: bool = True, max_pixels: int = MAX_PIXELS) -> tuple[int, int, str | None]:
    """(width, height, None) of an image file, or (0, 0, what is wrong): missing, unreadable, or over the
    pixel budget ``max_pixels`` (read from its header, before anything is decoded)."""
    if not path.is_file():
        return 0, 0, "image missing"
    try:
        with pixel_budget(None), Image.open(path) as im:  # the header only: its size is judged here
            w, h = im.size
            big = over_budget(w, h, max_pixels)
            if big:
                return 0, 0, big
            if verify:
                im.verify()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        return 0, 0, f"image over the pixel budget of {max_pixels:,} px per image ({str(exc)[:120]})"
    except Exception as exc:  # noqa: BLE001 - PIL raises many kinds for a broken file
        return 0, 0, f"image unreadable ({type(exc).__name__}: {str(exc)[:120]})"
    return w, h, None


def _box(b: SourceBox, w: int, h: int) -> BoxFact:
    x1, y1, x2, y2 = b.box
    if b.normalized:
        x1, y1, x2, y2 = x1 * w, y1 * h, x2 * w, y2 * h
    return BoxFact(b.where, b.cls, (x1, y1, x2, y2), b.problem)


def page_fact(page: SourcePage, split: str, max_pixels: int = MAX_PIXELS) -> ImageFact:
    """An export's page: its image's size and readability, its content hash and its boxes in px (a page
    whose path the import may not read is refused without opening it)."""
    if page.refused:
        what = page.refused[1]
        fix = (BUDGET_FIX if "pixel budget" in what else OUTSIDE_FIX if "export" in what and "dpi" not in what
               else "") + REIMPORT
        return ImageFact(page.refused[0], split, problem=what, fix=fix)
    w, h, problem = image_size(page.image, max_pixels=max_pixels)
    digest = file_digest(page.image) if problem is None else ""
    fix = BUDGET_FIX + REIMPORT if problem and "pixel budget" in problem else None
    where = str(page.image) if page.pdf_page is None else page.key  # a PDF page by its name, not its rendering
    return ImageFact(where, split, w, h, problem, digest, tuple(_box(b, w, h) for b in page.boxes), fix=fix)


def source_facts(source: Source, split: dict[str, str], input_size: int = 0, max_pixels: int = MAX_PIXELS,
                 strict_bounds: bool = False) -> DataFacts:
    """An export's facts; a box crossing a page edge is clipped and counted unless ``strict_bounds``."""
    facts = tuple(page_fact(p, split[p.key], max_pixels) for p in source.pages)
    notes = tuple(DataProblem(source.where, what, "put their images into the export if they belong to it",
                              blocking=False) for what in source.ignored)
    return DataFacts(source.where, source.classes, facts, input_size, clip_edges=not strict_bounds, notes=notes)


def _page_json(path: Path, split: str) -> ImageFact:
    image = path.with_suffix(".png")
    try:
        doc = json.loads(path.read_text())
        boxes = tuple(BoxFact(f"{path} box {i}", str(b["class"]), tuple(float(v) for v in b["box"]))  # type: ignore[arg-type]
                      for i, b in enumerate(doc["boxes"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return ImageFact(str(path), split, problem=f"page truth unreadable ({type(exc).__name__}: {exc})")
    w, h, problem = image_size(image)
    if problem is None and (w, h) != (doc.get("width"), doc.get("height")):
        problem = f"image is {w} x {h} px, its truth {path.name} says {doc.get('width')} x {doc.get('height')}"
    return ImageFact(str(image), split, w, h, problem, file_digest(image) if image.is_file() else "", boxes)


def _tile_labels(label: Path, size: int) -> tuple[BoxFact, ...]:
    if not label.is_file():
        return ()
    out = []
    for n, line in enumerate(label.read_text().splitlines(), 1):
        bits = line.split()
        if not bits:
            continue
        bad = line_problem(bits)
        if bad:
            out.append(BoxFact(f"{label} line {n}", 0, (0, 0, 0, 0), bad))
            continue
        cls, (cx, cy, w, h) = int(bits[0]), (float(v) for v in bits[1:5])
        out.append(BoxFact(f"{label} line {n}", cls, ((cx - w / 2) * size, (cy - h / 2) * size,
                                                      (cx + w / 2) * size, (cy + h / 2) * size)))
    return tuple(out)


def _tiles(data: Path, split: str) -> list[ImageFact]:
    out = []
    folder = data / "tiles" / split / "images"
    for image in sorted(folder.glob("*")) if folder.is_dir() else []:
        if image.suffix.lower() not in (".png", ".jpg", ".jpeg"):
            continue
        w, h, problem = image_size(image, verify=False)
        label = data / "tiles" / split / "labels" / (image.stem + ".txt")
        out.append(ImageFact(str(image), split, w, h, problem, boxes=_tile_labels(label, w), tile=True))
    return out


def folder_facts(data: Path, input_size: int = 0) -> DataFacts:
    """A data folder's facts: its manifest (and whether it verifies), its whole pages (pages/val,
    pages/test) and its training tiles (tiles/train, tiles/val)."""
    data = Path(data)
    try:
        manifest: dict[str, Any] = json.loads((data / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        return DataFacts(str(data), (), manifest_problems=(f"no readable manifest.json ({type(exc).__name__})",))
    classes = tuple(str(c) for c in manifest.get("classes") or ())
    images: list[ImageFact] = []
    for split in ("train", "val"):
        images += _tiles(data, split)
    for split in ("val", "test"):
        folder = data / "pages" / split
        images += [_page_json(p, split) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    listed = manifest.get("page_sha256") or {}
    digests = {s: tuple(listed.get(s) or ()) for s in SPLITS if listed.get(s)}
    return DataFacts(str(data), classes, tuple(images), input_size, tuple(tiles.verify(data)), SPLITS, digests)
