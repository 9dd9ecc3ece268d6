"""Page-level matching and per-class metrics (pure: no files, no processes).

What the user sees of a model: whole drawing pages, detected tile by tile, boxes merged
across tile seams, then matched to the truth per class at IoU >= ``IOU``. Precision,
recall and F1 are read at ONE pinned confidence ``CONFIDENCE`` (scores >= it count);
AP50 is read from the whole low-confidence stream (every box scored above
``STREAM_CONFIDENCE``) through the same merge and matching. The output is the
METRICS.json object of docs/INTERFACES.md.

Pipeline (evaluate.py drives it):

1. ``tile_side`` picks a page's tile size; ``tile_grid`` cuts the page into overlapping tiles
   (both in looper.core.scoring.tilegrid).
2. ``drop_seam_boxes`` removes, per tile, boxes cut by an inner tile edge: with an overlap
   larger than the biggest symbol, such a symbol is seen whole in a neighbouring tile.
3. ``merge_detections`` merges, class by class, boxes seen by several tiles: greedy, most
   confident first, a kept box suppresses every lower-scored box that duplicates it
   (IoU >= ``MERGE_IOU``) or is a piece of the same symbol (one box mostly inside the
   other). A kept box keeps its own extent: it never grows by absorbing another, so what
   survives at a confidence depends only on the boxes scored at least that much.
4. ``match_page`` greedily matches predictions (most confident first) to truth per class.
5. ``metrics_from_counts`` turns the summed counts into per-class and overall figures;
   ``average_precision`` turns the ranked matches into COCO-style AP50.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

SCHEMA = 1
IOU = 0.5  # a prediction matches a truth box of its class at IoU >= this
CONFIDENCE = 0.25  # the ONE pinned confidence: a box scored >= this counts for P/R/F1 and "found"
STREAM_CONFIDENCE = 0.001  # AP50 ranks every merged box scored above this (evaluate.py's NMS threshold)
RECALL_POINTS = 101  # AP50 is COCO's: precision interpolated at 0, 0.01, ..., 1.0 recall, averaged
MERGE_IOU = 0.5  # a same-class box with IoU >= this to a more confident kept box is its duplicate
MERGE_CONTAIN = 0.6  # ... and so is one whose smaller box lies this much inside the other (a piece)
SEAM_TOL = 2.0  # px: a box edge this close to an inner tile edge was cut by that edge
DIGITS = 6  # floats in METRICS.json are rounded to this many decimals
MIN_SUPPORT = 10  # a class weighs in weighted_f1 at most as a class of this many test instances (class_weights)
MATCHES_SCHEMA = 1
MAX_PAGE_FP = 400  # MATCHES.json lists at most this many false positives per page (the most confident)

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
    """One page, per class: counts at the pinned confidence, which truth boxes were found
    there (truth order), and every prediction ranked with whether it matched (for AP50);
    plus how many predictions (at the pinned confidence) and truth boxes it had."""

    counts: dict[str, Counts] = field(default_factory=dict)
    found: dict[str, list[bool]] = field(default_factory=dict)
    ranked: dict[str, list[tuple[float, bool]]] = field(default_factory=dict)
    predictions: int = 0
    truth: int = 0
    #: every prediction scored >= the pinned confidence, most confident first, with the index
    #: (in the page's truth order) of the truth box it matched, -1 for a false positive
    pairs: list[tuple[Detection, int]] = field(default_factory=list)


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


# --------------------------------------------------------------------------------------
# tiles and merging
# --------------------------------------------------------------------------------------
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


def _suppressed_by(box: BoxT, rest: np.ndarray, iou_thr: float, contain_thr: float) -> np.ndarray:
    """Which boxes of ``rest`` (n x 4) duplicate ``box`` (IoU) or are pieces of one symbol with it."""
    iw = np.minimum(rest[:, 2], box[2]) - np.maximum(rest[:, 0], box[0])
    ih = np.minimum(rest[:, 3], box[3]) - np.maximum(rest[:, 1], box[1])
    inter = np.where((iw > 0) & (ih > 0), iw * ih, 0.0)
    a_box = area(box)
    a_rest = np.clip(rest[:, 2] - rest[:, 0], 0, None) * np.clip(rest[:, 3] - rest[:, 1], 0, None)
    union = a_box + a_rest - inter
    smaller = np.minimum(a_box, a_rest)
    with np.errstate(divide="ignore", invalid="ignore"):
        ious = np.where(union > 0, inter / union, 0.0)
        contained = np.where(smaller > 0, inter / smaller, 0.0)
    return (ious >= iou_thr) | (contained >= contain_thr)


def merge_detections(dets: Sequence[Detection], iou_thr: float = MERGE_IOU,
                     contain_thr: float = MERGE_CONTAIN) -> list[Detection]:
    """Merge one page's boxes from overlapping tiles, class by class.

    Greedy, most confident first: a kept box suppresses every lower-scored same-class box
    that duplicates it (IoU >= ``iou_thr``) or is a piece of the same symbol (the smaller
    of the two at least ``contain_thr`` inside the other). Kept boxes are returned exactly
    as they came in, extent and score: nothing grows by absorbing a lower-scored box, so
    the boxes kept at or above any score are the boxes kept when merging only those.
    """
    by_class: dict[str, list[Detection]] = {}
    for d in _order(dets):
        by_class.setdefault(d.cls, []).append(d)
    out: list[Detection] = []
    local = iou_thr > 0 and contain_thr > 0  # only overlapping boxes can suppress: look near each box only
    for group in by_class.values():
        boxes = np.array([d.box for d in group], dtype=np.float64).reshape(-1, 4)
        alive = np.ones(len(group), dtype=bool)
        near = _Cells(boxes) if local and len(group) > _CELL_MIN_BOXES else None
        for i, d in enumerate(group):
            if not alive[i]:
                continue
            out.append(d)
            if near is None:
                if i + 1 < len(group):
                    alive[i + 1:] &= ~_suppressed_by(d.box, boxes[i + 1:], iou_thr, contain_thr)
                continue
            idx = near.after(i)
            idx = idx[alive[idx]]
            if len(idx):
                alive[idx[_suppressed_by(d.box, boxes[idx], iou_thr, contain_thr)]] = False
    return _order(out)


_CELL = 128.0  # px: the side of the cells :func:`merge_detections` buckets a class's boxes in
_CELL_MIN_BOXES = 64  # fewer boxes than this: one vectorised pass over all of them costs less


class _Cells:
    """A class's boxes (n x 4, most confident first) bucketed by the grid cells they cover: two boxes
    that overlap (positive area) share a cell, so a box's suppression candidates are its cells' boxes.
    Same result as comparing with every box, in time that grows with the page's area, not its square."""

    def __init__(self, boxes: np.ndarray) -> None:
        lo = np.floor(boxes[:, :2] / _CELL).astype(np.int64)
        hi = np.floor(boxes[:, 2:] / _CELL).astype(np.int64)
        self.lo, self.hi = lo, np.maximum(hi, lo)
        self.cells: dict[tuple[int, int], list[int]] = {}
        for k in range(len(boxes)):
            for cx in range(int(lo[k, 0]), int(self.hi[k, 0]) + 1):
                for cy in range(int(lo[k, 1]), int(self.hi[k, 1]) + 1):
                    self.cells.setdefault((cx, cy), []).append(k)
        self.arrays = {c: np.array(v, dtype=np.int64) for c, v in self.cells.items()}

    def after(self, i: int) -> np.ndarray:
        """The boxes after ``i`` (less confident) that share a cell with box ``i``, in order, once each."""
        parts = [self.arrays[(cx, cy)] for cx in range(int(self.lo[i, 0]), int(self.hi[i, 0]) + 1)
                 for cy in range(int(self.lo[i, 1]), int(self.hi[i, 1]) + 1)]
        idx = np.unique(np.concatenate(parts)) if len(parts) > 1 else parts[0]
        return idx[idx > i]


# --------------------------------------------------------------------------------------
# matching and metrics
# --------------------------------------------------------------------------------------
def match_page(preds: Iterable[Detection], truth: Iterable[Detection], iou_thr: float = IOU,
               confidence: float = CONFIDENCE) -> PageResult:
    """Greedy per-class matching on one page.

    Most confident first, each prediction takes the unmatched truth box of its class with
    the highest IoU, if that IoU is at least ``iou_thr`` (ties: the earlier truth box);
    else it is a false positive. Counts, ``found`` and ``predictions`` use only predictions
    scored >= ``confidence`` (truth left unmatched by them are false negatives); ``ranked``
    keeps every prediction. Matching in score order makes the two agree: the predictions
    at or above ``confidence`` match exactly as they would alone.
    """
    ordered = _order(preds)
    truth_l = list(truth)
    res = PageResult(truth=len(truth_l))
    by_class: dict[str, list[BoxT]] = {}
    index_of: dict[str, list[int]] = {}
    for i, t in enumerate(truth_l):
        by_class.setdefault(t.cls, []).append(t.box)
        index_of.setdefault(t.cls, []).append(i)
    matched_at: dict[str, list[float | None]] = {c: [None] * len(b) for c, b in by_class.items()}
    arrays = {c: np.array(b, dtype=np.float64).reshape(-1, 4) for c, b in by_class.items()}
    free = {c: np.ones(len(b), dtype=bool) for c, b in by_class.items()}
    for p in ordered:
        counted = p.score >= confidence
        if counted:
            res.predictions += 1
        c = res.counts.setdefault(p.cls, Counts())
        taken = matched_at.get(p.cls, [])
        best = _best_truth(p.box, arrays[p.cls], free[p.cls], iou_thr) if p.cls in arrays else -1
        if best >= 0:
            free[p.cls][best] = False
            taken[best] = p.score
        if counted:
            if best >= 0:
                c.tp += 1
            else:
                c.fp += 1
            res.pairs.append((p, index_of[p.cls][best] if best >= 0 else -1))
        res.ranked.setdefault(p.cls, []).append((p.score, best >= 0))
    for cls, scores in matched_at.items():
        found = [s is not None and s >= confidence for s in scores]
        res.found[cls] = found
        res.counts.setdefault(cls, Counts()).fn += found.count(False)
    return res


def _ious(box: BoxT, boxes: np.ndarray) -> np.ndarray:
    """:func:`iou` of ``box`` with every row of ``boxes``, the same float operations in the same order."""
    w = np.minimum(boxes[:, 2], box[2]) - np.maximum(boxes[:, 0], box[0])
    h = np.minimum(boxes[:, 3], box[3]) - np.maximum(boxes[:, 1], box[1])
    inter = np.where((w > 0) & (h > 0), w * h, 0.0)
    a_rest = np.maximum(0.0, boxes[:, 2] - boxes[:, 0]) * np.maximum(0.0, boxes[:, 3] - boxes[:, 1])
    union = area(box) + a_rest - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def _best_truth(box: BoxT, truth: np.ndarray, free: np.ndarray, iou_thr: float) -> int:
    """The free truth box with the highest IoU >= ``iou_thr`` (ties: the earlier one), else -1."""
    if not free.any():
        return -1
    v = np.where(free, _ious(box, truth), -1.0)
    j = int(np.argmax(v))  # the first of the highest
    return j if v[j] >= iou_thr else -1


def average_precision(ranked: Sequence[tuple[float, bool]], support: int) -> float | None:
    """COCO's AP at one IoU: ``ranked`` is (score, matched) for every prediction of one class.

    Predictions are ranked by score (a stable sort: ties keep their order); precision is
    made non-increasing from the right and read at ``RECALL_POINTS`` recall levels 0, 0.01,
    ..., 1 (0 past the highest recall reached); AP is their mean. None without support.
    """
    if support <= 0:
        return None
    if not ranked:
        return 0.0
    scores = np.array([s for s, _ in ranked], dtype=np.float64)
    hits = np.array([m for _, m in ranked], dtype=bool)[np.argsort(-scores, kind="mergesort")]
    tp = np.cumsum(hits, dtype=np.float64)
    fp = np.cumsum(~hits, dtype=np.float64)
    recall = tp / support
    precision = np.maximum.accumulate((tp / (tp + fp))[::-1])[::-1]
    levels = np.linspace(0.0, 1.0, RECALL_POINTS)
    at = np.searchsorted(recall, levels, side="left")
    return float(np.where(at < len(precision), precision[np.minimum(at, len(precision) - 1)], 0.0).mean())


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), DIGITS)


def class_weights(support: dict[str, int]) -> dict[str, float]:
    """Each class's share of ``weighted_f1``: ``1/sqrt(max(support, MIN_SUPPORT))`` normalised over classes
    with support. Rare classes weigh more, but none more than a class of MIN_SUPPORT test instances: a class
    of one test box would otherwise own a large part of the score, every seed's luck on that box."""
    raw = {c: 1.0 / math.sqrt(max(s, MIN_SUPPORT)) for c, s in support.items() if s > 0}
    total = sum(raw.values())
    return {c: (raw[c] / total if c in raw else 0.0) for c in support}


def metrics_from_counts(counts: dict[str, Counts], classes: Sequence[str], pages: int,
                        predictions: int, truth: int, iou_thr: float = IOU,
                        confidence: float = CONFIDENCE, *,
                        ranked: dict[str, list[tuple[float, bool]]] | None = None,
                        found: dict[str, list[bool]] | None = None) -> dict[str, object]:
    """The METRICS.json object: every class in ``classes``, rounded floats.

    With ``ranked`` (every prediction per class as (score, matched)), each class gets its
    ``ap50`` and the object ``map50`` (their mean over classes with support) and
    ``ap_confidence``; with ``found`` (per class, one flag per truth instance), each class
    gets ``found`` as 0/1 ints. Raises ValueError when ``counts`` names a class not in
    ``classes`` (a model trained on another class list must not be scored silently).
    """
    unknown = sorted((set(counts) | set(ranked or {}) | set(found or {})) - set(classes))
    if unknown:
        raise ValueError(f"counts name classes outside the data set's class list: {unknown}")
    support = {c: counts.get(c, Counts()).support for c in classes}
    weights = class_weights(support)
    per_class: dict[str, dict[str, object]] = {}
    f1s: dict[str, float] = {}
    aps: dict[str, float] = {}
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
        row: dict[str, object] = {
            "tp": k.tp, "fp": k.fp, "fn": k.fn, "support": s,
            "precision": _r(precision), "recall": _r(recall), "f1": _r(f1),
            "count_error": _r((k.predicted - s) / max(s, 1)), "weight": _r(weights[c]),
        }
        if ranked is not None:
            ap = average_precision(ranked.get(c, []), s)
            if ap is not None:
                aps[c] = ap
            row["ap50"] = _r(ap)
        if found is not None:
            flags = found.get(c, [])
            if len(flags) != s or sum(flags) != k.tp:
                raise ValueError(f"class {c}: {len(flags)} found flags ({sum(flags)} set) for support {s}, tp {k.tp}")
            row["found"] = [int(f) for f in flags]
        per_class[c] = row
    macro = sum(f1s.values()) / len(f1s) if f1s else None
    weighted = sum(weights[c] * f for c, f in f1s.items()) if f1s else None
    out: dict[str, object] = {
        "schema": SCHEMA, "iou": iou_thr, "confidence": confidence,
        "pages": pages, "predictions": predictions, "truth": truth,
        "macro_f1": _r(macro), "weighted_f1": _r(weighted), "classes": per_class,
    }
    if ranked is not None:
        out["map50"] = _r(sum(aps.values()) / len(aps)) if aps else None
        out["ap_confidence"] = STREAM_CONFIDENCE
    return out


def evaluate_pages(pages: Sequence[tuple[Sequence[Detection], Sequence[Detection]]],
                   classes: Sequence[str], iou_thr: float = IOU,
                   confidence: float = CONFIDENCE) -> dict[str, object]:
    """Match every (predictions, truth) page and return the METRICS.json object.

    ``pages`` come in a fixed order (evaluate.py: by page file name) and each page's truth
    in its file's order: a class's ``found`` list follows that order, page by page. AP50
    ranks every prediction given, so feed the low-confidence stream (scores above
    ``STREAM_CONFIDENCE``): P/R/F1 and ``found`` still count only scores >= ``confidence``.
    """
    return metrics_from_results([match_page(preds, truth, iou_thr, confidence) for preds, truth in pages],
                                classes, iou_thr, confidence)


def metrics_from_results(results: Sequence[PageResult], classes: Sequence[str], iou_thr: float = IOU,
                         confidence: float = CONFIDENCE) -> dict[str, object]:
    """The METRICS.json object of pages already matched by :func:`match_page` (in page order), for a
    caller that also needs each page's matches (evaluate.py: MATCHES.json) without matching twice."""
    total: dict[str, Counts] = {}
    ranked: dict[str, list[tuple[float, bool]]] = {}
    found: dict[str, list[bool]] = {}
    n_pred = n_truth = 0
    for res in results:
        n_pred += res.predictions
        n_truth += res.truth
        for c, k in res.counts.items():
            total.setdefault(c, Counts())
            total[c] += k
        for c, r in res.ranked.items():
            ranked.setdefault(c, []).extend(r)
        for c, f in res.found.items():
            found.setdefault(c, []).extend(f)
    return metrics_from_counts(total, classes, len(results), n_pred, n_truth, iou_thr, confidence,
                               ranked=ranked, found=found)


# --------------------------------------------------------------------------------------
# the matched boxes of one page (MATCHES.json)
# --------------------------------------------------------------------------------------
def _box(b: BoxT) -> list[float]:
    return [round(float(v), 1) for v in b]


def page_matches(name: str, preds: Sequence[Detection], truth: Sequence[Detection], iou_thr: float = IOU,
                 confidence: float = CONFIDENCE, max_fp: int = MAX_PAGE_FP,
                 result: PageResult | None = None) -> dict[str, object]:
    """One page of MATCHES.json: what :func:`match_page` decided at the pinned confidence, box by box
    (``result``: the page's match_page of these same predictions and truth, when the caller has it).

    ``predictions``: every prediction scored >= ``confidence``, most confident first, each with
    its class, score, box and ``match``: ``tp`` (with ``truth``, the index of the truth box it
    matched in the page's truth order) or ``fp`` (with ``overlaps``: the truth box of any class
    it overlaps most, its index, class and IoU, or None when it overlaps none). ``missed``:
    every truth box no such prediction matched (the false negatives). At most ``max_fp`` false
    positives are listed (the most confident); ``fp_dropped`` counts the rest per class, so the
    counts the page implies stay exact.
    """
    truth_l = list(truth)
    res = result if result is not None else match_page(preds, truth_l, iou_thr, confidence)
    tb = np.array([t.box for t in truth_l], dtype=np.float64).reshape(-1, 4)
    matched: set[int] = set()
    listed: list[dict[str, object]] = []
    dropped: dict[str, int] = {}
    fps = 0
    for p, j in res.pairs:
        row: dict[str, object] = {"class": p.cls, "score": round(float(p.score), 4), "box": _box(p.box)}
        if j >= 0:
            matched.add(j)
            row.update(match="tp", truth=j)
        else:
            fps += 1
            if fps > max_fp:
                dropped[p.cls] = dropped.get(p.cls, 0) + 1
                continue
            overlaps = None
            if len(tb):
                x1 = np.maximum(tb[:, 0], p.box[0])
                y1 = np.maximum(tb[:, 1], p.box[1])
                x2 = np.minimum(tb[:, 2], p.box[2])
                y2 = np.minimum(tb[:, 3], p.box[3])
                inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
                union = ((tb[:, 2] - tb[:, 0]) * (tb[:, 3] - tb[:, 1]) + area(p.box) - inter)
                ious = np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)
                k = int(np.argmax(ious))
                if ious[k] > 0:
                    overlaps = {"truth": k, "class": truth_l[k].cls, "iou": round(float(ious[k]), 3)}
            row.update(match="fp", overlaps=overlaps)
        listed.append(row)
    missed = [{"truth": i, "class": t.cls, "box": _box(t.box)} for i, t in enumerate(truth_l) if i not in matched]
    return {"page": name, "truth": len(truth_l), "predictions": listed, "missed": missed,
            "fp_dropped": dict(sorted(dropped.items()))}


def matches_file(pages: Sequence[dict[str, object]], classes: Sequence[str], iou_thr: float = IOU,
                 confidence: float = CONFIDENCE, max_fp: int = MAX_PAGE_FP) -> dict[str, object]:
    """The MATCHES.json object: the pages of :func:`page_matches` under a small header."""
    return {"schema": MATCHES_SCHEMA, "iou": iou_thr, "confidence": confidence, "max_fp_per_page": max_fp,
            "classes": list(classes), "pages": list(pages)}
