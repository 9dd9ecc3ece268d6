"""The per-class tables of the report: baseline vs best precision and recall
(:func:`class_rows`) and the recalls with their 95 % Wilson intervals (:func:`class_intervals`,
:func:`with_intervals`)."""

from __future__ import annotations

import re
from typing import Any

from looper.report.fmt import num
from looper.report.night import Night, rare_classes, seed_count

__all__ = ["class_intervals", "class_rows", "rare_classes", "with_intervals"]


def class_rows(n: Night) -> list[dict[str, Any]]:
    """Per class: baseline vs best precision and recall with deltas, rare classes marked."""
    names = [c for c in n.class_order if c in n.baseline_classes or c in n.best_classes]
    names += sorted((set(n.baseline_classes) | set(n.best_classes)) - set(names))
    rare = n.rare_classes
    rows = []
    for c in names:
        b, k = n.baseline_classes.get(c, {}), n.best_classes.get(c, {})
        pb, pk, rb, rk = num(b.get("precision")), num(k.get("precision")), num(b.get("recall")), num(k.get("recall"))
        rows.append({
            "class": c, "support": int(b.get("support") or k.get("support") or 0), "rare": c in rare,
            "p_base": pb, "p_best": pk, "d_precision": None if pb is None or pk is None else pk - pb,
            "r_base": rb, "r_best": rk, "d_recall": None if rb is None or rk is None else rk - rb,
        })
    return rows


#: The counts in a class reason of the gate: "10 of 10 found -> 0 of 10".
_COUNTS = re.compile(r"(\d+) of (\d+) found -> (\d+) of (\d+)")


def with_intervals(reason: str) -> str:
    """A class reason of the gate with the 95 % Wilson intervals of its two recalls appended
    (``...; 95% intervals 0.72-1.00 -> 0.00-0.28``); other reasons come back unchanged."""
    m = _COUNTS.search(reason)
    if m is None:
        return reason
    rf, rt, cf, ct = (int(x) for x in m.groups())
    if not (0 <= rf <= rt and 0 <= cf <= ct):
        return reason
    (a, b), (c, d) = _interval(rf, rt), _interval(cf, ct)
    return f"{reason}; 95% intervals {a:.2f}-{b:.2f} -> {c:.2f}-{d:.2f}"


def _interval(found: int, total: int) -> tuple[float, float]:
    from looper.core.keep.stats import recall_interval

    return recall_interval(found, total)


def _pooled(row: dict[str, Any], runs: int) -> tuple[int, int] | None:
    """(found, total) instance-runs of a class from its mean recall, support and seed count."""
    recall, support = num(row.get("recall")), num(row.get("support"))
    if recall is None or support is None or support <= 0:
        return None
    total = int(round(support)) * runs
    return min(total, max(0, round(recall * total))), total


def _same_baseline(judged_against: str, shown: str) -> bool:
    """Whether a verdict's ``baseline`` ("tag-start" | "approved:<file>") is the report's baseline
    (``"tag-start #id"`` | ``"approved:<file> (#id)"``): only then are its class counts the ones shown."""
    if judged_against == "tag-start":
        return shown.startswith("tag-start")
    return judged_against.startswith("approved:") and (shown == judged_against or shown.startswith(judged_against + " "))


def class_intervals(n: Night) -> list[dict[str, Any]]:
    """Per class with truth: the baseline's and the best's recall with 95 % Wilson intervals.

    From the best's verdict when it carries the gate's class tests against the baseline the
    report shows (the counts pooled over the seeds it compared), else from the recalls,
    supports and seed counts of the two experiments. ``fails``: the gate failed the class (a discard reason).
    """
    best = n.best
    tests: dict[str, dict[str, Any]] = {}
    metrics = (best.verdict or {}).get("metrics") if best is not None and isinstance(best.verdict, dict) else None
    if _same_baseline(str((metrics or {}).get("baseline") or ""), n.baseline_source):
        for t in (metrics or {}).get("class_tests") or []:
            if isinstance(t, dict) and t.get("against") == "baseline" and isinstance(t.get("class"), str):
                tests[t["class"]] = t
    base_runs = n.reference_seeds
    best_runs = seed_count(best.metrics if best is not None else None)
    rare = n.rare_classes
    rows = []
    for r in class_rows(n):
        c = r["class"]
        t = tests.get(c)
        if t is not None and all(isinstance(t.get(k), int) for k in ("ref_found", "ref_total", "cand_found",
                                                                      "cand_total")):
            base, top, source = (t["ref_found"], t["ref_total"]), (t["cand_found"], t["cand_total"]), "gate"
        else:
            base = _pooled(n.baseline_classes.get(c, {}), base_runs)
            top = _pooled(n.best_classes.get(c, {}), best_runs)
            source = "recall x support x seeds"
        if base is None and top is None:
            continue
        row: dict[str, Any] = {"class": c, "support": r["support"], "rare": c in rare, "source": source,
                               "fails": bool(t and t.get("fails")),
                               "p": num(t.get("p")) if t else None, "test": t.get("test") if t else None}
        for side, counts in (("base", base), ("best", top)):
            if counts is None:
                row.update({f"{side}_found": None, f"{side}_total": None, f"{side}_recall": None,
                            f"{side}_lo": None, f"{side}_hi": None})
                continue
            lo, hi = _interval(*counts)
            row.update({f"{side}_found": counts[0], f"{side}_total": counts[1],
                        f"{side}_recall": counts[0] / counts[1] if counts[1] else None, f"{side}_lo": lo,
                        f"{side}_hi": hi})
        rows.append(row)
    return rows
