"""Page-level matching and per-class metrics (pure: no files, no processes).

What the user sees of a model: whole drawing pages, detected tile by tile, boxes merged
across tile seams, then matched to the truth per class at IoU >= ``IOU`` at ONE pinned
confidence ``CONFIDENCE``. The output is the METRICS.json object of docs/INTERFACES.md.

Pipeline (evaluate.py drives it):

1. ``tile_grid`` cuts a page into overlapping tiles.
2. ``drop_seam_boxes`` removes, per tile, boxes cut by an inner tile edge: with an overlap
   larger than the biggest symbol, such a symbol is seen whole in a neighbouring tile.
3. ``merge_detections`` merges, class by class, boxes seen by several tiles: duplicates
   (IoU >= ``MERGE_IOU``) collapse to the most confident one; pieces of one symbol (one
   box mostly inside another, or two boxes abutting along a seam) join into their union.
4. ``match_page`` greedily matches predictions (most confident first) to truth per class.
5. ``metrics_from_counts`` turns the summed counts into per-class and overall figures.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

SCHEMA = 1
IOU = 0.5  # a prediction matches a truth box of its class at IoU >= this
CONFIDENCE = 0.25  # the ONE pinned confidence threshold; recorded in METRICS.json
MERGE_IOU = 0.5  # same-class boxes from neighbouring tiles with IoU >= this are one symbol
MERGE_CONTAIN = 0.6  # ... and so is a box this much inside another (a piece of it)
SEAM_TOL = 2.0  # px: a box edge this close to an inner tile edge was cut by that edge
DIGITS = 6  # floats in METRICS.json are rounded to this many decimals

BoxT = tuple[float, float, float, float]  # x1, y1, x2, y2 (page pixels, x2/y2 exclusive)


@dataclass(frozen=True, order=True)
class Detection:
    """One box of one class; ``score`` is 1.0 for truth."""

    cls: str
    box: BoxT
    score: float = 1.0


@dataclass
class Counts:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    @property
    def support(self) -> int:
        return self.tp + self.fn

    @property
    def predicted(self) -> int:
        return self.tp + self.fp

    def __iadd__(self, other: Counts) -> Counts:
        self.tp += other.tp
        self.fp += other.fp
        self.fn += other.fn
        return self


@dataclass
class PageResult:
    """Counts per class for one page, and how many predictions and truth boxes it had."""

    counts: dict[str, Counts] = field(default_factory=dict)
    predictions: int = 0
    truth: int = 0


# --------------------------------------------------------------------------------------
# geometry
# --------------------------------------------------------------------------------------
def area(b: BoxT) -> float:
    return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])


def intersection(a: BoxT, b: BoxT) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def iou(a: BoxT, b: BoxT) -> float:
    inter = intersection(a, b)
    union = area(a) + area(b) - inter
    return inter / union if union > 0 else 0.0


def _contained(a: BoxT, b: BoxT) -> float:
    """Intersection over the smaller box's area: 1.0 when one box lies inside the other."""
    smaller = min(area(a), area(b))
    return intersection(a, b) / smaller if smaller > 0 else 0.0


def _abutting(a: BoxT, b: BoxT, tol: float = SEAM_TOL, overlap: float = MERGE_CONTAIN) -> bool:
    """Two pieces of one box cut along a seam: edges meet, and they overlap across it."""
    def span_overlap(lo1: float, hi1: float, lo2: float, hi2: float) -> float:
        inter = min(hi1, hi2) - max(lo1, lo2)
        shorter = min(hi1 - lo1, hi2 - lo2)
        return inter / shorter if shorter > 0 else 0.0

    meet_x = abs(a[2] - b[0]) <= tol or abs(b[2] - a[0]) <= tol
    meet_y = abs(a[3] - b[1]) <= tol or abs(b[3] - a[1]) <= tol
    return ((meet_x and span_overlap(a[1], a[3], b[1], b[3]) >= overlap)
            or (meet_y and span_overlap(a[0], a[2], b[0], b[2]) >= overlap))


def _union(a: BoxT, b: BoxT) -> BoxT:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


# --------------------------------------------------------------------------------------
# tiles and merging
# --------------------------------------------------------------------------------------
def tile_origins(side: int, tile: int, overlap: int) -> list[int]:
    """Tile origins along one axis covering ``[0, side)``; the last tile is flush with the edge."""
    if tile <= overlap:
        raise ValueError(f"tile ({tile}) must be larger than overlap ({overlap})")
    if side <= tile:
        return [0]
    stride = tile - overlap
    pos = list(range(0, side - tile + 1, stride))
    if pos[-1] != side - tile:
        pos.append(side - tile)
    return pos


def tile_grid(width: int, height: int, tile: int, overlap: int) -> list[tuple[int, int]]:
    """(x0, y0) of every tile of a page, row by row."""
    return [(x0, y0) for y0 in tile_origins(height, tile, overlap) for x0 in tile_origins(width, tile, overlap)]


def drop_seam_boxes(dets: Iterable[Detection], origin: tuple[int, int], tile: int,
                    page_size: tuple[int, int], tol: float = SEAM_TOL) -> list[Detection]:
    """Drop boxes (page coordinates) that touch an inner edge of their tile.

    An edge is inner when the page continues past it. With tiles overlapping by more
    than the largest symbol, whatever such an edge cuts is seen whole by a neighbour.
    """
    x0, y0 = origin
    w, h = page_size
    x1, y1 = x0 + min(tile, w), y0 + min(tile, h)
    keep = []
    for d in dets:
        b = d.box
        cut = ((x0 > 0 and b[0] - x0 <= tol) or (y0 > 0 and b[1] - y0 <= tol)
               or (x1 < w and x1 - b[2] <= tol) or (y1 < h and y1 - b[3] <= tol))
        if not cut:
            keep.append(d)
    return keep


def _order(dets: Iterable[Detection]) -> list[Detection]:
    """Most confident first; ties broken by class and box so the order is deterministic."""
    return sorted(dets, key=lambda d: (-d.score, d.cls, d.box))


def merge_detections(dets: Sequence[Detection], iou_thr: float = MERGE_IOU,
                     contain_thr: float = MERGE_CONTAIN) -> list[Detection]:
    """Merge one page's boxes from overlapping tiles, class by class.

    Greedy, most confident first: a kept box swallows every remaining same-class box
    that is a piece of the same symbol (one mostly inside the other, or abutting along a
    seam: the kept box grows to their union) or otherwise duplicates it (IoU >= ``iou_thr``:
    the duplicate vanishes). The kept box keeps its score. Repeats until nothing more merges.
    """
    pending = _order(dets)
    out: list[Detection] = []
    while pending:
        head, rest = pending[0], pending[1:]
        box = head.box
        changed = True
        while changed:
            changed = False
            remaining = []
            for d in rest:
                if d.cls != head.cls:
                    remaining.append(d)
                elif _contained(box, d.box) >= contain_thr or _abutting(box, d.box):
                    box = _union(box, d.box)
                    changed = True
                elif iou(box, d.box) >= iou_thr:
                    changed = True
                else:
                    remaining.append(d)
            rest = remaining
        out.append(Detection(head.cls, box, head.score))
        pending = rest
    return _order(out)


# --------------------------------------------------------------------------------------
# matching and metrics
# --------------------------------------------------------------------------------------
def match_page(preds: Iterable[Detection], truth: Iterable[Detection], iou_thr: float = IOU,
               confidence: float = CONFIDENCE) -> PageResult:
    """Greedy per-class matching on one page.

    Predictions below ``confidence`` are ignored. Most confident first, each prediction
    takes the unmatched truth box of its class with the highest IoU, if that IoU is at
    least ``iou_thr`` (ties: the earlier truth box); else it is a false positive. Truth
    left unmatched are false negatives.
    """
    kept = [p for p in _order(preds) if p.score >= confidence]
    truth_l = list(truth)
    res = PageResult(predictions=len(kept), truth=len(truth_l))
    by_class: dict[str, list[BoxT]] = {}
    for t in truth_l:
        by_class.setdefault(t.cls, []).append(t.box)
    used: dict[str, list[bool]] = {c: [False] * len(b) for c, b in by_class.items()}
    for p in kept:
        c = res.counts.setdefault(p.cls, Counts())
        best, best_iou = -1, iou_thr
        for j, tb in enumerate(by_class.get(p.cls, [])):
            if used[p.cls][j]:
                continue
            v = iou(p.box, tb)
            if v >= best_iou and (best < 0 or v > best_iou):
                best, best_iou = j, v
        if best >= 0:
            used[p.cls][best] = True
            c.tp += 1
        else:
            c.fp += 1
    for cls, flags in used.items():
        res.counts.setdefault(cls, Counts()).fn += sum(1 for f in flags if not f)
    return res


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), DIGITS)


def class_weights(support: dict[str, int]) -> dict[str, float]:
    """Each class's share of ``weighted_f1``: ``1/sqrt(support)`` normalised over classes with support."""
    raw = {c: 1.0 / math.sqrt(s) for c, s in support.items() if s > 0}
    total = sum(raw.values())
    return {c: (raw[c] / total if c in raw else 0.0) for c in support}


def metrics_from_counts(counts: dict[str, Counts], classes: Sequence[str], pages: int,
                        predictions: int, truth: int, iou_thr: float = IOU,
                        confidence: float = CONFIDENCE) -> dict[str, object]:
    """The METRICS.json object: every class in ``classes``, rounded floats.

    Raises ValueError when ``counts`` names a class not in ``classes`` (a model trained
    on another class list must not be scored silently).
    """
    unknown = sorted(set(counts) - set(classes))
    if unknown:
        raise ValueError(f"counts name classes outside the data set's class list: {unknown}")
    support = {c: counts.get(c, Counts()).support for c in classes}
    weights = class_weights(support)
    per_class: dict[str, dict[str, object]] = {}
    f1s: dict[str, float] = {}
    for c in classes:
        k = counts.get(c, Counts())
        s = k.support
        if s > 0:
            precision: float | None = k.tp / k.predicted if k.predicted else 0.0
            recall: float | None = k.tp / s
            f1: float | None = (2 * precision * recall / (precision + recall)
                                if precision and recall else 0.0)  # type: ignore[operator]
            f1s[c] = f1  # type: ignore[assignment]
        else:
            precision = 0.0 if k.fp > 0 else None
            recall = f1 = None
        per_class[c] = {
            "tp": k.tp, "fp": k.fp, "fn": k.fn, "support": s,
            "precision": _r(precision), "recall": _r(recall), "f1": _r(f1),
            "count_error": _r((k.predicted - s) / max(s, 1)), "weight": _r(weights[c]),
        }
    macro = sum(f1s.values()) / len(f1s) if f1s else None
    weighted = sum(weights[c] * f for c, f in f1s.items()) if f1s else None
    return {
        "schema": SCHEMA, "iou": iou_thr, "confidence": confidence,
        "pages": pages, "predictions": predictions, "truth": truth,
        "macro_f1": _r(macro), "weighted_f1": _r(weighted), "classes": per_class,
    }


def evaluate_pages(pages: Sequence[tuple[Sequence[Detection], Sequence[Detection]]],
                   classes: Sequence[str], iou_thr: float = IOU,
                   confidence: float = CONFIDENCE) -> dict[str, object]:
    """Match every (predictions, truth) page and return the METRICS.json object."""
    total: dict[str, Counts] = {}
    n_pred = n_truth = 0
    for preds, truth in pages:
        res = match_page(preds, truth, iou_thr, confidence)
        n_pred += res.predictions
        n_truth += res.truth
        for c, k in res.counts.items():
            total.setdefault(c, Counts())
            total[c] += k
    return metrics_from_counts(total, classes, len(pages), n_pred, n_truth, iou_thr, confidence)
