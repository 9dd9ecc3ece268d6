"""What one MATCHES.json says (pure): the counts it implies, the confusion between classes,
and the page regions where two models differ most.

MATCHES.json is written by evaluate.py beside METRICS.json (:func:`looper.core.scoring.metrics.page_matches`;
schema in docs/REFERENCE.md): per test page, every prediction scored at or above the pinned
confidence with ``match`` ``tp`` (and the ``truth`` index it matched) or ``fp`` (and the truth
box it ``overlaps`` most, any class), every ``missed`` truth box, and ``fp_dropped`` (false
positives past the per-page bound, per class).

The confusion matrix is page-level, at the pinned confidence and IoU: rows are what was
predicted, columns what was true, plus ``background`` both ways:

- a true positive of class A counts in (A, A);
- a false positive of class A that overlaps a truth box of another class B at IoU >= the
  pinned IoU counts in (A, B): a look-alike taken for another;
- any other false positive (on nothing, or a duplicate on a truth of its own class, or one
  past the per-page bound) counts in (A, background);
- a missed truth box of class B counts in (background, B) unless a wrong-class prediction
  lies on it (it is then already in its column, as (A, B)).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from looper.core.scoring.classes import CLASSES, LOOKALIKE_GROUPS

BACKGROUND = "background"

__all__ = [
    "BACKGROUND", "Confusion", "Region", "class_order", "confusion", "differing_regions", "error_regions",
    "implied_counts", "problems",
]


def problems(obj: Any) -> list[str]:
    """What makes ``obj`` not a MATCHES.json object (its shape only); [] when it is one."""
    if not isinstance(obj, dict):
        return ["MATCHES.json is not an object"]
    out: list[str] = []
    if obj.get("schema") != 1:
        out.append(f"MATCHES.json schema {obj.get('schema')!r} is not 1")
    pages = obj.get("pages")
    if not isinstance(pages, list):
        return [*out, "MATCHES.json has no pages list"]
    for i, p in enumerate(pages):
        if not (isinstance(p, dict) and isinstance(p.get("page"), str) and isinstance(p.get("predictions"), list)
                and isinstance(p.get("missed"), list) and isinstance(p.get("fp_dropped", {}), dict)):
            out.append(f"page {i} of MATCHES.json lacks page, predictions, missed or fp_dropped")
            continue
        for predicted, rows in ((True, p["predictions"]), (False, p["missed"])):
            bad = _bad_entry(rows, predicted)
            if bad:
                out.append(f"page {p['page']}: {bad}")
                break
    return out


def _bad_entry(rows: list[Any], predicted: bool) -> str | None:
    for r in rows:
        box = r.get("box") if isinstance(r, dict) else None
        if not (isinstance(r, dict) and isinstance(r.get("class"), str) and isinstance(box, list)
                and len(box) == 4 and all(isinstance(v, (int, float)) for v in box)):
            return "an entry without a class and a 4-number box"
        if predicted and r.get("match") not in ("tp", "fp"):
            return f"a prediction whose match is {r.get('match')!r}, not tp or fp"
    return None


def implied_counts(obj: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per class: the ``tp``, ``fp`` and ``fn`` the pages imply (listed entries plus ``fp_dropped``);
    they equal METRICS.json's counts of the same evaluation."""
    out: dict[str, dict[str, int]] = {}

    def row(c: str) -> dict[str, int]:
        return out.setdefault(c, {"tp": 0, "fp": 0, "fn": 0})

    for p in obj["pages"]:
        for r in p["predictions"]:
            row(r["class"])[r["match"]] += 1
        for r in p["missed"]:
            row(r["class"])["fn"] += 1
        for c, n in (p.get("fp_dropped") or {}).items():
            row(c)["fp"] += int(n)
    return out


@dataclass(frozen=True)
class Confusion:
    """``cells[(predicted, true)]`` = count; ``labels`` in display order (look-alike groups first,
    ``background`` last); ``groups`` the look-alike groups among them."""

    cells: dict[tuple[str, str], int]
    labels: tuple[str, ...]
    groups: dict[str, tuple[str, ...]]

    def at(self, predicted: str, true: str) -> int:
        return self.cells.get((predicted, true), 0)

    def as_json(self) -> dict[str, Any]:
        """Numbers for ``looper report --json``: labels and the matrix as rows (predicted) x columns (true)."""
        return {"labels": list(self.labels), "rows": "predicted", "columns": "true",
                "matrix": [[self.at(a, b) for b in self.labels] for a in self.labels],
                "groups": {k: list(v) for k, v in self.groups.items()}}


def class_order(present: Iterable[str], base: Sequence[str] = CLASSES,
                ) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """The classes in ``present`` ordered so look-alikes sit together: each look-alike group of
    program.md (``LOOKALIKE_GROUPS``) as a block, blocks and their members in the order of ``base`` (the
    data's classes, in its manifest's order; looper's 26 by default), then the rest in ``base``'s order,
    then names ``base`` lacks, sorted. Returns (order, the groups restricted to ``present``)."""
    want = set(present) - {BACKGROUND}
    rank = {c: i for i, c in enumerate(base)}
    order: list[str] = []
    groups: dict[str, tuple[str, ...]] = {}
    def place(c: str) -> tuple[int, str]:
        return rank.get(c, len(rank)), c

    blocks = {name: tuple(sorted((c for c in members if c in want), key=place))
              for name, members in LOOKALIKE_GROUPS.items()}
    for name, shown in sorted(blocks.items(), key=lambda kv: (place(kv[1][0]) if kv[1] else (len(rank) + 1, ""), kv[0])):
        if shown:
            groups[name] = shown
            order += shown
    order += [c for c in base if c in want and c not in order]
    order += sorted(want - set(order))
    return tuple(order), groups


def confusion(objs: Sequence[dict[str, Any]], iou: float, classes: Iterable[str] = ()) -> Confusion:
    """The page-level confusion matrix of one or more MATCHES.json objects (summed), at ``iou``."""
    cells: dict[tuple[str, str], int] = {}
    seen: set[str] = set(classes)

    def add(a: str, b: str) -> None:
        cells[(a, b)] = cells.get((a, b), 0) + 1
        seen.update((a, b))

    for obj in objs:
        for p in obj["pages"]:
            confused: set[int] = set()
            for r in p["predictions"]:
                c = r["class"]
                if r["match"] == "tp":
                    add(c, c)
                    continue
                ov = r.get("overlaps")
                if isinstance(ov, dict) and ov.get("class") != c and float(ov.get("iou") or 0.0) >= iou:
                    add(c, str(ov["class"]))
                    if isinstance(ov.get("truth"), int):
                        confused.add(ov["truth"])
                else:
                    add(c, BACKGROUND)
            for c, n in (p.get("fp_dropped") or {}).items():
                for _ in range(int(n)):
                    add(c, BACKGROUND)
            for r in p["missed"]:
                if r.get("truth") not in confused:
                    add(BACKGROUND, r["class"])
    order, groups = class_order(seen, list(classes) or CLASSES)
    return Confusion(cells, (*order, BACKGROUND), groups)


# ------------------------------------------------------------------ where two models differ
@dataclass(frozen=True)
class Region:
    """A square of one page (``box``: x1, y1, x2, y2 in page pixels) and how many boxes inside it
    one model got right and the other wrong (``score``)."""

    page: str
    box: tuple[float, float, float, float]
    score: int


def _centres(rows: Sequence[dict[str, Any]]) -> np.ndarray:
    """(n, 2) box centres of ``rows``."""
    boxes = np.array([r["box"] for r in rows], dtype=np.float64).reshape(-1, 4)
    return np.stack([(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2], axis=1)


def _differences(a: dict[str, Any], b: dict[str, Any]) -> np.ndarray:
    """(n, 2) centres of the boxes on which two models' pages disagree: a truth one found and the
    other missed, and a false positive one made where the other made none of its class nearby
    (centres closer than the box's larger side)."""
    missed_a = {r.get("truth"): r for r in a["missed"]}
    missed_b = {r.get("truth"): r for r in b["missed"]}
    rows = [missed_a.get(t) or missed_b[t] for t in sorted(set(missed_a) ^ set(missed_b), key=str)]
    out = [_centres(rows)]
    fps = [[r for r in side["predictions"] if r["match"] == "fp"] for side in (a, b)]
    for mine, other in ((fps[0], fps[1]), (fps[1], fps[0])):
        by_class: dict[str, list[dict[str, Any]]] = {}
        for r in other:
            by_class.setdefault(r["class"], []).append(r)
        for cls in sorted({r["class"] for r in mine}):
            rs = [r for r in mine if r["class"] == cls]
            c = _centres(rs)
            boxes = np.array([r["box"] for r in rs], dtype=np.float64)
            w = np.maximum(np.maximum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]), 1.0)
            others = _centres(by_class.get(cls, []))
            if len(others):
                near = (np.abs(c[:, None, :] - others[None, :, :]) < w[:, None, None]).all(axis=2).any(axis=1)
                c = c[~near]
            out.append(c)
    return np.concatenate(out, axis=0)


def differing_regions(best: dict[str, Any], baseline: dict[str, Any], side: float, limit: int,
                      sizes: dict[str, tuple[int, int]] | None = None) -> list[Region]:
    """Up to ``limit`` squares of side ``side`` px, over the pages both objects hold, where the two
    models differ most (most disagreeing boxes inside), never overlapping on one page, the most
    different first (ties: page name, then position). ``sizes``: page (width, height), to keep
    squares inside a page."""
    by_page = {p["page"]: p for p in baseline["pages"]}
    pts = {p["page"]: _differences(p, by_page[p["page"]]) for p in best["pages"] if p["page"] in by_page}
    return _densest(pts, side, limit, sizes)


def error_regions(obj: dict[str, Any], side: float, limit: int,
                  sizes: dict[str, tuple[int, int]] | None = None) -> list[Region]:
    """Like :func:`differing_regions` for one model alone (the best is the baseline): the squares
    with the most false positives and misses inside."""
    pts = {p["page"]: np.concatenate([_centres([r for r in p["predictions"] if r["match"] == "fp"]),
                                      _centres(p["missed"])], axis=0) for p in obj["pages"]}
    return _densest(pts, side, limit, sizes)


def _densest(points: dict[str, np.ndarray], side: float, limit: int,
             sizes: dict[str, tuple[int, int]] | None) -> list[Region]:
    """The squares holding the most ``points`` (per page, (n, 2) centres), never overlapping on one
    page. Squares start on a grid of a quarter side, counted from a 2-D histogram (fast on a
    full-scale page); each chosen square's count is exact."""
    found: list[Region] = []
    step, k = side / 4, 4
    for page, pts in points.items():
        if not len(pts):
            continue
        w, h = (sizes or {}).get(page, (0, 0))
        w = w or float(pts[:, 0].max()) + 1.0
        h = h or float(pts[:, 1].max()) + 1.0
        nx, ny = max(k, math.ceil(w / step)), max(k, math.ceil(h / step))
        hist, _, _ = np.histogram2d(pts[:, 1], pts[:, 0], bins=[ny, nx], range=[[0, ny * step], [0, nx * step]])
        cum = np.zeros((ny + 1, nx + 1))
        cum[1:, 1:] = hist.cumsum(0).cumsum(1)
        win = cum[k:, k:] - cum[:-k, k:] - cum[k:, :-k] + cum[:-k, :-k]  # points in each k x k block of cells
        order = np.lexsort((np.arange(win.size), -win.ravel()))
        chosen: list[tuple[float, float, float, float]] = []
        for flat in order:
            if win.ravel()[flat] <= 0 or len(chosen) >= limit:
                break
            i, j = divmod(int(flat), win.shape[1])
            x1 = min(j * step, max(0.0, w - side))
            y1 = min(i * step, max(0.0, h - side))
            box = (x1, y1, x1 + side, y1 + side)
            if any(box[0] < c[2] and c[0] < box[2] and box[1] < c[3] and c[1] < box[3] for c in chosen):
                continue
            chosen.append(box)
            inside = ((pts[:, 0] >= x1) & (pts[:, 0] < x1 + side) & (pts[:, 1] >= y1) & (pts[:, 1] < y1 + side)).sum()
            found.append(Region(page, box, int(inside)))  # exact, also where the square was moved inside
    found.sort(key=lambda r: (-r.score, r.page, r.box))
    return found[:limit]
