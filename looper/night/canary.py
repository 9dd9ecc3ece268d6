"""Proof before a halt: a candidate's failure halts the night as a harness error only
when a canary fails too. The decisions are pure (looper.core.fault.blame); this module runs the canaries:

- training: :func:`canary` re-runs the last kept train.py briefly;
- evaluation: :func:`eval_canary` evaluates the best's own weights with the same evaluator.

A baseline's failures have no canary (nothing was kept yet): they keep the classifier's answer.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from looper.core.fault import blame
from looper.core.run.slots import WARMUP_ROLE
from looper.executors import EvalJob
from looper.executors.base import FIXED_FILES
from looper.night.context import Context, Worker

TRAIN_CANARY = "the last kept train.py"
EVAL_CANARY = "the best's weights through the same evaluator"
NOT_CANDIDATE_ROLES = ("baseline", WARMUP_ROLE)


def is_candidate(role: str) -> bool:
    """Runs of a candidate (main, rerun); the baseline's own runs have nothing to compare with."""
    return role not in NOT_CANDIDATE_ROLES


def best_weights(ctx: Context) -> Path | None:
    """A weights.pt the best experiment's own run left in runs/, if one is still there."""
    try:
        best = ctx.tag.best()
    except Exception:  # noqa: BLE001 - no best yet: no canary
        return None
    folder = ctx.root / "runs" / ctx.tag.name / f"{best.id:05d}"
    for weights in sorted(folder.glob("*/out/weights.pt")) if folder.is_dir() else []:
        if not weights.parent.parent.name.startswith("canary"):
            return weights
    return None


def best_eval_seconds(ctx: Context) -> float | None:
    """The best's measured evaluation seconds per run (None when unknown)."""
    try:
        best = ctx.tag.best()
    except Exception:  # noqa: BLE001
        return None
    runs = [r for r in ctx.store.run_records(best.id) if r.metrics]
    if not best.eval_seconds or not runs:
        return None
    return float(best.eval_seconds) / len(runs)


def eval_limit(ctx: Context, role: str) -> float | None:
    """How long this evaluation may take before it is the candidate's crash (None: no such limit)."""
    if not is_candidate(role):
        return None
    lim = ctx.cfg.limits
    return blame.eval_time_limit(best_eval_seconds(ctx), lim.eval_time_factor, float(lim.eval_time_floor))


def eval_canary(ctx: Context, w: Worker, exp_id: int, checkout: Path, seed: int) -> bool | None:
    """Evaluate the best's weights with the same evaluator: did it fail too? None when no weights
    of the best are left to evaluate (no proof either way)."""
    weights = best_weights(ctx)
    if weights is None:
        return None
    rd = ctx.tag.runs_dir(exp_id, "canary-eval", seed)
    ctx.display.set_phase(exp_id, "canary (evaluate the best's weights)")
    ev = w.executor.evaluate(
        EvalJob(checkout=checkout, weights=weights, metrics_path=rd / "METRICS.json", log_path=rd / "eval.log",
                timeout_seconds=max(600.0, 2.0 * ctx.cfg.loop.budget_seconds),
                stall_seconds=ctx.cfg.loop.stall_seconds, device=w.device),
        ctx.display.log_line, ctx.night.cancel)
    failed = not ev.clean_exit or not (rd / "METRICS.json").is_file()
    if ev.cancelled or ctx.night.cancel.is_set():
        return None
    ctx.journal.event("note", f"canary evaluation of the best's weights: {'FAILED' if failed else 'ok'}", exp_id)
    return failed


def canary(ctx: Context, w: Worker, exp_id: int) -> bool:
    """Rerun the last kept train.py briefly in a scratch folder: did it fail too?"""
    assert ctx.tag.wt is not None
    kept = ctx.tag.last_kept_commit()
    if kept is None:
        return True
    budget = float(min(ctx.cfg.loop.budget_seconds, 60))
    ctx.display.set_phase(exp_id, "canary (last kept train.py)", budget)
    scratch = Path(tempfile.mkdtemp(prefix="looper-canary-", dir=ctx.root / ".looper"))
    try:
        for name in ("train.py", *FIXED_FILES):
            (scratch / name).write_text(ctx.tag.wt.show(kept, name))
        rd = ctx.tag.runs_dir(exp_id, "canary", ctx.cfg.data.seed)
        tr = w.executor.train(ctx.train_job(w, scratch, rd, ctx.cfg.data.seed, budget), ctx.display.log_line,
                              ctx.night.cancel)
        failed = (not tr.clean_exit or bool(tr.gpu.get("lost"))) and not tr.cancelled
        ctx.journal.event("note", f"canary of kept {kept[:10]}: {'FAILED' if failed else 'ok'}", exp_id)
        return failed
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
