"""Measurements to a decision: a candidate's seeds side by side, the best gaining the seeds it lacks,
the gate's looks (the Race of :mod:`looper.core.keep.race`), and a decision that cannot be compared."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable

from looper.core.fault import failure as core_failure
from looper.core.fault import seeds as core_seeds
from looper.core.keep import gate as core_gate
from looper.core.keep import race as core_race
from looper.core.propose import scope as core_scope
from looper.core.run import phases as core_phases
from looper.core.verdicts.verdict import Outcome, Verdict
from looper.errors import HarnessError, UsageError
from looper.night.candidate import Candidate, Result
from looper.night.context import Context
from looper.night.measure import Measurement, mean_metrics, measure, weights_sha256
from looper.night.runs import best_checkout, record_best_run, record_run
from looper.night.slots import side_by_side
from looper.store import ExperimentRecord

GATE_ADVICE = ("The gate cannot judge candidates against this baseline. Change what the baseline depends on "
               "(more training: a larger loop.max_steps, or a longer loop.budget_seconds where max_steps is "
               "\"auto\" or 0; another data.scale or data.seed; another executor kind) and "
               "start `looper run` again: it measures a new baseline under the new settings. Starting again "
               "with the same settings halts the same way.")


# ====================================================================== measurements -> a decision
def measure_seeds(ctx: Context, cand: Candidate, roles: dict[int, str], ok: Callable[[Measurement], bool],
                  record_as: str | None = None) -> list[Measurement]:
    """The candidate on the seeds of ``roles`` (seed -> role, in order), side by side with ``[loop]
    seed_jobs`` > 1 and recorded in that order; up to and including the first run that is not ``ok``."""
    return side_by_side(
        ctx, [functools.partial(measure, ctx, cand.worker, cand.exp_id, r, s, checkout=cand.checkout)
              for s, r in roles.items()],
        ok=ok, keep=lambda m: account(ctx, cand, roles[m.seed], m, record_as))


def account(ctx: Context, cand: Candidate, role: str, m: Measurement, record_as: str | None = None) -> None:
    """Record a run of the candidate and add its seconds to the candidate's (one thread at a time: the
    caller's, in seed order)."""
    record_run(ctx, cand.exp_id, record_as or ("main" if role == "main" else "rerun"), m)
    cand.spent += m.train_seconds + m.eval_seconds
    t = cand.timing
    t.update(train_seconds=t.get("train_seconds", 0.0) + m.train_seconds,
             eval_seconds=t.get("eval_seconds", 0.0) + m.eval_seconds)
    if role == "main":  # train.json is stored once, with its run (record_run)
        t.update(exit_code=m.train.exit_code if m.train else None, gpu=(m.train.gpu if m.train else None) or None)


def ended(m: Measurement, role: str) -> Result:
    """The result of a measurement that produced no score (its outcome is already decided)."""
    prefix = "" if role == "main" else f"{role} seed {m.seed}: "
    reasons = [prefix + b for b in m.blocking]
    if m.outcome is Outcome.INTERRUPTED:  # the daemon, not the change, ended it
        return Result(m.outcome, Verdict.errored(*m.blocking))
    if m.outcome is Outcome.ERROR:
        return Result(m.outcome, Verdict.errored(*reasons), signature=m.signature, halt="; ".join(m.blocking))
    return Result(m.outcome, Verdict.failed(*reasons), signature=m.signature)


def seeded_runs(ctx: Context, exp: ExperimentRecord) -> list[tuple[int | None, dict]]:
    """(seed, METRICS.json) of every measured run of an experiment, in the order they ran."""
    return [(r.seed, r.metrics) for r in ctx.store.run_records(exp.id) if r.metrics]


def measure_and_gate(ctx: Context, cand: Candidate, against: ExperimentRecord, role: str) -> Result:
    """Measure and gate with intensification (looper.core.keep.race): 1, then 2, then 4 ... seeds
    (with ``[loop] seed_jobs`` slots: the first look fills them, each batch after it whole slots)
    of the best's own seeds, up to ``1 + noise_reruns``, stopping early when the gate keeps or
    discards; a seed the best never ran is run on the best first (it gains that seed)."""
    started = time.monotonic()
    race = core_race.Race(cap=1 + max(0, cand.reruns), first_seed=ctx.cfg.data.seed,
                          slots=ctx.cfg.loop.seed_jobs)  # every look's seeds fill the slots side by side
    cap, looks = race.cap, race.looks
    measured: list[Measurement] = []
    runs: list[dict] = []
    simpler = core_scope.code_lines(cand.source) < core_scope.code_lines(cand.parent_source)
    gained: list[int] = []
    best_seconds = 0.0
    best_phases: list[core_phases.Split] = []
    while True:
        batch = race.batch([s for s, _ in seeded_runs(ctx, against) if s is not None])
        got = gain_best_seeds(ctx, cand, against, batch.best)
        if isinstance(got, Result):
            return got
        best_seconds, gained = best_seconds + got[0], gained + got[1]
        best_phases += got[2]
        roles = {s: role if not runs and i == 0 else "rerun" for i, s in enumerate(batch.candidate)}
        for m in measure_seeds(ctx, cand, roles, ok=lambda m: m.measured):  # a look's seeds side by side
            if not m.measured:
                return ended(m, roles[m.seed])
            measured.append(m)
            runs.append(m.metrics)
            race.ran(m.seed)
        d = gate(ctx, runs, simpler, against, race.reruns_left, seeds=list(race.seeds), looks=looks,
                 share=race.share)
        st = race.look(d.outcome.value, d.needs_reruns > 0)
        why = st.why
        if st.stops:
            break
    if d.outcome is Outcome.ERROR:
        baseline_cannot_gate = any(b.startswith("the baseline cannot gate") for b in d.verdict.blocking)
        return Result(Outcome.ERROR, d.verdict, halt="gate: " + "; ".join(d.verdict.blocking),
                      advice=GATE_ADVICE if baseline_cannot_gate else None)
    cand_seconds = sum(x.train_seconds + x.eval_seconds for x in measured)
    cost = {"candidate_runs": len(runs), "best_runs": len(gained), "runs": len(runs) + len(gained),
            "best_seeds_gained": gained, "seeds": list(race.seeds), "cap": cap, "looks": looks, "stopped": why,
            "seconds": round(cand_seconds + best_seconds, 3),
            "minutes": round((cand_seconds + best_seconds) / 60.0, 3),
            "wall_minutes": round((time.monotonic() - started) / 60.0, 3),
            # where the runs' time went (the harness's clock; None: a run's phase not seen)
            "phases": core_phases.add([x.phases for x in measured] + best_phases).as_dict()}
    d = dataclasses.replace(d, verdict=d.verdict.model_copy(
        update={"metrics": {**d.verdict.metrics, "cost": cost,
                            "notes": [*(d.verdict.metrics.get("notes") or []), f"intensification: {why}"]}}))
    seed_check = core_seeds.check([(x.seed, weights_sha256(x)) for x in measured])
    if seed_check.ignores_seed:  # the same weights on two seeds: seed engineering cannot pass as a gain
        return Result(Outcome.CRASH, Verdict.failed(seed_check.reason, metrics={"seed_check": seed_check.as_metrics()}),
                      signature=core_failure.signature_of(core_seeds.SIGNATURE))
    outcome, verdict = d.outcome, d.verdict.with_metrics(seed_check=seed_check.as_metrics())
    cut = [f"seed {x.seed}: {x.cut_short}" for x in measured if x.cut_short]
    if cut:  # it did not train the tag's step budget: a keep stands (it won with fewer steps), a loss may be the clock's
        outcome, verdict = not_comparable(d, cut, ctx.tag.max_steps())
    return Result(outcome, verdict, score=d.score, metrics=mean_metrics(runs))


def gain_best_seeds(ctx: Context, cand: Candidate, best: ExperimentRecord,
                    wanted: list[int]) -> tuple[float, list[int], list[core_phases.Split]] | Result:
    """Run the current best's train.py on the ``wanted`` seeds it never ran (side by side with ``[loop]
    seed_jobs`` > 1) and record them as the best's own runs (role rerun, in seed order), before the
    candidate runs them. Returns (the seconds they took, the seeds gained: a seed another worker ran on
    the best meanwhile is not gained again, the runs' phases), or the Result that ends the candidate when the
    best could
    not be measured."""
    if not wanted:
        return 0.0, [], []
    with ctx.night.seed_lock:  # one worker at a time extends the best; the others then find the seeds there
        have = {s for s, _ in seeded_runs(ctx, best)}
        todo = [s for s in wanted if s not in have]
        if not todo:  # another worker ran the best on them meanwhile
            return 0.0, [], []
        for seed in todo:
            ctx.journal.event("note", f"#{cand.exp_id} needs seed {seed}, which the current best #{best.id} never ran: "
                              "running the best on it first", cand.exp_id, {"best": best.id, "seed": seed})
        with best_checkout(ctx, cand.checkout or cand.worker.wt.path, best.source, "looper-best-") as ck:
            ms = side_by_side(
                ctx, [functools.partial(measure, ctx, cand.worker, best.id, "rerun", s, checkout=ck) for s in todo],
                ok=lambda m: m.measured and not m.cut_short, keep=lambda m: record_best_run(ctx, best.id, m))
    seconds = 0.0
    for m in ms:
        seed = m.seed
        if m.measured and m.cut_short:
            return Result(Outcome.INCONCLUSIVE, Verdict.failed(
                f"the current best #{best.id} on seed {seed}: {m.cut_short}: not comparable with its other runs; "
                "the candidate is left undecided"))
        if not m.measured:
            r = ended(m, f"the current best #{best.id} on")
            if r.outcome in (Outcome.ERROR, Outcome.INTERRUPTED):
                return r
            return Result(Outcome.INCONCLUSIVE, Verdict.failed(
                f"the current best #{best.id} could not be measured on seed {seed} ({m.outcome.value}: "
                f"{'; '.join(m.blocking)[:200]}); the candidate is left undecided"))
        seconds += m.train_seconds + m.eval_seconds
    return seconds, todo, [m.phases for m in ms]


def not_comparable(d: core_gate.GateDecision, cut: list[str], max_steps: int) -> tuple[Outcome, Verdict]:
    """A candidate run the wall clock ended before the tag's step budget trained less than its rivals.
    A KEEP stands (it won with fewer steps); a DISCARD becomes INCONCLUSIVE (the loss may be the clock's,
    a busy machine, not the change's); the verdict says which runs and why."""
    note = (f"not comparable: {'; '.join(cut)} (the tag's runs train {max_steps} steps; the machine was slower "
            "than when that budget was measured, or the change makes a step slower)")
    metrics = {**d.verdict.metrics, "cut_short": cut,
               "notes": [*(d.verdict.metrics.get("notes") or []), note]}
    if d.outcome is not Outcome.DISCARD:
        return d.outcome, d.verdict.model_copy(update={"metrics": metrics})
    reasons = [note, *(f"would have discarded: {b}" for b in d.verdict.blocking)]
    return Outcome.INCONCLUSIVE, Verdict.failed(*reasons, metrics=metrics)


def gate(ctx: Context, runs: list[dict], simpler: bool, best: ExperimentRecord,
         reruns_left: int, seeds: list[int] | None = None, looks: int | None = None,
         share: float | None = None) -> core_gate.GateDecision:
    """The one place the gate's input is built and the gate is asked."""
    from looper.workspace.baselines import newest_baseline

    try:
        approved = newest_baseline(ctx.root / "baselines", store=ctx.store)
    except UsageError as exc:  # planted or edited since the preflight: the harness cannot trust its gate
        raise HarnessError(f"gate: {exc}") from exc

    def runs_of(exp: ExperimentRecord) -> list[dict]:
        return [m for _, m in seeded_runs(ctx, exp)]

    def seeds_of(exp: ExperimentRecord) -> list[int]:
        got = [s for s, _ in seeded_runs(ctx, exp)]
        return [s for s in got if s is not None] if None not in got else []

    if approved:  # an approved baseline is one METRICS.json: the class reference without seeds
        source, baseline, baseline_runs, baseline_seeds = f"approved:{approved[0]}", approved[1]["metrics"], [], []
    else:  # the tag's own baseline: every seed it ran (the class reference and the seed noise)
        base = ctx.tag.kept_baselines()[-1]
        source, baseline, baseline_runs, baseline_seeds = "tag-start", base.metrics, runs_of(base), seeds_of(base)
    inp = core_gate.GateInput(candidate=runs, best=runs_of(best) or [best.metrics], baseline=baseline,
                              baseline_source=source, candidate_simpler=simpler,
                              baseline_runs=baseline_runs, candidate_seeds=list(seeds or []),
                              best_seeds=seeds_of(best) if runs_of(best) else [], baseline_seeds=baseline_seeds)
    gcfg = core_gate.GateConfig(score=ctx.cfg.gate.score, max_class_drop=ctx.cfg.gate.max_class_drop,
                                alpha=ctx.cfg.gate.alpha,
                                score_test=ctx.cfg.gate.score_test)
    return core_gate.decide(inp, gcfg, reruns_left, looks=looks, share=share)
