"""The score from evidence (pure): recount METRICS.json from MATCHES.json and name every disagreement.

evaluate.py writes MATCHES.json (every matched box of every page, at the pinned confidence)
before METRICS.json. The counts MATCHES.json implies (:func:`looper.core.scoring.matches.implied_counts`)
are exactly METRICS.json's, and from counts alone follow each class's precision, recall and
F1, ``macro_f1`` and ``weighted_f1`` (:func:`looper.core.scoring.metrics.metrics_from_counts`), plus the
totals ``pages``, ``predictions`` and ``truth``. :func:`disagreements` recomputes all of them
and lists each field where METRICS.json says something else; the harness refuses such a
METRICS.json (a harness error naming both files: code that could rewrite one of them ran
where it must not).

What it cannot recount: ``ap50``/``map50`` rank every box down to confidence 0.001, which
MATCHES.json does not list; the per-instance ``found`` flags. The gate's score
(``weighted_f1`` or ``macro_f1``) is always recounted.
"""

from __future__ import annotations

import math
from typing import Any

from looper.core.scoring import matches as core_matches
from looper.core.scoring.metrics import Counts, metrics_from_counts

TOLERANCE = 1e-6  # METRICS.json rounds floats to 6 decimals (metrics.DIGITS); an honest file differs by < 5e-7
COUNTS = ("tp", "fp", "fn")
RATES = ("precision", "recall", "f1")
TOTALS = ("macro_f1", "weighted_f1")
MAX_NAMED = 6  # a refusal names at most this many fields


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) else None


def _same(said: Any, recounted: Any) -> bool:
    if recounted is None:
        return said is None
    got = _num(said)
    return got is not None and abs(got - float(recounted)) <= TOLERANCE


def _class_list(metrics: dict[str, Any], matches: dict[str, Any]) -> list[str] | str:
    """The classes both files name, or why they cannot be compared."""
    said = metrics.get("classes")
    if not isinstance(said, dict) or not all(isinstance(v, dict) for v in said.values()):
        return "METRICS.json has no per-class table"
    listed = matches.get("classes")
    names = list(listed) if isinstance(listed, list) and all(isinstance(c, str) for c in listed) else list(said)
    if sorted(names) != sorted(said):
        return f"METRICS.json names classes {sorted(said)[:4]}..., MATCHES.json {sorted(names)[:4]}..."
    return names


def disagreements(metrics: Any, matches: Any) -> list[str]:
    """Every field of ``metrics`` (a METRICS.json object) the evidence in ``matches`` (its MATCHES.json
    object) does not bear out; [] when the two agree."""
    shape = core_matches.problems(matches)
    if shape:
        return shape[:MAX_NAMED]
    if not isinstance(metrics, dict):
        return ["METRICS.json is not an object"]
    classes = _class_list(metrics, matches)
    if isinstance(classes, str):
        return [classes]
    implied = core_matches.implied_counts(matches)
    unknown = sorted(set(implied) - set(classes))
    if unknown:
        return [f"MATCHES.json lists boxes of classes METRICS.json does not have: {unknown[:4]}"]
    counts = {c: Counts(**implied.get(c, {"tp": 0, "fp": 0, "fn": 0})) for c in classes}
    pages = matches["pages"]
    predictions = sum(len(p["predictions"]) + sum(int(n) for n in (p.get("fp_dropped") or {}).values())
                      for p in pages)
    truth = sum(int(p.get("truth", 0)) if isinstance(p.get("truth"), int) else 0 for p in pages)
    want = metrics_from_counts(counts, classes, len(pages), predictions, truth)
    out: list[str] = []
    for key in ("pages", "predictions", "truth"):
        if metrics.get(key) != want[key]:
            out.append(f"{key}: {metrics.get(key)!r} in METRICS.json, {want[key]} from MATCHES.json")
    for key in TOTALS:
        if not _same(metrics.get(key), want[key]):
            out.append(f"{key}: {metrics.get(key)!r} in METRICS.json, {want[key]} recounted from MATCHES.json")
    for c in classes:
        said, row = metrics["classes"][c], want["classes"][c]  # type: ignore[index]
        for key in COUNTS:
            if said.get(key) != row[key]:
                out.append(f"class {c} {key}: {said.get(key)!r} in METRICS.json, {row[key]} in MATCHES.json")
        for key in RATES:
            if not _same(said.get(key), row[key]):
                out.append(f"class {c} {key}: {said.get(key)!r} in METRICS.json, {row[key]} recounted from MATCHES.json")
    return out[:MAX_NAMED] + ([f"... and {len(out) - MAX_NAMED} more"] if len(out) > MAX_NAMED else [])
