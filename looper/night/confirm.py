"""The confirmed morning: the night's final best re-run on fresh seeds, compared with the tag's baseline.

Run when a night ends by a stop rule (``until``, ``max_experiments``, the agent out of ideas) and by
``looper confirm``. The best that won the night's selection is the maximum of many noisy
candidates, biased upwards; here it runs on ``[loop] confirm_seeds`` seeds above every seed the
tag used (no decision saw them: :func:`looper.core.keep.race.fresh_seeds`), and the mean of those
runs is compared with the tag's baseline on the baseline's own seeds (the baseline was never
selected on, so its seeds carry no selection bias and are not re-run). The judgement is
:func:`looper.core.keep.confirm.judge`; one row of the ``confirmations`` table records it, with
the runs and minutes it cost. The fresh runs are recorded as the best's own runs (role
``rerun``): they improve its estimate for the next night, whose decisions then use them.

A night cut short (a signal, a halt) records what it confirmed so far, or that it confirmed nothing.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from looper.core.keep import confirm as core_confirm
from looper.core.keep.race import fresh_seeds
from looper.core.verdicts.verdict import Outcome
from looper.errors import HarnessError, UsageError
from looper.night.clock import now_iso
from looper.night.context import Context
from looper.store import queries
from looper.store.records import ExperimentRecord


def record_nothing(ctx: Context, why: str, trigger: str = "cut_short") -> int | None:
    """Say that the night confirmed nothing, and why (never raises: a halt must not be hidden)."""
    if ctx.cfg.loop.confirm_seeds <= 0:
        return None
    try:
        best = ctx.store.best(ctx.tag.name)
        base = queries.tag_baseline(ctx.store, ctx.tag.name)
        c = core_confirm.judge([], [], ctx.cfg.gate.score, ctx.cfg.loop.confirm_seeds, why_nothing=why)
        return ctx.store.add_confirmation(
            tag=ctx.tag.name, experiment_id=best.id if best else None, baseline_id=base.id if base else None,
            trigger=trigger, status=c.status, score_key=ctx.cfg.gate.score, planned=ctx.cfg.loop.confirm_seeds,
            seeds=[], scores=[], baseline_scores=[], headline=ctx.journal.redact(c.headline), runs=0, seconds=0.0,
            started_at=now_iso())  # the reason may quote a run log: no secret reaches the database
    except Exception as exc:  # the database may be what broke
        ctx.display.note(f"could not record that the night confirmed nothing: {type(exc).__name__}: {exc}")
        return None


@dataclass
class _Fresh:
    """What the fresh runs gave: scores of the runs that measured, seeds run, their seconds added up, the
    runs that failed (a line each), the harness error that stopped them, whether the night cut them short."""

    scores: list[float] = field(default_factory=list)
    ran: list[int] = field(default_factory=list)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    error: HarnessError | None = None
    cut: bool = False


def _fresh_runs(ctx: Context, best: ExperimentRecord, seeds: list[int], key: str) -> _Fresh:
    """The best on each fresh seed (side by side with ``[loop] seed_jobs`` > 1), each run recorded as the
    best's own; a run interrupted or in error starts no further one."""
    f = _Fresh()
    worker = ctx.main_worker()
    from looper.night.measure import Measurement, measure
    from looper.night.runs import best_checkout, record_best_run
    from looper.night.slots import side_by_side

    with best_checkout(ctx, worker.wt.path, best.source, "looper-confirm-") as ck:
        def one(seed: int) -> Measurement | None:
            return None if ctx.night.cancel.is_set() else measure(ctx, worker, best.id, "rerun", seed, checkout=ck)

        def keep(m: Measurement | None) -> None:  # in seed order
            if m is not None:
                record_best_run(ctx, best.id, m)

        # side by side with [loop] seed_jobs > 1; a run interrupted or in error starts no further one
        for m in side_by_side(ctx, [functools.partial(one, s) for s in seeds], keep=keep,
                              ok=lambda m: m is not None and m.outcome not in (Outcome.INTERRUPTED, Outcome.ERROR)):
            if m is None:
                f.cut = True
                break
            seed = m.seed
            f.seconds += m.train_seconds + m.eval_seconds
            f.ran.append(seed)
            if m.outcome is Outcome.INTERRUPTED:
                f.cut = True
                break
            if m.outcome is Outcome.ERROR:
                f.error = HarnessError(f"confirmation of #{best.id}, seed {seed}: " + "; ".join(m.blocking))
                break
            if not m.measured or m.metrics is None or m.cut_short:
                what = f"cut short ({m.cut_short})" if m.measured and m.cut_short else (
                    f"{m.outcome.value}: {'; '.join(m.blocking)[:160]}")
                f.problems.append(f"seed {seed}: {what}")
                continue
            f.scores.append(float(m.metrics[key]))
    return f


def confirm(ctx: Context, trigger: str) -> tuple[int | None, HarnessError | None]:
    """Confirm the tag's best (``trigger``: night_end | command). Returns (confirmation id or None
    when ``confirm_seeds`` is 0, the harness error that ended it or None)."""
    n = ctx.cfg.loop.confirm_seeds
    if n <= 0:
        return None, None
    key, started = ctx.cfg.gate.score, now_iso()
    best, base = ctx.store.best(ctx.tag.name), queries.tag_baseline(ctx.store, ctx.tag.name)
    if best is None or base is None:
        return record_nothing(ctx, f"tag {ctx.tag.name} has no measured baseline", trigger), None
    if best.id == base.id or best.kind == "baseline":
        return record_nothing(ctx, "the night's best is the baseline: no kept change to confirm", trigger), None
    base_scores = [float(r.score) for r in ctx.store.run_records(base.id) if r.metrics and r.score is not None]
    seeds = fresh_seeds(queries.used_seeds(ctx.store, ctx.tag.name), n, ctx.cfg.data.seed)
    ctx.journal.event("note", f"confirming #{best.id} on fresh seeds {seeds} against baseline #{base.id}", best.id)
    ctx.display.note(f"confirming the night's best #{best.id} on {n} fresh seed(s) {seeds}")
    f = _fresh_runs(ctx, best, seeds, key)
    why = ("the night was cut short before the first fresh run finished" if f.cut else
           "; ".join(f.problems) or (str(f.error) if f.error else ""))
    c = core_confirm.judge(f.scores, base_scores, key, n, why_nothing=why)
    headline = c.headline + (f" ({len(f.problems)} fresh run(s) failed: {'; '.join(f.problems)})" if f.problems and f.scores
                             else "")
    selection = (best.score - base.score) if best.score is not None and base.score is not None else None
    cid = ctx.store.add_confirmation(
        tag=ctx.tag.name, experiment_id=best.id, baseline_id=base.id, trigger="cut_short" if f.cut else trigger,
        status=c.status, score_key=key, planned=n, seeds=list(f.ran), scores=f.scores,
        baseline_scores=base_scores, headline=ctx.journal.redact(headline), runs=len(f.ran), seconds=f.seconds,
        started_at=started, diff=c.diff, low=c.low, high=c.high, selection_diff=selection,
        flagged=c.flagged or (bool(f.problems) and c.status != core_confirm.CONFIRMED))
    ctx.journal.event("note", f"confirmation of #{best.id}: {ctx.journal.redact(headline)}", best.id,
              {"confirmation": cid, "status": c.status})
    ctx.display.note(f"confirmation: {headline}")
    return cid, f.error


def run_confirm(ctx: Context) -> int:
    """``looper confirm``: the tag's best on fresh seeds now. Returns the confirmation id."""
    from looper.night.integrity import preflight

    ctx.tag.open()
    if ctx.tag.pinned is None or ctx.store.best(ctx.tag.name) is None:
        raise UsageError(f"tag {ctx.tag.name} has no measured baseline yet: run `looper run` first")
    if ctx.cfg.loop.confirm_seeds <= 0:
        raise UsageError("[loop] confirm_seeds is 0 (confirmation off): set it to the fresh seeds to run, e.g. 3")
    pre = preflight(ctx, ctx.main_worker())
    if not pre.ok:
        raise HarnessError("preflight failed before the confirmation: " + "; ".join(pre.blocking))
    cid, error = confirm(ctx, "command")
    if error is not None:
        raise error
    assert cid is not None
    if ctx.cfg.confirm.tuned_thresholds and not ctx.night.cancel.is_set():
        from looper.night.tuned import measure_thresholds

        measure_thresholds(ctx)  # report only: never raises (looper/night/tuned.py)
    return cid
