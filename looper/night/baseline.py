"""The train.py a tag starts from, measured: the warm-up that fits the step budget, the baseline's seeds
that measure the noise; and :func:`verify`, the pipeline on the workspace's train.py, committing nothing."""

from __future__ import annotations

import dataclasses
import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from looper.core.fault import seeds as core_seeds
from looper.core.keep import gate as core_gate
from looper.core.propose import scope as core_scope
from looper.core.run import budget as core_budget
from looper.core.run.slots import WARMUP_ROLE, copy_worker
from looper.core.verdicts.verdict import Outcome, Verdict
from looper.executors.base import FIXED_FILES
from looper.night import cores as night_cores
from looper.night.candidate import Candidate, Result
from looper.night.clock import now_iso
from looper.night.context import Context, Worker
from looper.night.cores import runs_at_once
from looper.night.measure import Measurement, mean_metrics, weights_sha256
from looper.night.race import measure_and_gate, measure_seeds
from looper.night.settle import settle
from looper.night.tag import TagBudget, TagNoise
from looper.report.fmt import shown

CUT_SHORT_ADVICE = ("The wall clock ended a baseline run before the tag's step budget: the budget does not fit this "
                    "machine and data (another job on it? a large data set?); with max_steps = \"auto\", starting "
                    "again measures a new warm-up.")
SEED_ADVICE = ("The workspace's train.py trains the same weights whatever LOOPER_SEED says, so the baseline's "
               "seeds measure no noise and the gate would judge every difference as certain. Seed every random "
               "source in train.py from LOOPER_SEED, commit it, and start `looper run` again.")


# ====================================================================== the baseline and verify
def measure_baseline(ctx: Context, w: Worker) -> Result:
    """Measure the train.py the tag starts from with ``baseline_seeds`` seeds: the noise the gate uses."""
    assert ctx.tag.wt is not None
    seeds = [ctx.cfg.data.seed + i for i in range(ctx.cfg.loop.baseline_seeds)]
    source = (ctx.tag.wt.path / "train.py").read_text()
    description = "baseline: the train.py the tag started from"
    exp_id = ctx.store.start_experiment(tag=ctx.tag.name, kind="baseline", parent=None, seed=seeds[0],
                                        config=ctx.cfg.redacted_dict(), description=description, source=source)
    ctx.store.update_experiment(exp_id, commit=ctx.tag.wt.head(), started_at=now_iso())
    cand = Candidate("baseline", exp_id, w, None, source, source, description)
    budget: dict[str, Any] = {}
    if ctx.cfg.loop.max_steps == "auto" or ctx.cfg.loop.max_steps > 0:
        warm = warm_up(ctx, cand) if ctx.cfg.loop.max_steps == "auto" else fit_run(ctx, cand)
        if isinstance(warm, Result):
            return settle(ctx, cand, warm)
        budget = warm
    ctx.display.note(f"measuring the baseline with {len(seeds)} seed(s) to learn the noise")
    results = []
    for m in measure_seeds(ctx, cand, dict.fromkeys(seeds, "baseline"),  # side by side with seed_jobs > 1
                           ok=lambda m: m.measured and not m.cut_short, record_as="main"):
        seed = m.seed
        if not m.measured:
            return settle(ctx, cand, baseline_failed(m, "while measuring the baseline", f"baseline seed {seed}",
                                                     f"could not produce a result (seed {seed}, {m.outcome.value})"))
        if m.cut_short:  # the tag's reference did not train the tag's budget: nothing may be judged against it
            why = f"baseline seed {seed}: {m.cut_short}"
            advice = CUT_SHORT_ADVICE + " " + core_budget.budget_advice(
                m.train_json, ctx.tag.max_steps(), ctx.tag.wall_seconds(ctx.cfg.loop.budget_seconds))
            return settle(ctx, cand, Result(Outcome.ERROR, Verdict.errored(why), halt=why, advice=advice))
        results.append(m)
    seeded = core_seeds.check([(r.seed, weights_sha256(r)) for r in results])
    if seeded.ignores_seed:  # its noise would read as zero: nothing may be judged against it
        why = f"baseline train.py {seeded.reason}"
        return settle(ctx, cand, Result(Outcome.ERROR, Verdict.errored(why), halt=why, advice=SEED_ADVICE))
    scores = [float(r.metrics[ctx.cfg.gate.score]) for r in results]
    mean, sigma = statistics.fmean(scores), (statistics.stdev(scores) if len(scores) > 1 else None)
    metrics = {**mean_metrics([r.metrics for r in results]), "seed_scores": scores}
    ctx.tag.set_noise(TagNoise(sigma=sigma, scores=tuple(scores), seeds=tuple(seeds),
                               class_recall_sd=core_gate.class_recall_spread([r.metrics for r in results])))
    result = settle(ctx, cand, Result(Outcome.KEEP, Verdict.passed({"score": mean, "noise_sigma": sigma,
                                                                     "seeds": seeds, **budget}),
                                      score=mean, metrics=metrics))
    dead = core_gate.dead_gates(metrics, ctx.cfg.gate.max_class_drop)
    ctx.journal.event("baseline", f"baseline #{exp_id}: {ctx.cfg.gate.score} mean {mean:.4f} over seeds {seeds}, "
                          f"sigma {sigma if sigma is None else round(sigma, 4)}; {len(dead)} dead gate(s)",
              exp_id, {"dead_gates": dead})
    ctx.display.outcome(exp_id, "baseline", mean, f"sigma={shown(sigma, sigma)}", mean)  # rounded to itself
    return result


def baseline_failed(m: Measurement, when: str, prefix: str, what: str) -> Result:
    """The Result that ends a baseline whose run gave no result: interrupted, or an error that halts."""
    if m.outcome is Outcome.INTERRUPTED:
        return Result(Outcome.INTERRUPTED, Verdict.errored(f"stopped {when}"))
    return Result(Outcome.ERROR, Verdict.errored(*(f"{prefix}: {b}" for b in m.blocking)), signature=m.signature,
                  halt=f"the baseline train.py {what}: " + "; ".join(m.blocking))


def _probe_runs(ctx: Context, cand: Candidate, budget: float) -> list[Measurement]:
    """The warm-up's or the fit run's training under the load the night's runs train under: as many runs side by
    side as train at once on this machine (``[loop] seed_jobs`` x the workers, looper.night.cores.runs_at_once;
    seeds from ``[data] seed``; looper.night.slots), each on the threads a run gets. A run alone would train
    faster than the seeds it budgets (on a GPU they share it, on a CPU each has its share of the cores), and
    they would be cut short. Their training time is the baseline's cost; the runs up to the first that did not
    train (as :func:`looper.night.slots.side_by_side` returns them)."""
    from looper.night.measure import train
    from looper.night.slots import side_by_side

    threads, ck = ctx.night.run_threads(), cand.checkout or cand.worker.wt.path

    def run(i: int) -> Callable[[], Measurement]:
        seed, w = ctx.cfg.data.seed + i, _copy_as(ctx, cand.worker, i)

        def call() -> Measurement:
            rd = ctx.tag.runs_dir(cand.exp_id, WARMUP_ROLE, seed)
            (rd / "out").mkdir()
            return train(ctx, w, cand.exp_id, WARMUP_ROLE, seed, budget, ck, rd, threads)
        return call

    n = runs_at_once(ctx.cfg)
    runs = side_by_side(ctx, [run(i) for i in range(n)], ok=lambda m: m.measured, jobs=n)
    for m in runs:
        cand.spent += m.train_seconds
        cand.timing["train_seconds"] = cand.timing.get("train_seconds", 0.0) + m.train_seconds
    return runs


def _copy_as(ctx: Context, main: Worker, i: int) -> Worker:
    """The baseline's worker as copy ``i`` of its warm-up or fit run trains: on the GPU of the worker the copy stands
    for (looper.core.run.slots.copy_worker; ``ctx.night.devices``, each worker's), so that two workers on two GPUs
    put each GPU the runs it will train, not both workers' on the first; the first worker's copies are ``main``."""
    devices = ctx.night.devices
    k = copy_worker(i, ctx.cfg.loop.seed_jobs, len(devices))
    return main if k == 0 or devices[k] == main.device else dataclasses.replace(main, device=devices[k])


def _cores(ctx: Context) -> dict[str, int]:
    """The cores the budget was measured on, where they are this machine's (the local executor): a night on
    other cores measures a new baseline (looper.core.tag.drift)."""
    return {"cores": len(night_cores.usable_cores())} if ctx.cfg.executor.kind == "local" else {}


def _side(runs: list[Measurement], counts: str) -> str:
    return f" ({len(runs)} runs side by side, {counts})" if len(runs) > 1 else ""


def warm_up(ctx: Context, cand: Candidate) -> dict[str, Any] | Result:
    """``[loop] max_steps = "auto"``: train the baseline under the wall clock alone (it also takes the tag's cold
    start), as many runs side by side as the night trains at once (:func:`_probe_runs`), and pin the tag's step budget
    from the fewest steps a run fitted (core.run.budget). Returns what is pinned, or the Result that ends the
    baseline when the warm-up could not train."""
    from looper.core.run.budget import HEADROOM, step_budget

    ctx.tag.set_budget(TagBudget())  # a new baseline forgets the old budget: the warm-up runs unbudgeted
    n = runs_at_once(ctx.cfg)
    ctx.display.note("warm-up: " + (f"{n} runs side by side" if n > 1 else "one run") + " under the wall clock "
                     "alone measure the tag's step budget")
    runs = _probe_runs(ctx, cand, float(ctx.cfg.loop.budget_seconds))
    for m in runs:
        steps = (m.train_json or {}).get("steps")
        if m.measured and int(steps or 0) < 1:  # e.g. steps 0.5: no whole step to budget
            m.ended(Outcome.ERROR, f"train.json says {steps!r} steps: less than one whole optimizer step, no step "
                                   "budget can be measured from it")
    failed = next((m for m in runs if not m.measured), None)
    if failed is not None:
        return baseline_failed(failed, "during the warm-up run", "warm-up",
                               f"could not train its warm-up run ({failed.outcome.value})")
    least = min(runs, key=lambda m: float((m.train_json or {})["steps"]))
    tj = least.train_json or {}
    steps = tj.get("steps")
    warm: dict[str, Any] = {"steps": steps, "seconds": tj.get("seconds"), "stopped_by": tj.get("stopped_by"),
                            "headroom": HEADROOM, **_cores(ctx)}
    if len(runs) > 1:
        warm["runs"] = [(m.train_json or {}).get("steps") for m in runs]
    pinned = {"max_steps": step_budget(int(steps)), "warmup": warm}
    ctx.tag.set_budget(TagBudget(max_steps=pinned["max_steps"], warmup=pinned["warmup"]))
    ctx.journal.event("baseline", f"warm-up #{cand.exp_id}: {steps} steps in {ctx.cfg.loop.budget_seconds} s"
                                  f"{_side(runs, 'the fewest steps count')}; the tag's runs train {pinned['max_steps']} steps ({HEADROOM:.0%})",
                      cand.exp_id, pinned)
    return pinned


def fit_run(ctx: Context, cand: Candidate) -> dict[str, Any] | Result:
    """A fixed ``[loop] max_steps``: train the baseline for a fifth of its steps under 3 x the wall clock
    (core.run.budget.fit_steps, MAX_RAISE), as many runs side by side as the night trains at once (:func:`_probe_runs`),
    and from the slowest one's start-up and step rate keep, raise or refuse the tag's wall clock
    (core.run.budget.fit_wall_clock), so that no baseline seed is cut short on this machine. Returns what the
    baseline records, or the Result that ends the baseline (the fit run could not train, or the steps need more
    than 3 x the wall clock: halted before any seed, with the numbers to change)."""
    ctx.tag.set_budget(TagBudget())  # a new baseline forgets what an earlier fit run raised
    steps = ctx.cfg.loop.max_steps
    assert isinstance(steps, int)
    probe = core_budget.fit_steps(steps)
    ctx.display.note(f"fit run: {probe} of the {steps} steps measure whether the step budget fits the wall clock")
    runs = _probe_runs(dataclasses.replace(ctx, tag=ctx.tag.with_max_steps(probe)), cand,
                       core_budget.MAX_RAISE * ctx.cfg.loop.budget_seconds)
    failed = next((m for m in runs if not m.measured), None)
    if failed is not None:
        return baseline_failed(failed, "during the fit run", "fit run",
                               f"could not train its fit run ({failed.outcome.value})")
    fits = [core_budget.fit_wall_clock(m.train_json, steps, float(ctx.cfg.loop.budget_seconds)) for m in runs]
    fit = max(fits, key=lambda f: f.need or 0)  # the slowest run's: every seed must fit
    ctx.journal.event("baseline", f"fit run #{cand.exp_id}: {fit.why}{_side(runs, 'the slowest counts')}", cand.exp_id, fit.as_dict())
    if fit.status == "too slow":
        why = f"the step budget does not fit this machine: {probe}-step fit run: {fit.finding}"
        return Result(Outcome.ERROR, Verdict.errored(why), halt=why, advice=fit.advice)
    ctx.tag.set_budget(TagBudget(wall_seconds=fit.seconds if fit.status == "raised" else 0,
                                 fit={**fit.as_dict(), **_cores(ctx)}))
    if fit.status == "raised":
        ctx.display.note(f"fit run: {fit.why}")
    return {"max_steps": steps, "fit": fit.as_dict()}


def verify(ctx: Context) -> Verdict:
    """The pipeline on the workspace's current train.py, gated against the best, committed nowhere."""
    from looper.night.integrity import integrity

    ctx.tag.open()
    if ctx.tag.pinned is None or ctx.store.best(ctx.tag.name) is None:
        return Verdict.errored(f"tag {ctx.tag.name} has no measured baseline yet: run `looper run` first")
    for check in (lambda: ctx.executor.preflight(ctx.cfg.executor.require_gpu),
                  lambda: integrity(ctx, "in the workspace since the tag began", ctx.root)):
        v = check()
        if not v.ok:
            return Verdict.errored(*v.blocking)
    source = (ctx.root / "train.py").read_text()
    broken = core_scope.compile_problem(source)
    if broken:
        return Verdict.failed(broken[0])
    exp_id = ctx.store.start_experiment(tag=ctx.tag.name, kind="verify", parent=ctx.tag.wt.head(), seed=ctx.cfg.data.seed,
                                        config=ctx.cfg.redacted_dict(), description="looper verify",
                                        source=source)
    cand = Candidate("verify", exp_id, ctx.main_worker(), ctx.tag.wt.head(), source, source, "looper verify")
    cand.checkout = Path(tempfile.mkdtemp(prefix="looper-verify-", dir=ctx.root / ".looper"))
    try:
        for name in ("train.py", *FIXED_FILES):
            shutil.copy2(ctx.root / name, cand.checkout / name)
        result = settle(ctx, cand, measure_and_gate(ctx, cand, ctx.tag.best(), "main"))
    finally:
        shutil.rmtree(cand.checkout, ignore_errors=True)
    metrics = {**result.verdict.metrics, "outcome": result.outcome.value, "experiment_id": exp_id}
    if result.outcome is Outcome.KEEP:
        return Verdict.passed(metrics)
    if result.outcome in (Outcome.ERROR, Outcome.INTERRUPTED):
        return Verdict.errored(*result.verdict.blocking, metrics=metrics)
    return Verdict.failed(*(result.verdict.blocking or [f"{result.outcome.value}: did not beat the current best"]),
                          metrics=metrics)
