"""Build the synthetic HVAC drawing data set (a fixed file: agents never edit it).

    python prepare.py --out DIR --scale tiny|demo|full --seed N [--test-seed N]

Large black-and-white plan pages carry 26 kinds of HVAC symbols (looper/core/scoring/classes.py)
among what real sheets carry: walls, duct runs, dimension lines, leaders, tags and text.
Symbols are axis-aligned, heavily imbalanced (the most common class is drawn about 100
times as often as the rarest) and come in look-alike groups that differ only by a small
detail. The output is deterministic: the same seed gives the same bytes.

    DIR/manifest.json     version, scale, seed (train/val), classes, sha256 of every file, overall hash
    DIR/dataset.yaml      Ultralytics data yaml (no absolute path: resolved next to itself)
    DIR/tiles/{train,val}/{images,labels}/   YOLO tiles cut from train / val pages only
    DIR/pages/{val,test}/page_NNN.png + .json  whole pages with their truth boxes

Every split draws from its own random stream; tiles are cut from train pages (training) and
val pages (validation) only; test pages never feed training.

The test pages cannot be rebuilt from anything train.py can read: their stream's seed is a
128-bit secret, never written to the manifest, the data folder or the output. It is
``--test-seed N`` when given (tests, reproducible builds), else the one kept in the file
``$LOOPER_TEST_SEED_FILE`` names (drawn with :mod:`secrets` and written there, mode 600, the
first time; looper points it at the workspace's ``.looper/test_seed``, which no sandbox
shows), else a fresh secret kept nowhere (the test pages can then never be rebuilt).
``--verify`` checks every file, test pages included, by its sha256 in the manifest.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from looper.core.scoring.classes import CLASS_INDEX, CLASSES, FREQUENCY
from looper.data import tiles
from looper.data.keyfile import create_once
from looper.data.tiles import (  # noqa: F401 (names kept): the one tiler and hash rule
    MIN_VISIBLE,
    PNG_COMPRESS,
    TILE,
    dataset_yaml,
    manifest_bytes,
    manifest_hash,
    page_json,
    page_tiles,
    png_bytes,
    tile_positions,
    verify,
)

MANIFEST_VERSION = 2  # 2: the test pages' seed is a secret, not in the manifest
TEST_SEED_ENV = "LOOPER_TEST_SEED_FILE"  # names the file that keeps the secret test seed
TEST_SEED_BITS = 128
SPLIT_CODES = {"train": 1, "val": 2, "test": 3}

@dataclass(frozen=True)
class Scale:
    page: int  # page side, px
    pages: dict[str, int]  # pages per split
    per_page: int  # symbols per page (average)
    floor: dict[str, int]  # minimum count of every class per split
    sym_min: int  # symbol base size, px
    sym_max: int
    clutter: int  # clutter elements per page

SCALES: dict[str, Scale] = {
    "tiny": Scale(page=768, pages={"train": 4, "val": 1, "test": 2}, per_page=45,
                  floor={"train": 1, "val": 0, "test": 0}, sym_min=24, sym_max=40, clutter=10),
    # demo test split: at least 20 instances of every class, so a class gate has power (issue 15), on 8
    # pages (~100 symbols each, all placed) instead of 12: evaluation time goes with the page count
    "demo": Scale(page=1024, pages={"train": 16, "val": 2, "test": 8}, per_page=70,
                  floor={"train": 3, "val": 0, "test": 20}, sym_min=24, sym_max=40, clutter=16),
    "full": Scale(page=2048, pages={"train": 120, "val": 8, "test": 40}, per_page=260,
                  floor={"train": 12, "val": 1, "test": 6}, sym_min=24, sym_max=44, clutter=60),
}

Box = tuple[int, int, int, int]  # x1, y1, x2, y2 in px, x2/y2 exclusive

# --------------------------------------------------------------------------------------
# Symbols: each is drawn on its own white canvas, then cropped to its dark pixels.
# --------------------------------------------------------------------------------------
# relative canvas size (width, height) in units of the base size s
ASPECT: dict[str, tuple[float, float]] = {
    "supply_grille": (1.4, 1.0), "return_grille": (1.4, 1.0), "exhaust_grille": (1.4, 1.0),
    "supply_diffuser": (1.0, 1.0), "return_diffuser": (1.0, 1.0),
    "linear_diffuser": (2.0, 0.5), "round_diffuser": (1.0, 1.0),
    "volume_damper": (1.5, 0.8), "fire_damper": (1.5, 0.8), "smoke_damper": (1.5, 0.8),
    "motorized_damper": (1.5, 0.8), "backdraft_damper": (1.5, 0.8),
    "thermostat": (0.8, 0.8), "humidistat": (0.8, 0.8), "co2_sensor": (0.8, 0.8),
    "pressure_sensor": (0.8, 0.8), "smoke_detector": (0.9, 0.9),
    "vav_box": (1.6, 1.0), "fan_coil_unit": (1.6, 1.0), "exhaust_fan": (1.0, 1.0),
    "unit_heater": (1.0, 1.0), "access_door": (1.0, 1.0), "flex_connector": (1.5, 0.7),
    "turning_vanes": (1.0, 1.0), "sound_attenuator": (2.0, 0.8), "control_valve": (1.0, 1.0),
}
ROTATABLE = {"linear_diffuser", "volume_damper", "fire_damper", "smoke_damper", "motorized_damper",
             "backdraft_damper", "vav_box", "fan_coil_unit", "flex_connector", "sound_attenuator",
             "turning_vanes", "supply_grille", "return_grille", "exhaust_grille"}

def _glyph(d: ImageDraw.ImageDraw, letter: str, cx: float, cy: float, r: float, lw: int) -> None:
    """A capital letter from strokes, centred at (cx, cy), half-height r (no font needed)."""
    x0, x1, y0, y1 = cx - 0.6 * r, cx + 0.6 * r, cy - r, cy + r
    if letter == "T":
        d.line([(x0, y0), (x1, y0)], 0, lw)
        d.line([(cx, y0), (cx, y1)], 0, lw)
    elif letter == "H":
        d.line([(x0, y0), (x0, y1)], 0, lw)
        d.line([(x1, y0), (x1, y1)], 0, lw)
        d.line([(x0, cy), (x1, cy)], 0, lw)
    elif letter == "C":
        d.arc([x0, y0, x1 + 0.6 * r, y1], 60, 300, 0, lw)
    elif letter == "P":
        d.line([(x0, y0), (x0, y1)], 0, lw)
        d.line([(x0, y0), (x1, y0)], 0, lw)
        d.line([(x1, y0), (x1, cy)], 0, lw)
        d.line([(x0, cy), (x1, cy)], 0, lw)

def draw_symbol(name: str, s: int, rng: np.random.RandomState) -> Image.Image:
    """The symbol ``name`` at base size ``s`` px, cropped tight to its dark pixels."""
    aw, ah = ASPECT[name]
    w, h = max(8, round(aw * s)), max(8, round(ah * s))
    lw = 2
    img = Image.new("L", (w, h), 255)
    d = ImageDraw.Draw(img)
    r1 = w - 1, h - 1
    full = [0, 0, r1[0], r1[1]]

    def rect(x0: float, y0: float, x1: float, y1: float, fill: int | None = None) -> None:
        d.rectangle([x0, y0, x1, y1], fill=fill, outline=0, width=lw)

    def line(*pts: tuple[float, float]) -> None:
        d.line(list(pts), 0, lw)

    def hatch() -> None:
        for f in (0.3, 0.5, 0.7):
            line((0.12 * w, f * h), (0.88 * w, f * h))

    def blade() -> None:
        line((0.3 * w, 0.85 * h), (0.7 * w, 0.15 * h))

    def circle(box: list[float], fill: int | None = None) -> None:
        d.ellipse(box, fill=fill, outline=0, width=lw)

    draw: dict[str, Callable[[], None]] = {
        "supply_grille": lambda: (rect(*full), hatch(),
                                  d.polygon([(lw, lw), (0.3 * w, lw), (lw, 0.3 * h)], fill=0)),
        "return_grille": lambda: (rect(*full), hatch(), line((0, 0), (w - 1, h - 1))),
        "exhaust_grille": lambda: (rect(*full), hatch(), line((0, 0), (w - 1, h - 1)),
                                   line((0, h - 1), (w - 1, 0))),
        "supply_diffuser": lambda: (rect(*full), rect(0.3 * w, 0.3 * h, 0.7 * w, 0.7 * h),
                                    line((0, 0), (0.3 * w, 0.3 * h)), line((w - 1, 0), (0.7 * w, 0.3 * h)),
                                    line((0, h - 1), (0.3 * w, 0.7 * h)),
                                    line((w - 1, h - 1), (0.7 * w, 0.7 * h))),
        "return_diffuser": lambda: (rect(*full), rect(0.3 * w, 0.3 * h, 0.7 * w, 0.7 * h),
                                    line((0, 0), (0.3 * w, 0.3 * h)),
                                    line((w - 1, h - 1), (0.7 * w, 0.7 * h))),
        "linear_diffuser": lambda: (rect(*full), line((0.05 * w, 0.4 * h), (0.95 * w, 0.4 * h)),
                                    line((0.05 * w, 0.65 * h), (0.95 * w, 0.65 * h))),
        "round_diffuser": lambda: (circle(full), circle([0.25 * w, 0.25 * h, 0.75 * w, 0.75 * h]),
                                   circle([0.44 * w, 0.44 * h, 0.56 * w, 0.56 * h], fill=0)),
        "volume_damper": lambda: (rect(*full), blade()),
        "fire_damper": lambda: (rect(*full), blade(),
                                d.polygon([(lw, h - 1 - lw), (0.25 * w, h - 1 - lw), (lw, 0.45 * h)], fill=0)),
        "smoke_damper": lambda: (rect(*full), blade(), circle([0.75 * w, 0.12 * h, 0.92 * w, 0.45 * h])),
        "motorized_damper": lambda: (rect(*full), blade(), rect(0.06 * w, 0.1 * h, 0.2 * w, 0.4 * h, fill=0)),
        "backdraft_damper": lambda: (rect(*full), line((0.2 * w, 0.85 * h), (0.5 * w, 0.15 * h)),
                                     line((0.5 * w, 0.85 * h), (0.8 * w, 0.15 * h))),
        "thermostat": lambda: (circle(full), _glyph(d, "T", w / 2, h / 2, 0.28 * h, lw)),
        "humidistat": lambda: (circle(full), _glyph(d, "H", w / 2, h / 2, 0.28 * h, lw)),
        "co2_sensor": lambda: (circle(full), _glyph(d, "C", w / 2 - 0.1 * w, h / 2, 0.28 * h, lw)),
        "pressure_sensor": lambda: (circle(full), _glyph(d, "P", w / 2, h / 2, 0.28 * h, lw)),
        "smoke_detector": lambda: (circle(full), circle([0.3 * w, 0.3 * h, 0.7 * w, 0.7 * h]),
                                   line((0.5 * w, 0.05 * h), (0.5 * w, 0.3 * h)),
                                   line((0.5 * w, 0.7 * h), (0.5 * w, 0.95 * h)),
                                   line((0.05 * w, 0.5 * h), (0.3 * w, 0.5 * h)),
                                   line((0.7 * w, 0.5 * h), (0.95 * w, 0.5 * h))),
        "vav_box": lambda: (rect(*full), line((0, 0), (w - 1, 0.5 * h)), line((0, h - 1), (w - 1, 0.5 * h))),
        "fan_coil_unit": lambda: (rect(*full), circle([0.5 * w - 0.35 * h, 0.15 * h, 0.5 * w + 0.35 * h, 0.85 * h])),
        "exhaust_fan": lambda: (circle(full), line((0.15 * w, 0.15 * h), (0.85 * w, 0.85 * h)),
                                line((0.15 * w, 0.85 * h), (0.85 * w, 0.15 * h))),
        "unit_heater": lambda: (rect(*full), line(*[(0.1 * w + i * 0.2 * w, (0.3 if i % 2 else 0.7) * h)
                                                    for i in range(5)])),
        "access_door": lambda: (rect(*full), *[line((0.2 * w + i * 0.16 * w, 0.2 * h), (0.28 * w + i * 0.16 * w, 0.2 * h))
                                               for i in range(4)],
                                *[line((0.2 * w + i * 0.16 * w, 0.8 * h), (0.28 * w + i * 0.16 * w, 0.8 * h))
                                  for i in range(4)]),
        "flex_connector": lambda: (line((0, 0), (0, h - 1)), line((w - 1, 0), (w - 1, h - 1)),
                                   line(*[(0.05 * w + 0.9 * w * i / 16, h / 2 + 0.35 * h * math.sin(i * math.pi / 2))
                                          for i in range(17)])),
        "turning_vanes": lambda: (line((0, 0), (0, h - 1)), line((0, h - 1), (w - 1, h - 1)),
                                  *[d.arc([-f * w, h - 1 - f * h, f * w, h - 1 + f * h], 270, 360, 0, lw)
                                    for f in (0.4, 0.7, 1.0)]),
        "sound_attenuator": lambda: (rect(*full), *[d.rectangle([x, y, x + 1, y + 1], fill=0)
                                                    for x in range(5, w - 5, 6) for y in range(5, h - 5, 6)]),
        "control_valve": lambda: (d.polygon([(0, 0.4 * h), (0, h - 1), (w - 1, 0.4 * h), (w - 1, h - 1)],
                                            outline=0, width=lw),
                                  line((w / 2, 0.7 * h), (w / 2, 0.2 * h)),
                                  circle([0.35 * w, 0, 0.65 * w, 0.3 * w])),
    }
    draw[name]()
    if name in ROTATABLE:
        k = int(rng.randint(4))
        if k:
            img = img.transpose([Image.Transpose.ROTATE_90, Image.Transpose.ROTATE_180,
                                 Image.Transpose.ROTATE_270][k - 1])
    bbox = Image.eval(img, lambda p: 255 - p).getbbox()
    assert bbox is not None, f"symbol {name} drew nothing"
    return img.crop(bbox)

# --------------------------------------------------------------------------------------
# Pages
# --------------------------------------------------------------------------------------
_WORDS = ("SUPPLY AIR", "RETURN AIR", "EXHAUST", "400 CFM", "250 CFM", "24x12", "18x10", "12\"Ø",
          "OFFICE", "CORRIDOR", "MECH RM", "CONF", "SEE DETAIL 4/M501", "RA", "SA", "EA", "TYP.",
          "NOTE 3", "FD @ RATED WALL", "LOBBY", "STORAGE", "ELEC", "10'-0\" AFF", "VIF")
_TAGS = ("VAV", "SD", "FCU", "EF", "T", "CD", "RG", "UH", "AD")

def _overlaps(box: Box, boxes: list[Box], pad: int) -> bool:
    x1, y1, x2, y2 = box
    return any(x1 < b[2] + pad and b[0] - pad < x2 and y1 < b[3] + pad and b[1] - pad < y2 for b in boxes)

def _clutter(d: ImageDraw.ImageDraw, rng: np.random.RandomState, side: int, n: int,
             font: ImageFont.ImageFont | ImageFont.FreeTypeFont) -> None:
    """Walls, duct runs, dimension lines and loose text: what a real sheet carries."""
    for _ in range(max(2, n // 4)):  # walls: long thick (often double) lines
        pos, a, b = int(rng.randint(side)), int(rng.randint(side // 2)), int(rng.randint(side // 2, side))
        lw = int(rng.randint(3, 7))
        horiz = rng.rand() < 0.5
        for off in ((0, 10) if rng.rand() < 0.5 else (0,)):
            p = pos + off
            d.line([(a, p), (b, p)] if horiz else [(p, a), (p, b)], 0, lw)
    for _ in range(max(2, n // 3)):  # duct runs: parallel pairs with an L-turn
        x, y = int(rng.randint(side)), int(rng.randint(side))
        gap = int(rng.randint(18, 40))
        l1, l2 = int(rng.randint(80, side // 2)), int(rng.randint(60, side // 3))
        d.line([(x, y), (x + l1, y), (x + l1, y + l2)], 0, 2)
        d.line([(x, y + gap), (x + l1 - gap, y + gap), (x + l1 - gap, y + l2)], 0, 2)
    for _ in range(max(1, n // 4)):  # dimension lines with ticks and a figure
        x, y, length = int(rng.randint(side)), int(rng.randint(side)), int(rng.randint(80, 300))
        d.line([(x, y), (x + length, y)], 0, 1)
        for xx in (x, x + length):
            d.line([(xx - 4, y + 4), (xx + 4, y - 4)], 0, 1)
            d.line([(xx, y - 8), (xx, y + 8)], 0, 1)
        d.text((x + length // 2 - 15, y - 14), f"{rng.randint(2, 40)}'-{rng.randint(0, 12)}\"", fill=0, font=font)
    for _ in range(n):  # loose text
        d.text((int(rng.randint(side)), int(rng.randint(side))), _WORDS[rng.randint(len(_WORDS))], fill=0, font=font)

def make_page(rng: np.random.RandomState, side: int, classes: list[str], sc: Scale
              ) -> tuple[Image.Image, list[dict[str, object]]]:
    """One page: clutter first, symbols on cleared ground, then leaders and tags."""
    font = ImageFont.load_default()
    img = Image.new("L", (side, side), 255)
    d = ImageDraw.Draw(img)
    _clutter(d, rng, side, sc.clutter, font)
    placed: list[Box] = []
    truth: list[dict[str, object]] = []
    for name in classes:
        sym = draw_symbol(name, int(rng.randint(sc.sym_min, sc.sym_max + 1)), rng)
        w, h = sym.size
        for _ in range(200):
            x, y = int(rng.randint(4, side - w - 4)), int(rng.randint(4, side - h - 4))
            box = (x, y, x + w, y + h)
            if not _overlaps(box, placed, 10):
                break
        else:
            continue  # page full: the symbol is not drawn and not in the truth
        d.rectangle([x - 4, y - 4, x + w + 3, y + h + 3], fill=255)
        img.paste(sym, (x, y))
        placed.append(box)
        truth.append({"class": name, "box": list(box)})
    tags: list[Box] = []
    for box in placed:  # leaders from some symbols to a tag
        if rng.rand() < 0.35:
            continue
        cx, cy = (box[0] + box[2]) // 2, box[3] + 5
        tx, ty = cx + int(rng.randint(20, 60)), cy + int(rng.randint(25, 60))
        tag_box = (tx - 2, ty - 2, tx + 44, ty + 16)
        leader = (min(cx, tx), cy, max(cx, tx) + 1, ty)
        if (tag_box[2] >= side or tag_box[3] >= side or _overlaps(tag_box, placed + tags, 6)
                or _overlaps(leader, [b for b in placed if b != box], 4)):
            continue
        d.line([(cx, cy), (tx, ty)], 0, 1)
        d.rectangle(list(tag_box), outline=0, width=1, fill=255)
        d.text((tx + 2, ty + 1), f"{_TAGS[rng.randint(len(_TAGS))]}-{rng.randint(1, 30)}", fill=0, font=font)
        tags.append(tag_box)
    return img, truth

def class_quota(split: str, sc: Scale, rng: np.random.RandomState) -> list[list[str]]:
    """The classes to draw on each page of a split: imbalanced, with a per-split floor."""
    total = sc.pages[split] * sc.per_page
    norm = sum(FREQUENCY.values())
    names: list[str] = []
    for name in CLASSES:
        names += [name] * max(sc.floor[split], round(total * FREQUENCY[name] / norm))
    order = rng.permutation(len(names))
    shuffled = [names[i] for i in order]
    n = sc.pages[split]
    return [shuffled[i::n] for i in range(n)]

# --------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------
def yolo_labels(truth: list[dict[str, object]], x0: int, y0: int, tile: int, min_visible: float = MIN_VISIBLE) -> str:
    """YOLO label lines for the boxes visible in one tile (looper.data.tiles, with this data set's classes)."""
    return tiles.yolo_labels(truth, CLASS_INDEX, x0, y0, tile, min_visible)  # type: ignore[arg-type]

def draw_test_seed() -> int:
    """A fresh secret seed for the test pages (:mod:`secrets`, 128 bits)."""
    return secrets.randbits(TEST_SEED_BITS)

def load_test_seed(path: Path) -> int:
    """The secret test seed kept in ``path``: drawn and written there (hex, mode 600, created once:
    looper.data.keyfile.create_once) when the file does not exist yet."""
    path = Path(path)
    if not path.exists():  # another build drawing it at the same time: the first written whole stands
        create_once(path, lambda: f"{draw_test_seed():032x}\n")
    try:
        text = path.read_text().strip()
        value = int(text, 16)
    except (OSError, ValueError):
        raise SystemExit(f"prepare.py: {path} does not hold a test seed (32 hex digits); move it away to draw "
                         "a new one (the test pages will then differ from any built before)") from None
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)
    return value

def _seed_words(value: int) -> list[int]:
    """A seed of up to 128 bits as the fewest 32-bit words numpy's RandomState takes (at least one:
    ``--test-seed N`` with N below 2**32 draws the same test pages as ``--seed N`` did in version 1)."""
    if not 0 <= value < 1 << TEST_SEED_BITS:
        raise SystemExit(f"prepare.py: a test seed is a non-negative integer below 2**{TEST_SEED_BITS}")
    words = [(value >> (32 * k)) & 0xFFFFFFFF for k in range(TEST_SEED_BITS // 32)]
    while len(words) > 1 and words[-1] == 0:
        words.pop()
    return words

def build(out: Path, scale: str, seed: int, test_seed: int | None = None) -> dict[str, object]:
    """Write the whole data set into ``out`` (must be empty or absent); return the manifest.

    ``seed`` draws the train and val pages (recorded in the manifest); ``test_seed`` the test
    pages (never recorded; None: a fresh secret, kept nowhere)."""
    if scale not in SCALES:
        raise SystemExit(f"prepare.py: unknown --scale {scale!r}; choose one of {', '.join(SCALES)}")
    sc = SCALES[scale]
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"prepare.py: output folder {out} is not empty; refusing to mix data sets")
    secret = _seed_words(draw_test_seed() if test_seed is None else test_seed)
    files: dict[str, bytes] = {}
    for split in ("train", "val", "test"):
        code = SPLIT_CODES[split]
        base = secret if split == "test" else [seed]  # the test pages: from the secret only
        quota = class_quota(split, sc, np.random.RandomState([*base, code, 0]))
        for i, classes in enumerate(quota):
            rng = np.random.RandomState([*base, code, i + 1])
            img, truth = make_page(rng, sc.page, classes, sc)
            if split in ("val", "test"):
                page = {"split": split, "source": f"{split}-{i:03d}", "width": sc.page, "height": sc.page,
                        "boxes": truth}
                files[f"pages/{split}/page_{i:03d}.png"] = png_bytes(img)
                files[f"pages/{split}/page_{i:03d}.json"] = page_json(split, str(page["source"]), sc.page, sc.page,
                                                                      truth)
            if split in ("train", "val"):
                files.update(page_tiles(img, truth, CLASS_INDEX, split, f"{split}{i:03d}", TILE))  # type: ignore[arg-type]
    files["dataset.yaml"] = dataset_yaml(CLASSES, f"written by prepare.py (scale={scale}, seed={seed})")
    digests = {rel: hashlib.sha256(data).hexdigest() for rel, data in sorted(files.items())}
    manifest: dict[str, object] = {
        "version": MANIFEST_VERSION, "scale": scale, "seed": seed, "classes": list(CLASSES),
        "tile": TILE, "page": sc.page, "pages": dict(sc.pages),
        "files": digests, "hash": manifest_hash(digests),
    }
    for rel, data in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (out / "manifest.json").write_bytes(manifest_bytes(manifest))
    return manifest

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output folder (empty or absent)")
    ap.add_argument("--scale", default="demo", choices=sorted(SCALES))
    ap.add_argument("--seed", type=int, default=0, help="seed of the train and val pages (in the manifest)")
    ap.add_argument("--test-seed", type=int, default=None,
                    help=f"seed of the test pages (default: the secret in ${TEST_SEED_ENV}, else a fresh one)")
    ap.add_argument("--verify", action="store_true", help="check an existing folder against its manifest")
    args = ap.parse_args(argv)
    if args.verify:
        problems = verify(args.out)
        for p in problems:
            print(f"prepare.py: {p}", file=sys.stderr)
        print("ok" if not problems else f"{len(problems)} problem(s)")
        return 1 if problems else 0
    keep = os.environ.get(TEST_SEED_ENV, "")
    test_seed = args.test_seed if args.test_seed is not None else load_test_seed(Path(keep)) if keep else None
    manifest = build(args.out, args.scale, args.seed, test_seed)
    n = len(manifest["files"])  # type: ignore[arg-type]
    where = ("given" if args.test_seed is not None else f"secret, kept in {keep}" if keep
             else "secret, kept nowhere: they cannot be rebuilt")
    print(f"prepare.py: wrote {n} files to {args.out} (scale={args.scale}, seed={args.seed}, "
          f"test pages' seed {where}, hash={manifest['hash']})")
    return 0

if __name__ == "__main__":
    sys.exit(main())
