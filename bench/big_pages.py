"""Test pages of a chosen side for evaluation benchmarks (bench/bench_eval.py --sizes).

    .venv/bin/python bench/big_pages.py --out /tmp/pages-6144 --side 6144 [--pages 1] [--seed 0]

prepare.py's own page drawing (``make_page``), the demo's symbol sizes and clutter scaled by area:
about 70 symbols per 1024 x 1024 px (2,520 on a 6144-px page), classes in turn. Writes
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


def write(out: Path, side: int, pages: int, seed: int) -> None:
    demo = P.SCALES["demo"]
    area = (side / demo.page) ** 2
    sc = dataclasses.replace(demo, page=side, per_page=round(demo.per_page * area),
                             clutter=round(demo.clutter * area))
    folder = out / "pages" / "test"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(seed)
    for i in range(pages):
        names = [P.CLASSES[(i + k) % len(P.CLASSES)] for k in range(sc.per_page)]
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
    args = ap.parse_args(argv)
    write(args.out, args.side, args.pages, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
