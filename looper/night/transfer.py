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


def transfer_steps(ctx: Context) -> int:
    want = ctx.cfg.confirm.transfer_steps
    return core_transfer.default_steps(ctx.tag.max_steps(), ctx.cfg.data.scale) if want == -1 else int(want)


def _longer(ctx: Context, steps: int) -> Context:
    """The same context whose runs train ``steps`` steps (the store, display, locks and cancel are shared)."""
    cfg = ctx.cfg.model_copy(update={"loop": ctx.cfg.loop.model_copy(update={"max_steps": steps})})
    return dataclasses.replace(ctx, cfg=cfg, tag=ctx.tag.with_max_steps(steps))


def _side(ctx: Context, exp: Any, seeds: list[int], budget: float) -> tuple[list[float], float, list[str], bool]:
    """(scores, seconds, problems, cut) of ``exp``'s train.py on ``seeds`` at the longer budget."""
    from looper.night.measure import measure
    from looper.night.runs import best_checkout
    from looper.night.slots import side_by_side

    key, worker = ctx.cfg.gate.score, ctx.main_worker()
    scores: list[float] = []
    problems: list[str] = []
    seconds, cut = 0.0, False
    with best_checkout(ctx, worker.wt.path, exp.source, "looper-transfer-") as ck:
        def one(seed: int) -> Any:
            return None if ctx.night.cancel.is_set() else measure(ctx, worker, exp.id, ROLE, seed, budget, checkout=ck)

        for m in side_by_side(ctx, [functools.partial(one, s) for s in seeds],
                              ok=lambda m: m is not None and m.outcome not in (Outcome.INTERRUPTED, Outcome.ERROR)):
            if m is None or m.outcome is Outcome.INTERRUPTED:
                cut = True
                break
            seconds += m.train_seconds + m.eval_seconds
            if m.outcome is Outcome.ERROR:
                raise HarnessError(f"transfer check of #{exp.id}, seed {m.seed}: " + "; ".join(m.blocking))
            if not m.measured or m.metrics is None or m.cut_short:
                problems.append(f"#{exp.id} seed {m.seed}: " + (m.cut_short or "; ".join(m.blocking))[:160])
                continue
            scores.append(float(m.metrics[key]))
    return scores, seconds, problems, cut


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
    longer, error = _longer(ctx, steps), None
    sides: list[tuple[list[float], float, list[str], bool]] = []
    try:
        for exp in (best, base):
            sides.append(_side(longer, exp, seeds, budget))
            if sides[-1][3]:
                break
    except HarnessError as exc:
        error = exc
    while len(sides) < 2:
        sides.append(([], 0.0, [], True))
    (bs, b_sec, b_prob, b_cut), (rs, r_sec, r_prob, r_cut) = sides
    problems = b_prob + r_prob
    why = ("the night was cut short before the check finished" if b_cut or r_cut else
           str(error) if error else "; ".join(problems))
    t = core_transfer.judge(bs, rs, key, steps, night, conf.low, why_nothing=why)
    headline = t.headline + (f" ({len(problems)} run(s) failed: {'; '.join(problems)})" if problems and bs else "")
    add_transfer(ctx.store, tag=ctx.tag.name, confirmation_id=conf.id, experiment_id=best.id, baseline_id=base.id,
                 trigger="cut_short" if (b_cut or r_cut) else trigger, status=t.status, score_key=key, steps=steps,
                 night_steps=night, seeds=seeds, scores=bs, baseline_scores=rs, diff=t.diff, low=t.low, high=t.high,
                 flagged=t.flagged, headline=ctx.journal.redact(headline), runs=len(bs) + len(rs) + len(problems),
                 seconds=b_sec + r_sec, started_at=started)
    ctx.journal.event("note", f"transfer check of #{best.id}: {ctx.journal.redact(headline)}", best.id, {"transfer": t.status})
    ctx.display.note(f"transfer check: {headline}")
    from looper.store.transfers import transfer_records

    return transfer_records(ctx.store, ctx.tag.name)[-1], error
