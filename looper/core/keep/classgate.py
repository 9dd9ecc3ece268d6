"""Class gates: does a candidate lose a class's own test instances? (pure; the gate's rule 4, looper.core.keep.gate)

Every live class is tested against the baseline's runs and, when the current best is not the
baseline, against the best's: the exact McNemar test on the seed-paired instances (``found`` lists,
run j against run j), one-sided for a loss, pooled over the paired seeds; without ``found`` Fisher's
exact test on the pooled found counts. Counts are deflated by the seed overdispersion the replicate
runs show (:func:`looper.core.keep.stats.dispersion`: the spread of the found counts against each listed
instance's own spread over the runs, so instances found or lost together count as the blocks they
are), and one Holm family over every class test at the
look's alpha decides; a class fails only when its test is rejected **and** its recall drops by more
than ``max_class_drop`` (against the current best, only when the candidate's recall fell to 0).
Also the helpers that read METRICS.json objects, shared with the gate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from looper.core.keep import stats

EPS = 1e-9
_MAX_LISTED = 8
MCNEMAR = "exact McNemar"
FISHER = "Fisher exact, unpaired"


class Unusable(Exception):
    """The gate's input cannot be judged; the message says why."""


# -- reading METRICS.json objects --------------------------------------------------------


def num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def classes(metrics: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(metrics, dict):
        return {}
    rows = metrics.get("classes")
    if not isinstance(rows, dict):
        return {}
    return {str(k): v for k, v in rows.items() if isinstance(v, dict)}


def fmt_over(value: float, limit: float) -> tuple[str, str]:
    """Format value and limit with as few decimals (>= 2) as show value > limit."""
    for digits in (2, 3, 4, 6):
        a, b = f"{value:.{digits}f}", f"{limit:.{digits}f}"
        if float(a) > float(b):
            return a, b
    return repr(value), repr(limit)  # shortest round-trip forms differ when the values do


def listing(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    return shown + (f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else "")


def _found(row: dict[str, Any], name: str, who: str, support: float) -> list[int] | None:
    """The class's per-instance results (0/1 per test instance), None when absent (old runs)."""
    found = row.get("found")
    if found is None:
        return None
    if not isinstance(found, list) or any(type(x) is not int or x not in (0, 1) for x in found):
        raise Unusable(f"{who} class {name!r} has a 'found' that is not a list of 0/1")
    if len(found) != support:
        raise Unusable(f"{who} class {name!r} lists {len(found)} instances in 'found' but has "
                       f"support {support:g} (the test set differs)")
    return found


def _side(runs: list[dict[str, Any]], name: str, who: str) -> tuple[float, list[list[int] | None], list[int]]:
    """(support, found list or None per run, found count per run) of one class on one side."""
    support: float | None = None
    lists: list[list[int] | None] = []
    counts: list[int] = []
    for i, run in enumerate(runs, start=1):
        row = classes(run).get(name)
        sup = num(row.get("support")) if row is not None else None
        recall = num(row.get("recall")) if row is not None else None
        if row is None or sup is None or recall is None:
            why = "lacks the class" if row is None else "has no numeric support and recall for it"
            raise Unusable(f"{who} run {i} {why}: {name!r} (the test set or class list differs)")
        if support is not None and sup != support:
            raise Unusable(f"{who} runs disagree on the support of {name!r} ({support:g} vs {sup:g})")
        support = sup
        found = _found(row, name, who, sup)
        lists.append(found)
        counts.append(sum(found) if found is not None else round(recall * sup))
    assert support is not None
    return support, lists, counts


def _replicates(counts: list[int], lists: list[list[int] | None], support: int) -> list[stats.Run]:
    """One side's runs as :func:`stats.dispersion` reads them: with the instances where every run lists them."""
    if all(found is not None for found in lists):
        return [(f, support, tuple(found)) for f, found in zip(counts, lists, strict=True) if found is not None]
    return [(f, support) for f in counts]


def compare(name: str, ref: list[dict[str, Any]], cand: list[dict[str, Any]],
            ref_who: str) -> tuple[stats.ClassCounts, list[stats.Run], list[stats.Run]]:
    """One class, reference runs vs candidate runs: paired when every run has ``found``.

    Also returns each side's runs (found, support and, where listed, the instances), the replicates :func:`stats.dispersion` reads.
    """
    ref_support, ref_lists, ref_counts = _side(ref, name, ref_who)
    cand_support, cand_lists, cand_counts = _side(cand, name, "candidate")
    if ref_support != cand_support:
        raise Unusable(f"the support of {name!r} differs: {ref_who} {ref_support:g}, candidate "
                       f"{cand_support:g} (the test set differs)")
    support = round(ref_support)
    per_run = (_replicates(ref_counts, ref_lists, support), _replicates(cand_counts, cand_lists, support))
    ref_found = [f for f in ref_lists if f is not None]
    cand_found = [f for f in cand_lists if f is not None]
    if len(ref_found) == len(ref_lists) and len(cand_found) == len(cand_lists):
        return stats.paired_counts(ref_found, cand_found), *per_run
    return stats.unpaired_counts(ref_counts, cand_counts, support), *per_run


def fmt_below(p: float, threshold: float) -> str:
    """``"p < threshold"`` with as few significant digits (>= 2) as show the order."""
    for digits in (2, 3, 4, 6):
        a, b = f"{p:.{digits}g}", f"{threshold:.{digits}g}"
        if float(a) < float(b):
            return f"{a} < {b}"
    return f"{p!r} <= {threshold!r}"


@dataclass(frozen=True)
class ClassTest:
    name: str
    against: str  # "baseline" | "best"
    counts: stats.ClassCounts
    p: float = 1.0


def _class_words(t: ClassTest, h: stats.HolmResult, family: int, margin: float, phi: float) -> str:
    c = t.counts
    drop, limit = fmt_over(c.drop, margin)
    test = (MCNEMAR if c.paired else FISHER) + (f", counts / {phi:.1f} for seed spread" if phi > 1 else "")
    where = "vs baseline" if t.against == "baseline" else "vs the current best"
    head = f"recall.{t.name}" if t.against == "baseline" else f"recall.{t.name} fell to 0"
    return (f"{head}: {c.ref_found} of {c.ref_total} found -> {c.cand_found} of {c.cand_total} {where}, "
            f"p = {fmt_below(h.p, h.threshold)} ({test}, Holm over {family}); drop {drop} > {limit}")


def _test_facts(t: ClassTest, h: stats.HolmResult, fails: bool) -> dict[str, Any]:
    c = t.counts
    return {"class": t.name, "against": t.against, "test": MCNEMAR if c.paired else FISHER,
            "ref_found": c.ref_found, "ref_total": c.ref_total, "cand_found": c.cand_found,
            "cand_total": c.cand_total, "paired_runs": c.runs, "lost": c.lost, "gained": c.gained,
            "drop": round(c.drop, 6), "p": h.p, "holm_threshold": h.threshold, "significant": h.rejected,
            "fails": fails,
            # 95 % Wilson intervals of the pooled recalls (instance-runs taken as independent)
            "ref_interval": list(stats.recall_interval(c.ref_found, c.ref_total)),
            "cand_interval": list(stats.recall_interval(c.cand_found, c.cand_total))}


def failures(tests: list[ClassTest], replicates: dict[tuple[str, str], list[stats.Run]],
             cand_recall: dict[str, float], dead: list[str], gated: int, max_class_drop: float, alpha: float,
             facts: dict[str, Any]) -> list[str]:
    """Holm over every class test at ``alpha``; a class fails when significant AND over the margin.
    ``tests``: from :func:`compare`; ``gated``: how many classes the baseline gates; writes the tests
    and notes into the verdict's ``facts``; returns the failures in words."""
    phi, phi_df = stats.dispersion(list(replicates.values()))
    tests = [ClassTest(t.name, t.against, t.counts, stats.class_p_value(t.counts, phi)) for t in tests]
    facts.update({"class_dispersion": phi, "class_dispersion_df": phi_df})
    holm = stats.holm([t.p for t in tests], alpha)
    blocking: list[str] = []
    class_facts = []
    for t, h in zip(tests, holm, strict=True):
        fails = h.rejected and t.counts.drop > max_class_drop + EPS and (
            t.against == "baseline" or cand_recall[t.name] <= 0)
        class_facts.append(_test_facts(t, h, fails))
        if fails:
            blocking.append(_class_words(t, h, len(tests), max_class_drop, phi))
    facts["class_tests"] = class_facts
    unpaired = [t.name for t in tests if not t.counts.paired]
    facts["notes"].append(f"class gates: one-sided {MCNEMAR} on seed-paired instances (Fisher's exact test "
                          f"where unpaired), Holm over {len(tests)} test(s) at {alpha:.4g}; a class fails "
                          f"only when significant and its recall drops more than {max_class_drop:g}")
    if phi > 1:
        facts["notes"].append(f"class recalls vary between seeds {phi:.1f}x more than independent instances "
                              f"would (df {phi_df}): each class test counts an instance as 1/{phi:.1f} of one")
    if unpaired:
        facts["notes"].append(f"no per-instance results ('found') for {listing(sorted(set(unpaired)))}: "
                              "tested unpaired on recall x support counts (weaker)")
    if dead:
        facts["notes"].append(f"{len(dead)} of {gated} class gates are dead: {listing(dead)}")
    return blocking
