"""The gate: candidate vs the current best vs the baseline, with noise, dead gates, simpler-wins.

Inputs are METRICS.json objects (see docs/INTERFACES.md). The rules, in order:

1. Inputs: every candidate run (and every current-best run) must carry a finite number
   under ``cfg.score``; every class the baseline gates must have a recall in every
   candidate run. Otherwise -> ERROR (the harness handed the gate something unusable).
2. Dead gates (:func:`dead_gates`): a class gate whose baseline recall is at or below
   ``max_class_drop`` can never fire (recall cannot go below 0), and a baseline that
   predicted nothing gates nothing. Dead gates are listed in every verdict's metrics.
   When every class gate is dead -> ERROR "the baseline cannot gate: ...".
3. Class gates vs the baseline: a live class whose mean candidate recall is more than
   ``max_class_drop`` below its baseline recall fails:
   "recall.return_grille dropped 0.07 vs baseline (limit 0.05)".
4. Lost classes vs the current best: a class with recall > 0 in the current best and
   recall 0 in the candidate fails, even if the average rose.
   Any failure in 3 or 4 -> DISCARD.
5. The score: ``diff = mean(candidate) - mean(best)`` against the noise band
   ``noise_sigmas * noise_sigma / sqrt(number of candidate runs)`` (the band narrows as
   reruns pin the candidate's mean down). When ``noise_sigma`` is unknown or 0 the band is
   the fixed :data:`UNMEASURED_NOISE_BAND` (absolute score units), and the verdict says so.
   - ``diff > band`` -> KEEP;  ``diff < -band`` -> DISCARD;
   - inside the band: a simpler candidate that is not worse (``diff >= 0``) -> KEEP;
     otherwise, while reruns are left -> INCONCLUSIVE asking for them ("needs 2 more
     seeds", ``needs_reruns``); once reruns are spent, still inside: simpler -> KEEP
     (simpler wins a tie), else INCONCLUSIVE (final; a tie keeps the incumbent).

Every verdict's metrics carry ``baseline`` (``"approved:<file>"`` or ``"tag-start"``),
``dead_gates`` and ``notes`` (dead gates and the noise band in words).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from looper.core.verdict import Outcome, Verdict

#: The noise band (absolute score units, e.g. weighted_f1) used when the noise was never
#: measured (``noise_sigma`` None or 0): a difference of at most 0.01 is treated as noise.
UNMEASURED_NOISE_BAND = 0.01

_EPS = 1e-9
_MAX_LISTED = 8


class _Unusable(Exception):
    """The gate's input cannot be judged; the message says why."""


@dataclass(frozen=True)
class GateConfig:
    score: str = "weighted_f1"
    max_class_drop: float = 0.05
    noise_sigmas: float = 2.0
    unmeasured_band: float = UNMEASURED_NOISE_BAND

    def __post_init__(self) -> None:
        if not self.score:
            raise ValueError("gate.score must name a metric, e.g. 'weighted_f1'")
        if not (math.isfinite(self.max_class_drop) and 0.0 <= self.max_class_drop <= 1.0):
            raise ValueError(f"gate.max_class_drop must be within [0, 1], got {self.max_class_drop!r}")
        if not (math.isfinite(self.noise_sigmas) and self.noise_sigmas >= 0.0):
            raise ValueError(f"gate.noise_sigmas must be a number >= 0, got {self.noise_sigmas!r}")
        if not (math.isfinite(self.unmeasured_band) and self.unmeasured_band > 0.0):
            raise ValueError(f"the unmeasured noise band must be > 0, got {self.unmeasured_band!r}")


@dataclass(frozen=True)
class GateInput:
    """``candidate``: one METRICS.json per seed of the candidate (at least one).
    ``best``: the current best's runs (empty: the baseline is the current best)."""

    candidate: list[dict[str, Any]]
    best: list[dict[str, Any]]
    baseline: dict[str, Any]
    baseline_source: str
    noise_sigma: float | None = None
    candidate_simpler: bool = False


@dataclass(frozen=True)
class GateDecision:
    outcome: Outcome  # KEEP | DISCARD | INCONCLUSIVE | ERROR
    verdict: Verdict
    needs_reruns: int = 0
    score: float | None = None  # mean candidate score; None when nothing usable was measured
    notes: list[str] = field(default_factory=list)


# -- reading METRICS.json objects --------------------------------------------------------


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _classes(metrics: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(metrics, dict):
        return {}
    classes = metrics.get("classes")
    if not isinstance(classes, dict):
        return {}
    return {str(k): v for k, v in classes.items() if isinstance(v, dict)}


def _gated(baseline: dict[str, Any]) -> dict[str, float]:
    """Classes the baseline can gate on (support > 0) and their baseline recall."""
    out: dict[str, float] = {}
    for name, row in _classes(baseline).items():
        support = _num(row.get("support"))
        if support is None or support <= 0:
            continue
        recall = _num(row.get("recall"))
        if recall is None:
            raise _Unusable(f"baseline class {name!r} has support {support:g} but no numeric recall")
        out[name] = recall
    return out


def _predicted_nothing(baseline: dict[str, Any]) -> bool:
    predictions = _num(baseline.get("predictions"))
    if predictions is not None:
        return predictions <= 0
    rows = _classes(baseline).values()
    counted = [(_num(r.get("tp")), _num(r.get("fp"))) for r in rows]
    if not counted or any(tp is None or fp is None for tp, fp in counted):
        return False  # cannot tell; the per-class rule still applies
    return sum(tp + fp for tp, fp in counted) <= 0  # type: ignore[operator]


def _dead(baseline: dict[str, Any], max_class_drop: float) -> tuple[list[str], list[str]]:
    """(dead class names, reasons in words)."""
    gated = _gated(baseline)
    if gated and _predicted_nothing(baseline):
        return list(gated), ["the baseline predicted nothing, so no class gate can fire"]
    dead = [c for c, recall in gated.items() if recall - max_class_drop <= _EPS]
    reasons = [
        f"recall.{c} gate is dead: baseline recall {gated[c]:.2f} is not above the drop limit "
        f"{max_class_drop:.2f}, so it can never fire"
        for c in dead
    ]
    return dead, reasons


def dead_gates(baseline: dict[str, Any], max_class_drop: float) -> list[str]:
    """Classes with truth whose recall gate can never fire against this baseline.

    A gate fires when ``recall < baseline_recall - max_class_drop``; recall is never below
    0, so a baseline recall at or below ``max_class_drop`` makes it dead. A baseline that
    predicted nothing makes every gate dead. A malformed baseline class counts as dead.
    """
    try:
        return _dead(baseline, max_class_drop)[0]
    except _Unusable:
        dead = []
        for name, row in _classes(baseline).items():
            support, recall = _num(row.get("support")), _num(row.get("recall"))
            if support and support > 0 and (recall is None or recall - max_class_drop <= _EPS):
                dead.append(name)
        return dead


def _scores(runs: list[dict[str, Any]], key: str, who: str) -> list[float]:
    out = []
    for i, run in enumerate(runs, start=1):
        value = _num(run.get(key)) if isinstance(run, dict) else None
        if value is None:
            raw = run.get(key, "missing") if isinstance(run, dict) else "not an object"
            raise _Unusable(f"{who} run {i} of {len(runs)} has no numeric {key!r} ({raw!r})")
        out.append(value)
    return out


def _mean_recall(runs: list[dict[str, Any]], name: str, who: str) -> float:
    values = []
    for i, run in enumerate(runs, start=1):
        row = _classes(run).get(name)
        recall = _num(row.get("recall")) if row is not None else None
        if recall is None:
            why = "lacks the class" if row is None else "has no numeric recall for it"
            raise _Unusable(f"{who} run {i} {why}: {name!r} (the test set or class list differs)")
        values.append(recall)
    return sum(values) / len(values)


def _fmt_over(value: float, limit: float) -> tuple[str, str]:
    """Format value and limit with as few decimals (>= 2) as show value > limit."""
    for digits in (2, 3, 4, 6):
        a, b = f"{value:.{digits}f}", f"{limit:.{digits}f}"
        if float(a) > float(b):
            return a, b
    return repr(value), repr(limit)  # shortest round-trip forms differ when the values do


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    return shown + (f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else "")


# -- the decision ----------------------------------------------------------------------------


def decide(inp: GateInput, cfg: GateConfig, reruns_left: int) -> GateDecision:
    """Keep, discard, inconclusive (with the reruns it needs) or error (see the module doc)."""
    facts: dict[str, Any] = {
        "baseline": inp.baseline_source,
        "score_key": cfg.score,
        "max_class_drop": cfg.max_class_drop,
        "dead_gates": [],
        "notes": [],
    }

    def error(reason: str) -> GateDecision:
        metrics = {**facts, "notes": list(facts["notes"]), "needs_reruns": 0}
        return GateDecision(Outcome.ERROR, Verdict.errored(reason, metrics=metrics), 0, None,
                            list(facts["notes"]))

    try:
        if not inp.candidate:
            raise _Unusable("no candidate run to gate")
        if not isinstance(inp.baseline, dict) or not _classes(inp.baseline):
            raise _Unusable(f"the baseline ({inp.baseline_source}) has no per-class scores")
        dead, dead_reasons = _dead(inp.baseline, cfg.max_class_drop)
        facts["dead_gates"] = dead
        facts["notes"].extend(dead_reasons)
        gated = _gated(inp.baseline)
        if not gated:
            return error(f"the baseline cannot gate: no class in it ({inp.baseline_source}) has truth")
        live = [c for c in gated if c not in dead]
        if not live:
            why = dead_reasons[0] if _predicted_nothing(inp.baseline) else (
                f"every class gate is dead (baseline recall not above {cfg.max_class_drop:.2f} "
                f"for {_listing(dead)})")
            return error(f"the baseline cannot gate: {why}")
        cand_scores = _scores(inp.candidate, cfg.score, "candidate")
        best_runs = inp.best or [inp.baseline]
        best_scores = _scores(best_runs, cfg.score, "current best" if inp.best else "baseline (as best)")
        cand_recall = {c: _mean_recall(inp.candidate, c, "candidate") for c in gated}
        best_recall: dict[str, float] = {}
        for name in _classes(best_runs[0]):
            recalls = [_num(_classes(r).get(name, {}).get("recall")) for r in best_runs]
            known = [r for r in recalls if r is not None]
            if known:
                best_recall[name] = sum(known) / len(known)
        for name, recall in best_recall.items():
            if recall > 0 and name not in cand_recall:
                cand_recall[name] = _mean_recall(inp.candidate, name, "candidate")
    except _Unusable as exc:
        return error(str(exc))

    n = len(cand_scores)
    score = sum(cand_scores) / n
    best = sum(best_scores) / len(best_scores)
    diff = score - best
    sigma = inp.noise_sigma
    measured = sigma is not None and math.isfinite(sigma) and sigma > 0
    if measured:
        band = cfg.noise_sigmas * float(sigma or 0.0) / math.sqrt(n)
        facts["notes"].append(
            f"noise band {band:.4f} = {cfg.noise_sigmas:g} x sigma {sigma:.4f} / sqrt({n} run(s))")
    else:
        band = cfg.unmeasured_band
        facts["notes"].append(
            f"noise unmeasured (noise_sigma={sigma!r}): using the minimum band {band:.4f}")
    facts.update({
        "score": score, "best_score": best, "diff": diff, "noise_band": band,
        "noise_sigma": sigma if measured else None, "noise_measured": measured,
        "runs": n, "candidate_scores": cand_scores, "best_scores": best_scores,
        "candidate_simpler": inp.candidate_simpler,
        "class_recall": {c: round(v, 6) for c, v in cand_recall.items()},
        "gated_classes": len(live),
    })

    blocking: list[str] = []
    for name in live:
        drop = gated[name] - cand_recall[name]
        if drop > cfg.max_class_drop + _EPS:
            shown, limit = _fmt_over(drop, cfg.max_class_drop)
            blocking.append(f"recall.{name} dropped {shown} vs baseline (limit {limit})")
    for name, recall in best_recall.items():
        if recall > 0 and cand_recall[name] <= 0:
            blocking.append(f"recall.{name} fell to 0 (was {recall:.2f} in the current best)")
    if dead:
        facts["notes"].append(f"{len(dead)} of {len(gated)} class gates are dead: {_listing(dead)}")

    key = cfg.score
    summary = f"{key} {score:.4f} vs best {best:.4f} ({diff:+.4f}, noise band {band:.4f})"
    facts["summary"] = summary

    def decision(outcome: Outcome, reasons: list[str], needs: int = 0) -> GateDecision:
        metrics = {**facts, "notes": list(facts["notes"]), "needs_reruns": needs}
        verdict = Verdict.passed(metrics=metrics) if outcome is Outcome.KEEP else Verdict.failed(
            *reasons, metrics=metrics)
        return GateDecision(outcome, verdict, needs, score, list(facts["notes"]))

    if blocking:
        return decision(Outcome.DISCARD, blocking)
    if diff > band:
        return decision(Outcome.KEEP, [])
    if diff < -band:
        return decision(Outcome.DISCARD, [
            f"{key} {score:.4f} is below the current best {best:.4f} by {-diff:.4f} "
            f"(more than the noise band {band:.4f})"])
    if inp.candidate_simpler and diff >= 0:
        facts["notes"].append("inside the noise band and simpler, not worse: simpler wins")
        return decision(Outcome.KEEP, [])
    reruns_left = max(0, reruns_left)
    if reruns_left > 0:
        seeds = "seed" if reruns_left == 1 else "seeds"
        return decision(Outcome.INCONCLUSIVE, [
            f"{key} {diff:+.4f} vs the current best is inside the noise band {band:.4f}: "
            f"needs {reruns_left} more {seeds}"], reruns_left)
    if inp.candidate_simpler:
        facts["notes"].append(f"still inside the noise band after {n} runs; simpler wins the tie")
        return decision(Outcome.KEEP, [])
    return decision(Outcome.INCONCLUSIVE, [
        f"{key} {diff:+.4f} vs the current best stayed inside the noise band {band:.4f} after "
        f"{n} run(s); the current best stays"])
