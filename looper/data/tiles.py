"""The one tiler and the one hash rule of a data folder: prepare.py and ``looper data import`` both
write their files with these functions, so a synthetic and an imported data set have the same layout.

- a training page is cut into ``TILE`` x ``TILE`` px tiles at stride ``TILE * 3 // 4`` (train) or
  ``TILE`` (val), the last tile of a row or column flush with the page's edge;
- a tile's YOLO label lines hold the boxes at least ``MIN_VISIBLE`` of whose area is in the tile,
  clipped to it;
- PNG files are written at the fixed compression level ``PNG_COMPRESS`` (same pixels, same bytes);
- the manifest's overall ``hash`` is sha256 over the sorted ``relpath<TAB>sha256`` lines of its files.

Pinned with the fixed files (looper.workspace.hashes.SCORING_MODULES): it decides what a data folder holds.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from PIL import Image

TILE = 256  # training tile side, px (train.py's IMGSZ)
PNG_COMPRESS = 6  # fixed PNG compression level: same pixels -> same bytes
MIN_VISIBLE = 0.6  # a box is labelled in a tile when at least this share of its area is inside


def stride_of(split: str, tile: int = TILE) -> int:
    """The tiling stride of a split: 3/4 of a tile for train (overlapping), a whole tile for val."""
    return tile * 3 // 4 if split == "train" else tile


def png_bytes(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=PNG_COMPRESS, optimize=False)
    return buf.getvalue()


def tile_positions(side: int, tile: int, stride: int) -> list[int]:
    """Tile origins along one axis covering [0, side), the last one flush with the edge."""
    if side <= tile:
        return [0]
    pos = list(range(0, side - tile + 1, stride))
    if pos[-1] != side - tile:
        pos.append(side - tile)
    return pos


def yolo_labels(truth: Sequence[Mapping[str, Any]], index: Mapping[str, int], x0: int, y0: int, tile: int,
                min_visible: float = MIN_VISIBLE) -> str:
    """YOLO label lines for the boxes (``{"class": name, "box": [x1, y1, x2, y2]}``) visible in one
    tile (at least ``min_visible`` of their area); ``index`` maps a class name to its YOLO id."""
    lines = []
    for t in truth:
        x1, y1, x2, y2 = t["box"]
        cx1, cy1, cx2, cy2 = max(x1, x0), max(y1, y0), min(x2, x0 + tile), min(y2, y0 + tile)
        if cx2 <= cx1 or cy2 <= cy1:
            continue
        if (cx2 - cx1) * (cy2 - cy1) < min_visible * (x2 - x1) * (y2 - y1):
            continue
        lines.append(f"{index[str(t['class'])]} {((cx1 + cx2) / 2 - x0) / tile:.6f} "
                     f"{((cy1 + cy2) / 2 - y0) / tile:.6f} {(cx2 - cx1) / tile:.6f} {(cy2 - cy1) / tile:.6f}")
    return "".join(line + "\n" for line in lines)


def page_tiles(img: Image.Image, truth: Sequence[Mapping[str, Any]], index: Mapping[str, int], split: str,
               stem: str, tile: int = TILE) -> Iterator[tuple[str, bytes]]:
    """(relative path, bytes) of every tile image and label file cut from one page of ``split``
    (``tiles/<split>/{images,labels}/<stem>_xXXXX_yYYYY.{png,txt}``); a page smaller than a tile is
    padded with white paper."""
    w, h = img.size
    stride = stride_of(split, tile)
    for y0 in tile_positions(h, tile, stride):
        for x0 in tile_positions(w, tile, stride):
            name = f"{stem}_x{x0:04d}_y{y0:04d}"
            crop = img.crop((x0, y0, x0 + tile, y0 + tile))  # PIL pads outside the page with 0: paper is white
            if x0 + tile > w or y0 + tile > h:
                paper = Image.new(img.mode, (tile, tile), 255)
                paper.paste(img.crop((x0, y0, min(w, x0 + tile), min(h, y0 + tile))), (0, 0))
                crop = paper
            yield f"tiles/{split}/images/{name}.png", png_bytes(crop)
            yield f"tiles/{split}/labels/{name}.txt", yolo_labels(truth, index, x0, y0, tile).encode()


def page_json(split: str, source: str, width: int, height: int, boxes: Sequence[Mapping[str, Any]]) -> bytes:
    """A whole page's truth file (docs/DATA.md: the page JSON)."""
    page = {"split": split, "source": source, "width": width, "height": height, "boxes": list(boxes)}
    return (json.dumps(page, sort_keys=True) + "\n").encode()


def dataset_yaml(classes: Sequence[str], comment: str) -> bytes:
    """The Ultralytics data yaml of a data folder (paths relative to itself)."""
    names = "\n".join(f"  {i}: {n}" for i, n in enumerate(classes))
    return (f"# {comment}; paths are relative to this file\n"
            f"train: tiles/train/images\nval: tiles/val/images\nnc: {len(classes)}\nnames:\n{names}\n").encode()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_hash(digests: Mapping[str, str]) -> str:
    """The data set's overall hash: sha256 over the sorted ``relpath<TAB>sha256`` lines."""
    text = "".join(f"{rel}\t{digests[rel]}\n" for rel in sorted(digests))
    return hashlib.sha256(text.encode()).hexdigest()


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    return (json.dumps(manifest, sort_keys=True, indent=1) + "\n").encode()


def verify(out: Path) -> list[str]:
    """Problems with a data folder against its manifest (missing/changed files, wrong hash); empty
    when intact. Only the files the manifest lists count: tools may add caches (Ultralytics writes
    ``labels.cache`` next to the labels) without changing the data set."""
    out = Path(out)
    try:
        manifest = json.loads((out / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        return [f"{out / 'manifest.json'} unreadable: {exc}"]
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files", {}), dict):
        return [f"{out / 'manifest.json'} is not a manifest (no 'files' table)"]
    problems = []
    digests: dict[str, str] = manifest.get("files", {})
    for rel, want in sorted(digests.items()):
        h = hashlib.sha256()
        try:
            with open(out / rel, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
        except OSError:
            problems.append(f"{rel}: missing")
            continue
        if h.hexdigest() != want:
            problems.append(f"{rel}: content changed")
    if manifest_hash(digests) != manifest.get("hash"):
        problems.append("manifest hash does not match its file list")
    return problems
