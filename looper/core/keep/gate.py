"""The gate: candidate vs the current best vs the baseline, as statistics with stated error rates.

Inputs are METRICS.json objects (see docs/INTERFACES.md); the statistics are in
:mod:`looper.core.keep.stats`. The rules, in order:

1. Inputs: every candidate, current-best and baseline run must carry a finite number under
   ``cfg.score``; every class the baseline gates must have a recall in every candidate run;
   a class's ``found`` list (when present) must be 0/1 integers, one per instance of its
   support, the same instances on both sides. Otherwise -> ERROR.
2. Dead gates (:func:`dead_gates`): a class gate whose baseline recall is at or below
   ``max_class_drop`` can never fire (recall cannot go below 0, so the drop can never exceed
   the practical margin), and a baseline that predicted nothing gates nothing. Dead gates
   are listed in every verdict's metrics. When every class gate is dead -> ERROR.
3. Looks: the loop judges after each batch of seeds (intensification, looper.core.keep.race:
   1, 2, 4 ... seeds), so the error rate is split over the planned looks: every test of this
   look runs at ``alpha * share``, where ``share`` is this look's part of the decision's alpha
   (the loop passes :func:`looper.core.keep.race.alpha_share`, in proportion to the look's seeds;
   without it ``1 / looks``, and without ``looks`` one look per seed, ``runs so far +
   reruns_left``). The shares of all the looks sum to at most 1 (Bonferroni over looks), so a
   whole sequence of looks errs at most ``alpha``. A single judgement (one look) uses ``alpha``.
4. Class gates (one family, Holm at the look's alpha): every live class vs the baseline's
   runs, and, when the current best is not the baseline, every class whose current-best
   recall is above ``max_class_drop`` vs the best's runs. The test is the exact McNemar
   test on the seed-paired instances (``found`` lists; run j against run j), pooled over
   the paired seeds, one-sided for a loss; without ``found`` it is Fisher's exact test on
   the pooled found counts (unpaired; the notes say so). When replicate runs show that class
   recalls swing between seeds more than independent instances would (a run learns a class
   or misses it as a whole; in a fine-tune a class's hard instances come and go together), the
   counts are deflated by that measured dispersion (:func:`looper.core.keep.stats.dispersion`, pooled
   over classes and sides; measured against each instance's own variance over the runs where
   the runs list their instances, the variance the paired test itself assumes). A class fails when its test is
   rejected by Holm **and** its drop in recall is more than ``max_class_drop``; against the
   current best it fails only when, in addition, the candidate's recall fell to 0:
   "recall.exhaust_fan: 10 of 10 found -> 0 of 10 vs baseline, p = 0.00098 < 0.0019
   (exact McNemar, Holm over 26); drop 1.00 > 0.05". Any failure -> DISCARD.
5. The score: the seed noise is measured when the baseline or the current best has at
   least 2 runs; unmeasured -> INCONCLUSIVE (final; no keep or discard on the score alone).
   Measured: one-sided Student t-tests of mean(candidate) vs mean(best) with the seed
   variance pooled over the baseline's, the best's and the candidate's runs
   (:func:`looper.core.keep.stats.score_test`; why this test: see that module). Where the seeds
   of the runs are known and at least 2 were run by both the candidate and the best, the
   paired t-test on the per-seed differences (:func:`looper.core.keep.stats.paired_score_test`)
   decides instead when its band is narrower than the pooled one (:mod:`looper.core.keep.score`,
   :func:`~looper.core.keep.score.choose_test`, a
   pure rule; the verdict states the choice and why in ``score_test_choice``). The choice
   reads the same runs, so with two tests to choose from each is held to half the look's
   alpha (Bonferroni over the two; ``score_test_alpha``). ``GateConfig.score_test`` "pooled"
   or "paired" (``[gate] score_test``) fixes the test before any run instead, at the look's
   whole alpha (the other is reported, never deciding).
   - better at the look's alpha -> KEEP; worse at it -> DISCARD;
   - neither: a simpler candidate that is not worse (``diff >= 0``) -> KEEP (simpler wins);
     otherwise, while reruns are left -> INCONCLUSIVE asking for one more seed
     (``needs_reruns = 1``; seeds are added one at a time); once reruns are spent:
     simpler -> KEEP (simpler wins the tie), else INCONCLUSIVE (final; the best stays).

Every verdict's metrics carry ``baseline`` (``"approved:<file>"`` or ``"tag-start"``),
``dead_gates`` and ``notes``; judged ones also the noise band (the smallest difference the
score test calls significant at this look), the score test and each class test.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from looper.core.keep import classgate, stats
from looper.core.keep import score as core_score
from looper.core.verdicts.verdict import Outcome, Verdict


@dataclass(frozen=True)
class GateConfig:
    score: str = "weighted_f1"
    max_class_drop: float = 0.05
    alpha: float = 0.05
    score_test: str = "auto"  # auto | pooled | paired (looper.core.keep.score.SCORE_TEST_MODES)

    def __post_init__(self) -> None:
        if not self.score:
            raise ValueError("gate.score must name a metric, e.g. 'weighted_f1'")
        if not (math.isfinite(self.max_class_drop) and 0.0 <= self.max_class_drop <= 1.0):
            raise ValueError(f"gate.max_class_drop must be within [0, 1], got {self.max_class_drop!r}")
        if not (isinstance(self.alpha, (int, float)) and 0.0 < self.alpha < 1.0):
            raise ValueError(f"gate.alpha must be between 0 and 1 (exclusive), got {self.alpha!r}")
        if self.score_test not in core_score.SCORE_TEST_MODES:
            raise ValueError(f"gate.score_test must be one of {', '.join(core_score.SCORE_TEST_MODES)}, "
                             f"got {self.score_test!r}")


@dataclass(frozen=True)
class GateInput:
    """``candidate``: one METRICS.json per seed of the candidate (at least one), in seed order.
    ``best``: the current best's runs, in seed order (empty: the baseline is the current best).
    ``baseline``: the baseline's metrics (dead gates; the class reference when
    ``baseline_runs`` is empty). ``baseline_runs``: every seed of the baseline, in seed order
    (the class reference, and the seed noise)."""

    candidate: list[dict[str, Any]]
    best: list[dict[str, Any]]
    baseline: dict[str, Any]
    baseline_source: str
    candidate_simpler: bool = False
    baseline_runs: list[dict[str, Any]] = field(default_factory=list)
    # the seed of every run, in the same order as the runs ([]: unknown; then nothing is paired
    # by seed for the score, and class tests pair run j with run j as before)
    candidate_seeds: list[int] = field(default_factory=list)
    best_seeds: list[int] = field(default_factory=list)
    baseline_seeds: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class GateDecision:
    outcome: Outcome  # KEEP | DISCARD | INCONCLUSIVE | ERROR
    verdict: Verdict
    needs_reruns: int = 0
    score: float | None = None  # mean candidate score; None when nothing usable was measured
    notes: list[str] = field(default_factory=list)


# -- reading METRICS.json objects --------------------------------------------------------


def _gated(baseline: dict[str, Any]) -> dict[str, float]:
    """Classes the baseline can gate on (support > 0) and their baseline recall."""
    out: dict[str, float] = {}
    for name, row in classgate.classes(baseline).items():
        support = classgate.num(row.get("support"))
        if support is None or support <= 0:
            continue
        recall = classgate.num(row.get("recall"))
        if recall is None:
            raise classgate.Unusable(f"baseline class {name!r} has support {support:g} but no numeric recall")
        out[name] = recall
    return out


def _predicted_nothing(baseline: dict[str, Any]) -> bool:
    predictions = classgate.num(baseline.get("predictions"))
    if predictions is not None:
        return predictions <= 0
    rows = classgate.classes(baseline).values()
    counted = [(classgate.num(r.get("tp")), classgate.num(r.get("fp"))) for r in rows]
    if not counted or any(tp is None or fp is None for tp, fp in counted):
        return False  # cannot tell; the per-class rule still applies
    return sum(tp + fp for tp, fp in counted) <= 0  # type: ignore[operator]


def _dead(baseline: dict[str, Any], max_class_drop: float) -> tuple[list[str], list[str]]:
    """(dead class names, reasons in words)."""
    gated = _gated(baseline)
    if gated and _predicted_nothing(baseline):
        return list(gated), ["the baseline predicted nothing, so no class gate can fire"]
    dead = [c for c, recall in gated.items() if recall - max_class_drop <= classgate.EPS]
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
    except classgate.Unusable:
        dead = []
        for name, row in classgate.classes(baseline).items():
            support, recall = classgate.num(row.get("support")), classgate.num(row.get("recall"))
            if support and support > 0 and (recall is None or recall - max_class_drop <= classgate.EPS):
                dead.append(name)
        return dead


def class_recall_spread(runs: list[dict[str, Any]]) -> dict[str, float]:
    """The seed-to-seed standard deviation of every class's recall over a baseline's runs (METRICS.json
    objects; the per-class noise stored with the tag). Needs 2 runs; a class without a numeric recall
    in every run is left out."""
    out: dict[str, float] = {}
    for name in classgate.classes(runs[0]) if len(runs) > 1 else ():
        vals = [classgate.num(classgate.classes(r).get(name, {}).get("recall")) for r in runs]
        if all(v is not None for v in vals):
            out[name] = round(statistics.stdev(v for v in vals if v is not None), 6)
    return out


def _scores(runs: list[dict[str, Any]], key: str, who: str) -> list[float]:
    out = []
    for i, run in enumerate(runs, start=1):
        value = classgate.num(run.get(key)) if isinstance(run, dict) else None
        if value is None:
            raw = run.get(key, "missing") if isinstance(run, dict) else "not an object"
            raise classgate.Unusable(f"{who} run {i} of {len(runs)} has no numeric {key!r} ({raw!r})")
        out.append(value)
    return out


def _mean_recall(runs: list[dict[str, Any]], name: str, who: str) -> float:
    values = []
    for i, run in enumerate(runs, start=1):
        row = classgate.classes(run).get(name)
        recall = classgate.num(row.get("recall")) if row is not None else None
        if recall is None:
            why = "lacks the class" if row is None else "has no numeric recall for it"
            raise classgate.Unusable(f"{who} run {i} {why}: {name!r} (the test set or class list differs)")
        values.append(recall)
    return sum(values) / len(values)


# -- the decision ----------------------------------------------------------------------------


@dataclass
class _Read:
    """What the gate read from its input, before any test."""

    gated: dict[str, float]
    live: list[str]
    dead: list[str]
    cand_scores: list[float]
    best_scores: list[float]
    base_scores: list[float]
    cand_recall: dict[str, float]
    tests: list[classgate.ClassTest]
    replicates: dict[tuple[str, str], list[stats.Run]]  # (source, class) -> runs
    best_is_ref: bool
    pairs: list[tuple[int, float, float]] = field(default_factory=list)  # (seed, candidate, best) both ran


def _error(facts: dict[str, Any], reason: str) -> GateDecision:
    metrics = {**facts, "notes": list(facts["notes"]), "needs_reruns": 0}
    return GateDecision(Outcome.ERROR, Verdict.errored(reason, metrics=metrics), 0, None, list(facts["notes"]))


def _read(inp: GateInput, cfg: GateConfig, facts: dict[str, Any]) -> _Read | str:
    """The inputs, checked (:class:`classgate.Unusable` when they cannot be judged), or why the baseline
    cannot gate at all."""
    ref_runs = list(inp.baseline_runs) or [inp.baseline]
    best_is_ref = not inp.best or list(inp.best) == ref_runs
    if not inp.candidate:
        raise classgate.Unusable("no candidate run to gate")
    if not isinstance(inp.baseline, dict) or not classgate.classes(inp.baseline):
        raise classgate.Unusable(f"the baseline ({inp.baseline_source}) has no per-class scores")
    dead, dead_reasons = _dead(inp.baseline, cfg.max_class_drop)
    facts["dead_gates"] = dead
    facts["notes"].extend(dead_reasons)
    gated = _gated(inp.baseline)
    if not gated:
        return f"the baseline cannot gate: no class in it ({inp.baseline_source}) has truth"
    live = [c for c in gated if c not in dead]
    if not live:
        why = dead_reasons[0] if _predicted_nothing(inp.baseline) else (
            f"every class gate is dead (baseline recall not above {cfg.max_class_drop:.2f} "
            f"for {classgate.listing(dead)})")
        return f"the baseline cannot gate: {why}"
    cand_scores = _scores(inp.candidate, cfg.score, "candidate")
    best_runs = inp.best or ref_runs
    best_scores = _scores(best_runs, cfg.score, "current best" if inp.best else "baseline (as best)")
    base_scores = _scores(inp.baseline_runs, cfg.score, "baseline") if inp.baseline_runs else []
    cand_recall = {c: _mean_recall(inp.candidate, c, "candidate") for c in gated}
    best_recall: dict[str, float] = {}
    for name in classgate.classes(best_runs[0]):
        recalls = [classgate.num(classgate.classes(r).get(name, {}).get("recall")) for r in best_runs]
        known = [r for r in recalls if r is not None]
        if known:
            best_recall[name] = sum(known) / len(known)
    for name, recall in best_recall.items():
        if recall > 0 and name not in cand_recall:
            cand_recall[name] = _mean_recall(inp.candidate, name, "candidate")
    tests: list[classgate.ClassTest] = []
    replicates: dict[tuple[str, str], list[stats.Run]] = {}
    base_seeds = list(inp.baseline_seeds) if inp.baseline_runs else []
    base_side, cand_side = core_score.align(ref_runs, base_seeds, list(inp.candidate), list(inp.candidate_seeds))
    for c in live:
        counts, ref_rows, cand_rows = classgate.compare(c, base_side, cand_side, "baseline")
        tests.append(classgate.ClassTest(c, "baseline", counts))
        replicates.update({("baseline", c): ref_rows, ("candidate", c): cand_rows})
    if not best_is_ref:
        best_side, cand_side = core_score.align(list(inp.best), list(inp.best_seeds), list(inp.candidate),
                                      list(inp.candidate_seeds))
        for c, r in best_recall.items():
            if r > cfg.max_class_drop + classgate.EPS:
                counts, best_rows, cand_rows = classgate.compare(c, best_side, cand_side, "current best")
                tests.append(classgate.ClassTest(c, "best", counts))
                replicates.update({("best", c): best_rows, ("candidate", c): cand_rows})
    pairs: list[tuple[int, float, float]] = []
    cand_by, best_by = core_score.seeded(cand_scores, list(inp.candidate_seeds)), core_score.seeded(
        best_scores, list(inp.best_seeds) if inp.best else base_seeds)
    if cand_by is not None and best_by is not None:
        pairs = [(s, float(v), float(best_by[s])) for s, v in cand_by.items() if s in best_by]
    return _Read(gated, live, dead, cand_scores, best_scores, base_scores, cand_recall, tests, replicates,
                 best_is_ref, pairs)


def decide(inp: GateInput, cfg: GateConfig, reruns_left: int, looks: int | None = None,
           share: float | None = None) -> GateDecision:
    """Keep, discard, inconclusive (with the reruns it needs) or error (see the module doc).

    ``looks``: the planned looks of this whole decision (intensification looks once per batch of
    seeds: :func:`looper.core.keep.race.looks`); None: one look per seed, ``runs + reruns_left``.
    ``share``: this look's part of alpha (:func:`looper.core.keep.race.alpha_share`, in (0, 1]);
    None: an equal part, ``1 / looks``."""
    if share is not None and not 0.0 < share <= 1.0:
        raise ValueError(f"a look's share of alpha must be in (0, 1], got {share!r}")
    facts: dict[str, Any] = {"baseline": inp.baseline_source, "score_key": cfg.score,
                             "max_class_drop": cfg.max_class_drop, "alpha": cfg.alpha, "dead_gates": [], "notes": []}
    try:
        r = _read(inp, cfg, facts)
    except classgate.Unusable as exc:
        return _error(facts, str(exc))
    if isinstance(r, str):
        return _error(facts, r)
    n = len(r.cand_scores)
    reruns_left = max(0, reruns_left)
    looks = max(1, looks) if looks is not None else n + reruns_left
    alpha = cfg.alpha * share if share is not None else cfg.alpha / looks
    score = float(statistics.mean(r.cand_scores))  # exact: equal scores give a diff of exactly 0
    best = float(statistics.mean(r.best_scores))
    facts.update({
        "score": score, "best_score": best, "diff": score - best,
        "runs": n, "candidate_scores": r.cand_scores, "best_scores": r.best_scores,
        "baseline_scores": r.base_scores, "candidate_simpler": inp.candidate_simpler,
        "looks": looks, "alpha_per_look": alpha,
        "class_recall": {c: round(v, 6) for c, v in r.cand_recall.items()},
        "gated_classes": len(r.live),
    })
    _note_alpha(facts, cfg.alpha, alpha, looks, share)
    blocking = classgate.failures(r.tests, r.replicates, r.cand_recall, r.dead, len(r.gated), cfg.max_class_drop,
                                  alpha, facts)
    test = core_score.score_test(r.cand_scores, r.best_scores, r.base_scores, r.best_is_ref, r.pairs, cfg.score,
                                 alpha, facts, cfg.score_test)
    return _judge(facts, blocking, test, inp.candidate_simpler, reruns_left)


def _note_alpha(facts: dict[str, Any], total: float, alpha: float, looks: int, share: float | None) -> None:
    """Say in the verdict's notes how this look's alpha came from the decision's whole alpha."""
    if share is not None and share < 1.0:
        facts["alpha_share"] = share
        facts["notes"].append(f"alpha {total:g} split over {looks} looks in proportion to their seeds: "
                              f"{alpha:.4g} at this look ({share:.3g} of it)")
    elif share is None and looks > 1:
        facts["notes"].append(f"alpha {total:g} split over {looks} looks: "
                              f"{alpha:.4g} per look")


def _judge(facts: dict[str, Any], blocking: list[str], test: Any, simpler: bool, reruns_left: int) -> GateDecision:
    """The decision from the class gates' failures and the score test at this look (``facts`` holds the
    scores and is the verdict's metrics)."""
    key, score, best, diff, n = facts["score_key"], facts["score"], facts["best_score"], facts["diff"], facts["runs"]

    def decision(outcome: Outcome, reasons: list[str], needs: int = 0) -> GateDecision:
        metrics = {**facts, "notes": list(facts["notes"]), "needs_reruns": needs}
        verdict = Verdict.passed(metrics=metrics) if outcome is Outcome.KEEP else Verdict.failed(
            *reasons, metrics=metrics)
        return GateDecision(outcome, verdict, needs, score, list(facts["notes"]))

    if blocking:
        return decision(Outcome.DISCARD, blocking)
    if test is None:
        return decision(Outcome.INCONCLUSIVE, [
            f"{key} {diff:+.4f} vs the current best cannot be judged: the seed noise is unmeasured "
            f"(fewer than 2 seeds of the baseline and of the current best)"])
    if test.p_better <= test.alpha:
        return decision(Outcome.KEEP, [])
    if test.p_worse <= test.alpha:
        return decision(Outcome.DISCARD, [
            f"{key} {score:.4f} is below the current best {best:.4f} by {-diff:.4f}: "
            f"p = {classgate.fmt_below(test.p_worse, test.alpha)} ({test.name}; noise band {test.band:.4f})"])
    if simpler and diff >= -classgate.EPS:
        facts["notes"].append("inside the noise band and simpler, not worse: simpler wins")
        return decision(Outcome.KEEP, [])
    inside = (f"{key} {diff:+.4f} vs the current best is inside the noise band {test.band:.4f} "
              f"(p = {test.p_better:.2g} better, {test.p_worse:.2g} worse; alpha {test.alpha:.4g})")
    if reruns_left > 0:
        return decision(Outcome.INCONCLUSIVE, [f"{inside}: needs 1 more seed ({reruns_left} left)"], 1)
    if simpler:
        facts["notes"].append(f"still inside the noise band after {n} runs; simpler wins the tie")
        return decision(Outcome.KEEP, [])
    return decision(Outcome.INCONCLUSIVE, [
        f"{key} {diff:+.4f} vs the current best stayed inside the noise band {test.band:.4f} after "
        f"{n} run(s); the current best stays"])
