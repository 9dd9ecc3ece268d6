"""The loop's two ways of reaching a verdict, replayed on a pool of real runs (issues 24 and 25).

Used by bench/calibration_resample.py ``--procedures pooled,paired``. No training here: every
function takes runs (``{"seed", "metrics", "score"}``) that bench/calibration_pool.py made, and asks
the real ``looper.core.keep.gate.decide`` and ``looper.core.keep.race`` for the verdict.

- **pooled** (the last wave's loop, :func:`judge_pooled`): a baseline of ``n_base`` seeds, the candidate
  one fresh seed at a time up to ``cap`` (``1 + noise_reruns``), the gate told no seeds (so nothing
  is paired, the pooled Student t decides) and looking once per seed (``looks=None``).
- **paired** (this wave's intensification, :func:`judge_paired`): exactly
  ``looper.night.race.measure_and_gate`` at the start of a night (the current best is the tag's
  baseline): the candidate runs 1, 2, 4 ... of the best's own seeds up to ``cap``
  (``core_race.candidate_seeds``), a seed the best never ran is run on the best first and joins the
  best's (and baseline's) runs, the gate is told every seed and the planned looks
  (``core_race.looks(cap)``), ``core_race.step`` stops it early or asks for the next batch.

Which real runs play which part (the draws, :func:`draw_aa_pooled` ... :func:`draw_planted_paired`):

- A/A, pooled: baseline and candidate are distinct runs of the unchanged train.py.
- A/A, paired: the best's seed at position k is an unchanged run, the candidate's seed at position k
  is ANOTHER unchanged run (a seed disjoint from every seed of the best draw), handed to the gate under
  the best's seed number. The same code on the same seed reproduces the run bit for bit (step budget,
  deterministic train.py), which would prove nothing: A/A means the same code on other seeds. These
  pairs have no seed in common, so their correlation is 0 (a real change's pairs are correlated).
- planted, pooled: candidate runs of the changed train.py on seeds the drawn baseline did not run.
- planted, paired: the changed train.py on the best's own seeds (true pairs, the loop's pairing).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from looper.core.keep import gate as core_gate
from looper.core.keep import race as core_race
from looper.core.verdicts.verdict import Outcome
from looper.night.measure import mean_metrics

Run = dict[str, Any]


def judge_pooled(cfg: core_gate.GateConfig, baseline: Sequence[Run], candidates: Sequence[Run]) -> tuple[str, int, int]:
    """The last wave's loop: (outcome, candidate runs, best runs gained = 0). The baseline is the
    current best; the candidate adds one seed per inconclusive look that asks for one, up to
    ``len(candidates)``; the gate sees no seed numbers."""
    base_metrics = [r["metrics"] for r in baseline]
    reference = mean_metrics(base_metrics)
    cap = len(candidates)
    for i in range(cap):
        inp = core_gate.GateInput(candidate=[r["metrics"] for r in candidates[:i + 1]], best=base_metrics,
                                  baseline=reference, baseline_source="tag-start", baseline_runs=base_metrics)
        d = core_gate.decide(inp, cfg, cap - 1 - i)
        if d.outcome is not Outcome.INCONCLUSIVE or d.needs_reruns <= 0:
            return d.outcome.value, i + 1, 0
    return d.outcome.value, cap, 0


def judge_paired(cfg: core_gate.GateConfig, n_base: int, cap: int, best_at: Callable[[int], Run],
                 cand_at: Callable[[int], Run], first_seed: int = 0,
                 decided: Callable[[core_gate.GateDecision], None] | None = None,
                 slots: int = 1) -> tuple[str, int, int]:
    """This wave's loop (looper.night.race.measure_and_gate), the best being the tag's baseline of
    seeds ``first_seed .. first_seed + n_base - 1``. ``best_at(seed)`` / ``cand_at(seed)``: the run
    of the best / of the candidate on that seed; ``decided``, if given, sees the decision that ended
    it (bench/calibration_why.py reads why); ``slots``: runs side by side (``[loop] seed_jobs``), the
    schedule's first look fills them (``core_race.schedule``). Returns (outcome, candidate runs, best runs gained)."""
    best_seeds = list(range(first_seed, first_seed + n_base))
    best = [best_at(s)["metrics"] for s in best_seeds]
    reference = mean_metrics(best)  # the baseline experiment's metrics: its own seeds, as measured at the start
    race = core_race.Race(cap, first_seed, slots=slots)
    runs: list[dict[str, Any]] = []
    gained = 0
    while True:
        batch = race.batch(best_seeds)
        for seed in batch.best:  # the best gains the seed first (recorded as the best's own run)
            best_seeds.append(seed)
            best.append(best_at(seed)["metrics"])
            gained += 1
        for seed in batch.candidate:
            runs.append(cand_at(seed)["metrics"])
            race.ran(seed)
        inp = core_gate.GateInput(candidate=list(runs), best=list(best), baseline=reference,
                                  baseline_source="tag-start", baseline_runs=list(best),
                                  candidate_seeds=list(race.seeds), best_seeds=list(best_seeds),
                                  baseline_seeds=list(best_seeds))
        d = core_gate.decide(inp, cfg, race.reruns_left, looks=race.looks, share=race.share)
        if race.look(d.outcome.value, d.needs_reruns > 0).stops:
            if decided is not None:
                decided(d)
            return d.outcome.value, len(runs), gained


def positions(n_base: int, cap: int) -> int:
    """Seeds a paired decision can touch: the best's n_base, and new ones up to the cap."""
    return max(n_base, cap)


# -- the draws: which real runs play the best and the candidate in one judgement ----------------------
def draw_aa_pooled(unchanged: Sequence[Run], n_base: int, cap: int, rng: random.Random) -> tuple[list[Run], list[Run]]:
    picked = rng.sample(list(unchanged), n_base + cap)
    return picked[:n_base], picked[n_base:]


def draw_aa_paired(unchanged: Sequence[Run], n_base: int, cap: int,
                   rng: random.Random) -> tuple[Callable[[int], Run], Callable[[int], Run]]:
    """The best's position k and the candidate's position k: two distinct unchanged runs (disjoint seeds)."""
    p = positions(n_base, cap)
    picked = rng.sample(list(unchanged), 2 * p)
    if len({r["seed"] for r in picked}) != 2 * p:
        raise ValueError("A/A paired: the unchanged runs repeat a seed (a run would meet itself)")
    return (lambda k: picked[k]), (lambda k: picked[p + k])


def draw_planted_pooled(unchanged: Sequence[Run], changed: Sequence[Run], n_base: int, cap: int,
                        rng: random.Random) -> tuple[list[Run], list[Run]]:
    cand = rng.sample(list(changed), cap)
    taken = {r["seed"] for r in cand}
    base = rng.sample([r for r in unchanged if r["seed"] not in taken], n_base)
    return base, cand


def draw_planted_paired(unchanged: Sequence[Run], changed: Sequence[Run], n_base: int, cap: int,
                        rng: random.Random) -> tuple[Callable[[int], Run], Callable[[int], Run]]:
    """Position k: the unchanged and the changed train.py on the SAME pool seed (true pairs)."""
    u = {r["seed"]: r for r in unchanged}
    c = {r["seed"]: r for r in changed}
    common = sorted(set(u) & set(c))
    seeds = rng.sample(common, positions(n_base, cap))
    return (lambda k: u[seeds[k]]), (lambda k: c[seeds[k]])


def can_draw(kind: str, procedure: str, unchanged: Sequence[Run], changed: Sequence[Run], n_base: int,
             cap: int) -> str | None:
    """None when the pool holds enough runs for this draw, else why not."""
    p = positions(n_base, cap)
    if kind == "aa":
        need = n_base + cap if procedure == "pooled" else 2 * p
        return None if len(unchanged) >= need else f"{len(unchanged)} unchanged runs, {need} needed"
    if procedure == "pooled":
        ok = len(changed) >= cap and len(unchanged) - cap >= n_base
        return None if ok else f"{len(changed)} changed and {len(unchanged)} unchanged runs, {cap} + {n_base} needed"
    common = {r["seed"] for r in unchanged} & {r["seed"] for r in changed}
    return None if len(common) >= p else f"{len(common)} seeds with both codes, {p} needed"


def scaled(unchanged: Sequence[Run], changed: Sequence[Run], factor: float, score: str) -> list[Run]:
    """The changed runs with their score moved to ``unchanged(seed) + factor * (changed - unchanged)``
    on the same seed: a planted effect of a chosen size on the score alone, which keeps the seed's own
    component (a small change's run stays close to the unchanged run on its seed). Everything else in
    METRICS.json is the unchanged run's on that seed (no class moves: the score test alone decides).
    Only seeds both ran."""
    u = {r["seed"]: r for r in unchanged}
    out = []
    for r in changed:
        if r["seed"] not in u:
            continue
        s = u[r["seed"]]["score"] + factor * (r["score"] - u[r["seed"]]["score"])
        out.append({**r, "score": s, "metrics": {**u[r["seed"]]["metrics"], score: s}})
    return out


def shift(run: Run, delta: float, score: str) -> Run:
    """The run with ``delta`` added to its score (everything else as measured)."""
    return {**run, "score": run["score"] + delta, "metrics": {**run["metrics"], score: run["score"] + delta}}


def judge_row(cfg: core_gate.GateConfig, procedure: str, kind: str, unchanged: Sequence[Run], changed: Sequence[Run],
              n_base: int, cap: int, draws: int, seed: int, delta: float = 0.0, slots: int = 1) -> dict[str, Any]:
    """``draws`` judgements of one kind (``aa`` | ``planted``) by one procedure (``pooled`` | ``paired``):
    outcome counts, mean candidate runs and best runs gained, and the disjoint judgements the pool holds
    (every run used once: the count an honest interval rests on). ``{"draws": 0, "skipped": why}`` when
    the pool is too small. ``delta`` (kind ``aa`` only): the A/A draw with ``delta`` added to every
    candidate score, a planted effect of exactly that size on the unchanged code's real seed noise
    (its pairs uncorrelated, as in the A/A draw)."""
    why = can_draw(kind, procedure, unchanged, changed, n_base, cap)
    if why:
        return {"draws": 0, "skipped": why}
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    cand_runs, gained = 0, 0
    for _ in range(draws):
        if procedure == "pooled":
            base, cand = (draw_aa_pooled(unchanged, n_base, cap, rng) if kind == "aa" else
                          draw_planted_pooled(unchanged, changed, n_base, cap, rng))
            if delta:
                cand = [shift(r, delta, cfg.score) for r in cand]
            outcome, n, g = judge_pooled(cfg, base, cand)
        else:
            best_at, cand_at = (draw_aa_paired(unchanged, n_base, cap, rng) if kind == "aa" else
                                draw_planted_paired(unchanged, changed, n_base, cap, rng))
            if delta:
                cand_at = (lambda f: (lambda k: shift(f(k), delta, cfg.score)))(cand_at)
            outcome, n, g = judge_paired(cfg, n_base, cap, best_at, cand_at, slots=slots)
        counts[outcome] = counts.get(outcome, 0) + 1
        cand_runs += n
        gained += g
    p = positions(n_base, cap)
    if kind == "aa":
        disjoint = len(unchanged) // ((n_base + cap) if procedure == "pooled" else 2 * p)
    elif procedure == "pooled":
        disjoint = min(len(changed) // cap, len(unchanged) // (n_base + cap))
    else:
        disjoint = len({r["seed"] for r in changed} & {r["seed"] for r in unchanged}) // p
    return {"draws": draws, "counts": counts, "disjoint_judgements": disjoint, "candidate_runs": cand_runs / draws,
            "best_gained": gained / draws, "runs_per_decision": (cand_runs + gained) / draws}
