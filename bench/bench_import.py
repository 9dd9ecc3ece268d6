"""Import and check time and peak memory for large drawings (issue 38).

    python bench/bench_import.py --pages 100 --width 6000 --height 4000 [--work DIR]

Writes a COCO export of ``--pages`` synthetic pages (symbols drawn by prepare.py's functions on a
white sheet with lines; written as plain JSON, the way the labelling tools write COCO), then times
``looper data import`` and ``looper data check`` each in a fresh process, reading their peak
resident memory (ru_maxrss of the child). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import prepare  # noqa: E402

CLASSES = list(prepare.CLASSES)


def make_export(folder: Path, pages: int, width: int, height: int, per_page: int = 300) -> Path:
    (folder / "images").mkdir(parents=True, exist_ok=True)
    doc: dict = {"images": [], "annotations": [],
                 "categories": [{"id": i + 1, "name": c, "supercategory": ""} for i, c in enumerate(CLASSES)]}
    rng = np.random.RandomState(0)
    symbols = {c: prepare.draw_symbol(c, 32, rng) for c in CLASSES}
    aid = 0
    for p in range(pages):
        img = Image.new("L", (width, height), 255)
        d = ImageDraw.Draw(img)
        for _ in range(60):  # walls and duct runs
            x, y = int(rng.randint(width)), int(rng.randint(height))
            d.line([(x, y), (x + int(rng.randint(200, 2000)), y)], 0, 3)
        gx, gy = width // 20, height // 15  # one symbol per cell of a 20 x 15 grid: no overlap
        for k in range(min(per_page, 300)):
            c = CLASSES[int(rng.randint(len(CLASSES)))]
            sym = symbols[c]
            x, y = (k % 20) * gx + 8, (k // 20) * gy + 8
            img.paste(sym, (x, y))
            aid += 1
            doc["annotations"].append({"id": aid, "image_id": p + 1, "category_id": CLASSES.index(c) + 1,
                                       "bbox": [x, y, sym.width, sym.height], "iscrowd": 0})
        name = f"sheet_{p:03d}.png"
        img.save(folder / "images" / name, compress_level=1)
        doc["images"].append({"id": p + 1, "file_name": f"images/{name}", "width": width, "height": height})
    path = folder / "annotations.json"
    path.write_text(json.dumps(doc))
    return path


WRAP = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "sys.stderr.write(r.stdout[-2000:] + r.stderr[-2000:]); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)")


def timed(argv: list[str]) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one command, run under a fresh wrapper process (its children's peak)."""
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", WRAP, *argv], capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{argv}: exit {r.returncode}\n{r.stderr[-3000:]}")
    return seconds, int(r.stdout.split()[-1]) / 1024


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=100)
    ap.add_argument("--width", type=int, default=6000)
    ap.add_argument("--height", type=int, default=4000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/looper-bench-import"))
    args = ap.parse_args()
    export = args.work / "export"
    coco = export / "annotations.json"
    if not coco.is_file():
        t = time.perf_counter()
        make_export(export, args.pages, args.width, args.height)
        print(f"export written in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    out = args.work / "data"
    if out.exists():
        import shutil

        shutil.rmtree(out)
    looper = str(Path(sys.executable).with_name("looper"))
    imp_s, imp_mb = timed([looper, "data", "import", str(coco), "--out", str(out)])
    chk_s, chk_mb = timed([looper, "data", "check", str(out)])
    files = sum(1 for p in out.rglob("*") if p.is_file())
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(json.dumps({"pages": args.pages, "page": f"{args.width}x{args.height}", "import_s": round(imp_s, 1),
                      "import_peak_mb": round(imp_mb), "check_s": round(chk_s, 1), "check_peak_mb": round(chk_mb),
                      "files": files, "data_mb": round(size / 2**20)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
