"""The one end of every experiment, :func:`settle`: the checkout committed or reset as the outcome says and
the outcome written once; a keep that raced a newer best is first merged onto it and rerun."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from pathlib import Path

from looper import proc, tracking
from looper.core.fault import failure as core_failure
from looper.core.verdicts.verdict import Outcome, Verdict
from looper.errors import HarnessError
from looper.night.candidate import Candidate, Result
from looper.night.clock import now_iso
from looper.night.context import Context
from looper.night.guard import release_reserve
from looper.night.race import measure_and_gate

RACE_REASON = "conflicts with kept change"  # a raced candidate's idea is handed back, not excluded


def fault_pause(point: str) -> None:
    """Fault-injection hook for the reliability tests: LOOPER_FAULT_PAUSE=<point>:<seconds>
    makes the daemon sleep at that point (so a test can kill it exactly there). Unset in
    normal use; it changes nothing else."""
    spec = os.environ.get("LOOPER_FAULT_PAUSE", "")
    if spec.startswith(point + ":"):
        print(f"[fault-injection] pausing at {point}", flush=True)
        time.sleep(float(spec.split(":", 1)[1]))


# ====================================================================== settle: the one end
def settle(ctx: Context, cand: Candidate, result: Result) -> Result:
    """The one end of every experiment: the outcome written once; a keep whose parent is no longer the best
    (a detached worker raced another keep) is first merged onto the new best and rerun."""
    w = cand.worker
    for attempt in range(3):
        if result.outcome is not Outcome.KEEP:
            return _write_outcome(ctx, cand, result)
        with ctx.night.keep_lock:
            tip = ctx.tag.branch_tip()
            if tip == cand.parent or not w.detached:
                return _write_outcome(ctx, cand, result)  # under the keep lock: branch and best move together
            # The best moved while this candidate ran: its win is conditional on the new best.
            kept_by = next((r.id for r in reversed(ctx.store.find_experiments(tag=ctx.tag.name, status=Outcome.KEEP))
                            if r.commit == tip), None)
            tip_source = w.wt.show(tip, "train.py")
            best_now = ctx.tag.best()
        if attempt == 2:
            return _write_outcome(ctx, cand, Result(Outcome.DISCARD, Verdict.failed(
                f"{RACE_REASON} #{kept_by}: the best kept moving; idea handed back")))
        merged, clean = merge_train(cand.parent_source, tip_source, cand.source)
        if not clean:
            return _write_outcome(ctx, cand, Result(Outcome.DISCARD, Verdict.failed(
                f"{RACE_REASON} #{kept_by}: the train.py change does not merge onto the new best; idea handed back")))
        rebase(ctx, cand, tip, tip_source, merged, f"{attempt}", kept_by)
        result = measure_and_gate(ctx, cand, best_now, "rerun")  # judge THAT source, never another's result
    raise AssertionError("unreachable")  # pragma: no cover


def rebase(ctx: Context, cand: Candidate, tip: str, tip_source: str, merged: str, attempt: str,
           kept_by: int | None) -> None:
    """Make the merged train.py the candidate, committed on the new best."""
    wt = cand.worker.wt
    assert cand.commit is not None
    wt.save_ref(f"refs/looper/raced/{cand.exp_id}-{attempt}", cand.commit)
    wt.reset_hard(tip)
    (wt.path / "train.py").write_text(merged)
    cand.parent, cand.parent_source, cand.source = tip, tip_source, merged
    cand.commit = wt.commit(f"looper #{cand.exp_id}: {cand.description} (merged onto #{kept_by})")
    ctx.store.update_experiment(cand.exp_id, commit=cand.commit, parent=tip, source=merged,
                                diff=wt.diff(tip, cand.commit))
    ctx.journal.event("note", f"#{cand.exp_id} raced keep #{kept_by}: merged cleanly, rerunning the merged source",
              cand.exp_id)


def merge_train(base: str, ours: str, theirs: str) -> tuple[str, bool]:
    """Three-way merge of train.py (git merge-file): (merged text, clean?)."""
    with tempfile.TemporaryDirectory(prefix="looper-merge-") as tmp:
        paths = []
        for name, text in (("ours", ours), ("base", base), ("theirs", theirs)):
            p = Path(tmp) / name
            p.write_text(text)
            paths.append(str(p))
        done = proc.run(["git", "merge-file", "-p", *paths], timeout=60)
    if done.exit_code is None or done.exit_code < 0:
        raise HarnessError(f"git merge-file failed: {done.stderr.strip()}")
    return done.stdout, done.exit_code == 0


# ====================================================================== the outcome written once
def _write_outcome(ctx: Context, cand: Candidate, result: Result) -> Result:
    """Commit or reset as the outcome says, then write the outcome with ONE store call."""
    fault_pause("record")
    outcome = result.outcome
    # reasons may quote run logs: secrets never reach the database, the display or a page
    verdict = result.verdict.model_copy(update={"blocking": [ctx.journal.redact(b) for b in result.verdict.blocking]})
    off = sandbox_opt_out(ctx)
    if off:  # every verdict says when train.py ran without its sandbox
        verdict = verdict.model_copy(update={"metrics": {**verdict.metrics, "sandbox": off}})
    unboxed = agent_opt_out(ctx)
    if unboxed:  # ... and when the agent command ran without its box
        verdict = verdict.model_copy(update={"metrics": {**verdict.metrics, "agent_sandbox": unboxed}})
    release_reserve(ctx.root, ctx.cfg.limits.reserve_bytes)  # a nearly full disk: room for the outcome
    if cand.moves_git and outcome.advances_branch:
        advance_branch(ctx, cand)
    elif cand.moves_git and outcome.resets_checkout:
        reset_checkout(cand)
    ctx.store.record_outcome(  # the store keeps a score and class rows only where outcome.has_score
        cand.exp_id, outcome=outcome, verdict=None if outcome is Outcome.INTERRUPTED else verdict,
        score=result.score, metrics=result.metrics, blocking=list(verdict.blocking), finished_at=now_iso(),
        failure_signature=result.signature,
        harness_seconds=max(0.0, time.monotonic() - cand.started - cand.agent_seconds - cand.spent), **cand.timing)
    result = dataclasses.replace(result, verdict=verdict, exp_id=cand.exp_id)
    tracking.on_settled(ctx, cand.exp_id)  # [tracking]: MLflow; bounded wait, a warning at most, decides nothing
    if outcome is Outcome.INTERRUPTED:
        ctx.journal.event("interrupted", verdict.blocking[0], cand.exp_id)
    elif cand.kind == "candidate":
        ctx.night.count(outcome)
        best = ctx.store.best(ctx.tag.name)
        ctx.display.outcome(cand.exp_id, outcome.value, result.score, "; ".join(verdict.blocking)[:200],
                            best.score if best else None)
        if outcome in (Outcome.CRASH, Outcome.VACUOUS):
            sigs = ctx.store.recent_signatures(ctx.tag.name, 2 * ctx.cfg.loop.stuck_after)
            result = dataclasses.replace(result, stuck=core_failure.is_stuck(sigs, ctx.cfg.loop.stuck_after))
    return result


def sandbox_opt_out(ctx: Context) -> str | None:
    """The line a verdict carries when ``[executor] sandbox = "none"`` (None when sandboxed)."""
    from looper.executors.sandbox import SandboxPolicy, opt_out_line

    return opt_out_line(SandboxPolicy.from_section(ctx.cfg.executor))


def agent_opt_out(ctx: Context) -> str | None:
    """The line a verdict carries when a ``command`` agent runs with ``[agent] sandbox = "none"``."""
    from looper.agents.sandbox import AgentBox, opt_out_line

    if ctx.cfg.agent.kind != "command":
        return None
    return opt_out_line(AgentBox(mode=str(ctx.cfg.agent.sandbox or "bwrap")))


def advance_branch(ctx: Context, cand: Candidate) -> None:
    """Move looper/<tag> to the kept commit (the caller holds the keep lock)."""
    w = cand.worker
    if not w.detached:
        return  # the commit was made on the branch itself
    assert ctx.tag.wt is not None and cand.commit is not None and cand.parent is not None
    ctx.tag.ws.repo.git.update_ref(f"refs/heads/{ctx.tag.wt.branch}", cand.commit, cand.parent)
    ctx.tag.wt.reset_hard(cand.commit)  # keep the branch's own worktree in step


def reset_checkout(cand: Candidate) -> None:
    """Back to the parent; the candidate's commit stays reachable under refs/looper/discarded/."""
    assert cand.parent is not None
    if cand.commit is not None:
        cand.worker.wt.save_ref(f"refs/looper/discarded/{cand.exp_id}", cand.commit)
    cand.worker.wt.reset_hard(cand.parent)
