"""Test pages of a chosen side for evaluation benchmarks (bench/bench_eval.py --sizes).

    .venv/bin/python bench/big_pages.py --out /tmp/pages-6144 --side 6144 [--pages 1] [--seed 0] [--ink 1.0]

prepare.py's own page drawing (``make_page``), the demo's symbol sizes and clutter scaled by area:
about 70 symbols per 1024 x 1024 px (2,520 on a 6144-px page), classes in turn. ``--ink F`` < 1 draws
a page as a vector-rendered drawing looks, with empty paper between its parts: the page is a grid of
1024-px blocks of which a seeded fraction F are drawn pages (demo symbols, clutter, truth) and the rest
plain white. Writes
``pages/test/page_NNN.{png,json}`` and a ``manifest.json`` with the classes (enough for evaluate.py;
not a training data set: no tiles, no hash).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import prepare as P  # noqa: E402


def inked(rng: np.random.RandomState, side: int, ink: float, names: list[str], demo: P.Scale
          ) -> tuple[np.ndarray, list[dict[str, object]]]:
    """A page of ``side`` px, a fraction ``ink`` of its 1024-px blocks drawn and the rest white paper."""
    block = demo.page
    n = side // block
    page = np.full((side, side), 255, dtype=np.uint8)
    truth: list[dict[str, object]] = []
    cells = [(c, r) for r in range(n) for c in range(n)]
    drawn = sorted(rng.choice(len(cells), size=max(1, round(ink * len(cells))), replace=False))
    for k, cell in enumerate(drawn):
        c, r = cells[cell]
        img, boxes = P.make_page(rng, block, [names[(k + j) % len(names)] for j in range(demo.per_page)], demo)
        page[r * block:(r + 1) * block, c * block:(c + 1) * block] = np.asarray(img, dtype=np.uint8)
        for b in boxes:
            x1, y1, x2, y2 = b["box"]  # type: ignore[misc]
            truth.append({**b, "box": [x1 + c * block, y1 + r * block, x2 + c * block, y2 + r * block]})
    return page, truth


def write(out: Path, side: int, pages: int, seed: int, ink: float = 1.0) -> None:
    demo = P.SCALES["demo"]
    area = (side / demo.page) ** 2
    sc = dataclasses.replace(demo, page=side, per_page=round(demo.per_page * area),
                             clutter=round(demo.clutter * area))
    folder = out / "pages" / "test"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(seed)
    for i in range(pages):
        names = [P.CLASSES[(i + k) % len(P.CLASSES)] for k in range(sc.per_page)]
        if ink < 1.0:
            arr, truth = inked(rng, side, ink, names, demo)
            img = P.Image.fromarray(arr)
        else:
            img, truth = P.make_page(rng, side, names, sc)
        (folder / f"page_{i:03d}.png").write_bytes(P.png_bytes(img))
        (folder / f"page_{i:03d}.json").write_text(json.dumps({"boxes": truth, "size": [side, side]}) + "\n")
    (out / "manifest.json").write_text(json.dumps({"classes": list(P.CLASSES)}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--side", type=int, required=True)
    ap.add_argument("--pages", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ink", type=float, default=1.0, help="the fraction of 1024-px blocks drawn (default 1.0: "
                    "all of the page; below 1 the rest is white paper, --side a multiple of 1024)")
    args = ap.parse_args(argv)
    if not 0.0 < args.ink <= 1.0:
        ap.error("--ink must be in (0, 1]")
    if args.ink < 1.0 and args.side % P.SCALES["demo"].page:
        ap.error(f"--ink below 1 needs --side a multiple of {P.SCALES['demo'].page}")
    write(args.out, args.side, args.pages, args.seed, args.ink)
    return 0


if __name__ == "__main__":
    sys.exit(main())
