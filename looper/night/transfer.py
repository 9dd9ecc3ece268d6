"""The transfer check: does the confirmed gain hold when trained longer? (the rule: looper.core.keep.transfer)

After a confirmation that confirmed a gain, the confirmed best and the tag's baseline are each trained
at ``[confirm] transfer_steps`` (``-1``: :func:`looper.core.keep.transfer.default_steps`, a multiple of the
night's step budget per data preset; ``0``: off) on ``[confirm] transfer_seeds`` fresh seeds (the same
seeds for both, above every seed the tag used), with the wall-clock budget scaled by the same factor.
These runs are NOT the experiments' runs: they train another budget, so they are kept out of the
``runs`` table (their folders are ``runs/<tag>/<id>/transfer-s<seed>``) and recorded as one row of
``transfers`` with the runs and minutes they cost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any

from looper.core.keep import transfer as core_transfer
from looper.core.keep.race import fresh_seeds
from looper.core.verdicts.verdict import Outcome
from looper.errors import HarnessError
from looper.night.clock import now_iso
from looper.night.context import Context
from looper.store import queries
from looper.store.transfers import add_transfer

ROLE = "transfer"


@dataclasses.dataclass
class Side:
    """What one side of the check (the best or the baseline) gave: its scores, its runs' minutes, its failed runs."""

    scores: list[float] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    problems: list[str] = dataclasses.field(default_factory=list)


def transfer_steps(ctx: Context) -> int:
    want = ctx.cfg.confirm.transfer_steps
    return core_transfer.default_steps(ctx.tag.max_steps(), ctx.cfg.data.scale) if want == -1 else int(want)


def _longer(ctx: Context, steps: int) -> Context:
    """The same context whose runs train ``steps`` steps (the store, display, locks and cancel are shared)."""
    cfg = ctx.cfg.model_copy(update={"loop": ctx.cfg.loop.model_copy(update={"max_steps": steps})})
    return dataclasses.replace(ctx, cfg=cfg, tag=ctx.tag.with_max_steps(steps))


def _both(ctx: Context, sides: tuple[Any, Any], seeds: list[int], budget: float) -> tuple[list[Side], str]:
    """Each of ``sides``' train.py on ``seeds`` at the longer budget, the two interleaved seed by seed (best s1,
    baseline s1, best s2, ...) so that with ``[loop] seed_jobs`` > 1 a seed's two runs train together: the load of
    the moment falls on both sides alike, and 2 x 3 runs on 2 slots take 3 rounds, not 2 + 2 half-empty ones.
    Returns a :class:`Side` each (what ran before an end) and why the check ended before its last run: "" (it did
    not), "cut" (the night's stop), else the harness error of a run, in words."""
    from looper.night.measure import measure
    from looper.night.runs import best_checkout
    from looper.night.slots import side_by_side

    key, worker = ctx.cfg.gate.score, ctx.main_worker()
    out = [Side(), Side()]
    with contextlib.ExitStack() as stack:
        checkouts = [stack.enter_context(best_checkout(ctx, worker.wt.path, exp.source, "looper-transfer-"))
                     for exp in sides]

        def one(side: int, seed: int) -> Any:
            return (None if ctx.night.cancel.is_set() else
                    measure(ctx, worker, sides[side].id, ROLE, seed, budget, checkout=checkouts[side]))

        calls = [functools.partial(one, side, seed) for seed in seeds for side in (0, 1)]
        got = side_by_side(ctx, calls, ok=lambda m: m is not None and m.outcome not in (Outcome.INTERRUPTED, Outcome.ERROR))
    for i, m in enumerate(got):
        exp, side = sides[i % 2], out[i % 2]
        if m is None or m.outcome is Outcome.INTERRUPTED:
            return out, "cut"
        side.seconds += m.train_seconds + m.eval_seconds
        if m.outcome is Outcome.ERROR:
            return out, f"transfer check of #{exp.id}, seed {m.seed}: " + "; ".join(m.blocking)
        if not m.measured or m.metrics is None or m.cut_short:
            side.problems.append(f"#{exp.id} seed {m.seed}: " + (m.cut_short or "; ".join(m.blocking))[:160])
            continue
        side.scores.append(float(m.metrics[key]))
    return out, ""


def check(ctx: Context, trigger: str, confirmation_id: int | None) -> tuple[Any, HarnessError | None]:
    """Run the transfer check after confirmation ``confirmation_id``. Returns (the TransferRecord or None
    when off or nothing was confirmed, the harness error that ended it or None)."""
    steps, night = transfer_steps(ctx), ctx.tag.max_steps()
    if steps <= 0 or confirmation_id is None:
        return None, None
    conf = next((c for c in queries.confirmations(ctx.store, ctx.tag.name) if c.id == confirmation_id), None)
    if conf is None or conf.status != "confirmed":
        return None, None  # the night confirmed no gain: there is nothing to carry to a longer budget
    best, base = ctx.store.experiment(conf.experiment_id), ctx.store.experiment(conf.baseline_id)
    key, started, n = ctx.cfg.gate.score, now_iso(), ctx.cfg.confirm.transfer_seeds
    seeds = fresh_seeds(queries.used_seeds(ctx.store, ctx.tag.name), n, ctx.cfg.data.seed)
    factor = steps / night if night else 1.0
    budget = ctx.tag.wall_seconds(ctx.cfg.loop.budget_seconds) * max(1.0, factor)
    ctx.journal.event("note", f"transfer check: #{best.id} and baseline #{base.id} at {steps} steps on seeds {seeds}", best.id)
    ctx.display.note(f"transfer check: #{best.id} and the baseline at {steps} steps on {n} fresh seed(s) each")
    try:
        (b, r), ended = _both(_longer(ctx, steps), (best, base), seeds, budget)
    except HarnessError as exc:  # raised below a run (its result never came back)
        (b, r), ended = (Side(), Side()), str(exc) or "the transfer check's harness failed"
    cut, error = ended == "cut", HarnessError(ended) if ended not in ("", "cut") else None
    bs, rs, problems = b.scores, r.scores, b.problems + r.problems
    why = "the night was cut short before the check finished" if cut else str(error) if error else "; ".join(problems)
    t = core_transfer.judge(bs, rs, key, steps, night, conf.low, why_nothing=why)
    headline = t.headline + (f" ({len(problems)} run(s) failed: {'; '.join(problems)})" if problems and bs else "")
    add_transfer(ctx.store, tag=ctx.tag.name, confirmation_id=conf.id, experiment_id=best.id, baseline_id=base.id,
                 trigger="cut_short" if cut else trigger, status=t.status, score_key=key, steps=steps,
                 night_steps=night, seeds=seeds, scores=bs, baseline_scores=rs, diff=t.diff, low=t.low, high=t.high,
                 flagged=t.flagged, headline=ctx.journal.redact(headline), runs=len(bs) + len(rs) + len(problems),
                 seconds=b.seconds + r.seconds, started_at=started)
    ctx.journal.event("note", f"transfer check of #{best.id}: {ctx.journal.redact(headline)}", best.id, {"transfer": t.status})
    ctx.display.note(f"transfer check: {headline}")
    from looper.store.transfers import transfer_records

    return transfer_records(ctx.store, ctx.tag.name)[-1], error
