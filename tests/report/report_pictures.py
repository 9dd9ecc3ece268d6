"""Test pages and MATCHES.json for the seeded report store (report_seed.py): cheap, drawn with Pillow.

Three 512 px pages of the look-alike classes; the best finds nearly everything, the baseline
takes return diffusers for supply diffusers, misses dampers and invents a thermostat.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from looper.core.scoring.metrics import Detection, matches_file, page_matches
from looper.report.facts import gather
from looper.store import Store

PAGES = ("page_0000.png", "page_0001.png", "page_0002.png")
CLASSES = ["supply_diffuser", "return_diffuser", "fire_damper", "smoke_damper", "volume_damper", "thermostat"]


def _truth(seed: int) -> list[Detection]:
    rng = random.Random(seed)
    out = []
    for i in range(12):
        x, y = 30 + (i % 4) * 115 + rng.randint(0, 20), 40 + (i // 4) * 150 + rng.randint(0, 20)
        out.append(Detection(CLASSES[i % len(CLASSES)], (float(x), float(y), float(x + 32), float(y + 32))))
    return out


def add_pictures(root: Path, store: Store, *, baseline: bool = True) -> dict[str, int]:
    """Write the pages under ``root/data/pages/test`` and the best's (and the baseline's) MATCHES.json."""
    from PIL import Image, ImageDraw

    n = gather(store, root)
    assert n.best is not None and n.baseline_id is not None and n.tag is not None
    folder = root / "data" / "pages" / "test"
    folder.mkdir(parents=True, exist_ok=True)
    best_pages, base_pages = [], []
    for k, name in enumerate(PAGES):
        truth = _truth(k)
        im = Image.new("L", (512, 512), 255)
        d = ImageDraw.Draw(im)
        for t in truth:
            d.rectangle(t.box, outline=0, width=2)
            d.line((t.box[0], t.box[1], t.box[2], t.box[3]), fill=0)
        im.save(folder / name)
        best = [Detection(t.cls, t.box, 0.9) for t in truth[:-1]]  # misses the last one
        base = []
        for i, t in enumerate(truth):
            if t.cls == "return_diffuser":
                base.append(Detection("supply_diffuser", t.box, 0.6))   # a look-alike taken for another
            elif t.cls.endswith("damper") and i % 2:
                continue                                                 # a miss
            else:
                base.append(Detection(t.cls, t.box, 0.8))
        base.append(Detection("thermostat", (400.0, 470.0, 430.0, 500.0), 0.5))  # on nothing
        best_pages.append(page_matches(name, best, truth))
        base_pages.append(page_matches(name, base, truth))
    ids = {"best": n.best.id, "baseline": n.baseline_id}
    for key, pages in (("best", best_pages), ("baseline", base_pages)):
        if key == "baseline" and not baseline:
            continue
        run = root / "runs" / n.tag / f"{ids[key]:05d}" / "main-s0"
        run.mkdir(parents=True, exist_ok=True)
        (run / "MATCHES.json").write_text(json.dumps(matches_file(pages, CLASSES)))
    return ids
