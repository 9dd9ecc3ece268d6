"""A tuned confidence beside the pinned one (pure): per class, the threshold that maximises F1 on the val
split, and the test F1 it would give. Reported only; the gate and METRICS.json keep the pinned 0.25.

What it reads is a STREAM.json object (written beside a METRICS.json by the threshold evaluation,
looper/executors/streameval.py): per class, every prediction evaluate.py ranked for AP50 (scores down to
``STREAM_CONFIDENCE``) as ``[score, matched]``, and the class's truth count (``support``). MATCHES.json
cannot serve: it lists only predictions at or above the pinned confidence, and the question is what lies
below it.

Why a threshold read off the ranked stream is the F1 evaluate.py would report at that confidence: its
tile NMS, merge and matching all go most confident first, so the boxes kept and matched at or above any
score are those it would keep and match with that score pinned (metrics.match_page, merge_detections).
The stream's F1 at the pinned confidence therefore equals METRICS.json's, which :func:`disagreements`
checks before anything is shown.

The rule: the set of val boxes "scored >= t" that maximises F1 (ties: the set of the higher cut, fewer boxes
shown for the same F1). Every threshold in a range selects that set: above the highest score of a box left
out (or the stream's floor, 0.001, when none is) up to the lowest score of a box in it. The threshold is the
middle of that range. Its upper end, the score of the least confident val box taken, is the worst place to
cut: a test box of the same kind scored a hair lower falls off (on the demo's 2 val pages, where most
classes reach val F1 1.0 at some cut, cutting there gave weighted F1 0.747 on test against 0.904 at 0.25;
the middle 0.912, the lower end 0.852: one night's best, read, not proven). A class with no val truth gets
no threshold ("no truth on val"), and so does one whose val predictions match nothing (F1 is 0 at every
threshold): none is invented.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from looper.core.scoring.metrics import CONFIDENCE, STREAM_CONFIDENCE, class_weights

STREAM_SCHEMA = 1
TOLERANCE = 1e-6  # METRICS.json rounds to 6 decimals
NO_TRUTH = "no truth of this class on the val split"
NO_HIT = "no prediction of this class matches a val truth box, at any score"

Ranked = Sequence[tuple[float, bool]]


def f1_at(ranked: Ranked, support: int, t: float) -> float | None:
    """F1 of the boxes scored >= ``t`` (metrics.metrics_from_counts' formula); None without support."""
    if support <= 0:
        return None
    tp = sum(1 for s, m in ranked if s >= t and m)
    predicted = sum(1 for s, _ in ranked if s >= t)
    return _f1(tp, predicted, support)


def _f1(tp: int, predicted: int, support: int) -> float:
    precision = tp / predicted if predicted else 0.0
    recall = tp / support
    return 2 * precision * recall / (precision + recall) if precision and recall else 0.0


@dataclass(frozen=True)
class Cut:
    """The F1-maximising set of val boxes: every threshold in (``low``, ``high``] selects it; ``threshold``
    is the middle of that range; ``f1`` the val F1 there."""

    threshold: float
    f1: float
    low: float
    high: float


def best_threshold(ranked: Ranked, support: int, floor: float = STREAM_CONFIDENCE) -> Cut | str:
    """The :class:`Cut` maximising F1 (ties: the higher cut), or why there is none (:data:`NO_TRUTH`,
    :data:`NO_HIT`). ``floor``: the lowest score the stream could list (nothing below it is known)."""
    if support <= 0:
        return NO_TRUTH
    best: tuple[float, float, float] | None = None  # (f1, high, low)
    tp = predicted = 0
    ordered = sorted(ranked, key=lambda r: -r[0])
    for i, (score, matched) in enumerate(ordered):
        tp += bool(matched)
        predicted += 1
        last = i + 1 == len(ordered)
        if not last and ordered[i + 1][0] == score:
            continue  # a threshold takes every box of its score
        below = min(floor, score) if last else ordered[i + 1][0]
        f1 = _f1(tp, predicted, support)
        if f1 > 0 and (best is None or f1 > best[0]):
            best = (f1, float(score), float(below))
    if best is None:
        return NO_HIT
    f1, high, low = best
    middle = (low + high) / 2
    return Cut(middle if low < middle else high, f1, low, high)  # two neighbouring floats: the upper one


@dataclass(frozen=True)
class ClassThreshold:
    """One class: its val threshold (None with ``why``), F1 on val at it and at the pinned confidence,
    and on test at the pinned confidence and at the val threshold."""

    cls: str
    val_support: int
    test_support: int
    threshold: float | None
    why: str
    low: float | None  # every threshold in (low, high] gives the same val F1
    high: float | None
    val_f1: float | None
    val_f1_fixed: float | None
    test_f1_fixed: float | None
    test_f1_tuned: float | None

    def as_json(self) -> dict[str, Any]:
        return {"class": self.cls, "val_support": self.val_support, "test_support": self.test_support,
                "threshold": self.threshold, "why": self.why, "val_range": None if self.low is None else
                [self.low, self.high], "val_f1": _r(self.val_f1),
                "val_f1_fixed": _r(self.val_f1_fixed), "test_f1_fixed": _r(self.test_f1_fixed),
                "test_f1_tuned": _r(self.test_f1_tuned)}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def class_rows(val: dict[str, Any], test: dict[str, Any], confidence: float = CONFIDENCE) -> list[ClassThreshold]:
    """Per class of ``test`` (a STREAM.json object; ``val`` the same model's on the val split), in its order."""
    rows = []
    for c in test["classes"]:
        vr, vs = _ranked(val, c), int(val["support"].get(c, 0))
        tr, ts = _ranked(test, c), int(test["support"].get(c, 0))
        cut = best_threshold(vr, vs)
        if isinstance(cut, str):
            rows.append(ClassThreshold(c, vs, ts, None, cut, None, None, None, f1_at(vr, vs, confidence),
                                       f1_at(tr, ts, confidence), None))
            continue
        rows.append(ClassThreshold(c, vs, ts, cut.threshold, "", cut.low, cut.high, cut.f1, f1_at(vr, vs, confidence),
                                   f1_at(tr, ts, confidence), f1_at(tr, ts, cut.threshold)))
    return rows


def weighted(rows: Sequence[ClassThreshold]) -> tuple[float | None, float | None]:
    """weighted_f1 on test (metrics.class_weights over the test supports) at the pinned confidence, and with
    each class at its val threshold (a class without one at the pinned confidence)."""
    weights = class_weights({r.cls: r.test_support for r in rows})
    scored = [r for r in rows if r.test_support > 0]
    if not scored:
        return None, None
    fixed = sum(weights[r.cls] * (r.test_f1_fixed or 0.0) for r in scored)
    tuned = sum(weights[r.cls] * ((r.test_f1_fixed if r.test_f1_tuned is None else r.test_f1_tuned) or 0.0)
                for r in scored)
    return fixed, tuned


def _ranked(obj: dict[str, Any], c: str) -> list[tuple[float, bool]]:
    return [(float(s), bool(m)) for s, m in obj["ranked"].get(c, [])]


def problems(obj: Any, split: str) -> list[str]:
    """What makes ``obj`` not a STREAM.json object of ``split`` (its shape only); [] when it is one."""
    if not isinstance(obj, dict) or obj.get("schema") != STREAM_SCHEMA:
        return [f"STREAM.json ({split}) is not a schema {STREAM_SCHEMA} object"]
    if obj.get("split") != split:
        return [f"STREAM.json says split {obj.get('split')!r}, expected {split!r}"]
    classes, support, ranked = obj.get("classes"), obj.get("support"), obj.get("ranked")
    if not (isinstance(classes, list) and isinstance(support, dict) and isinstance(ranked, dict)):
        return [f"STREAM.json ({split}) lacks classes, support or ranked"]
    for c, rows in ranked.items():
        if c not in classes or not isinstance(rows, list) or not all(_entry(r) for r in rows):
            return [f"STREAM.json ({split}): class {c!r} is not a list of [score, matched] of a listed class"]
    if not all(c in classes and isinstance(n, int) and n >= 0 for c, n in support.items()):
        return [f"STREAM.json ({split}): support is not a count per listed class"]
    return []


def _entry(r: Any) -> bool:
    return (isinstance(r, list) and len(r) == 2 and isinstance(r[0], (int, float)) and math.isfinite(r[0])
            and isinstance(r[1], bool))


def disagreements(stream: dict[str, Any], metrics: Any, confidence: float = CONFIDENCE) -> list[str]:
    """Each class whose F1 and support in ``metrics`` (the METRICS.json of the same evaluation) the stream
    does not bear out at the pinned ``confidence``; [] when they agree."""
    said = metrics.get("classes") if isinstance(metrics, dict) else None
    if not isinstance(said, dict):
        return ["METRICS.json has no per-class table"]
    if sorted(said) != sorted(stream["classes"]):
        return ["METRICS.json and STREAM.json name different classes"]
    out = []
    for c in stream["classes"]:
        support = int(stream["support"].get(c, 0))
        f1 = f1_at(_ranked(stream, c), support, confidence)
        row = said[c]
        got = row.get("f1") if isinstance(row, dict) else None
        same = (got is None) if f1 is None else (isinstance(got, (int, float)) and abs(got - f1) <= TOLERANCE)
        if not same or (isinstance(row, dict) and row.get("support") != support):
            out.append(f"class {c}: f1 {got!r} in METRICS.json, {_r(f1)} from STREAM.json at {confidence}")
    return out
