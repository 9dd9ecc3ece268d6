"""One experiment as one straight pipeline.

    proposal -> candidate -> measurements -> gate decision -> result -> settle()

:func:`run_candidate` reads top to bottom; every path ends in :func:`settle`, which commits or
resets the checkout from the outcome's own properties and writes the outcome with one store
call (:mod:`looper.night.settle`). The seeds and the gate's looks are :mod:`looper.night.race`; the
baseline and :func:`~looper.night.baseline.verify`, the same pipeline on the workspace's train.py that
commits nothing, are :mod:`looper.night.baseline`; the records handed forward, :mod:`looper.night.candidate`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from looper.core.propose import scope as core_scope
from looper.core.verdicts.untrusted import one_line
from looper.core.verdicts.verdict import Outcome, Verdict
from looper.night.candidate import Candidate, Proposed, Result
from looper.night.clock import now_iso
from looper.night.context import Context, Worker
from looper.night.integrity import preflight
from looper.night.race import measure_and_gate
from looper.night.settle import settle
from looper.store import ExperimentRecord


# ====================================================================== the pipeline
def run_candidate(ctx: Context, w: Worker) -> Result | None:
    """One experiment, settled. None when the agent has run out of ideas."""
    try:
        parent, parent_source, best_then, started_at = start_from_tip(ctx, w)
        pre = preflight(ctx, w)
        if not pre.ok:
            cand = open_candidate(ctx, w, parent, parent_source, parent_source, "(preflight)")
            return settle(ctx, cand, Result(Outcome.ERROR, pre, halt="preflight failed: " + "; ".join(pre.blocking)))
        proposed = propose(ctx, w, parent_source)
        if proposed.exhausted:
            ctx.night.exhausted = True
            reply = proposed.reply
            ctx.journal.event("stop", f"the agent has run out of ideas: {reply.rationale or reply.description}")
            return None
        cand = candidate_of(ctx, w, parent, parent_source, proposed, started_at)
        scope = check_scope(ctx, cand, proposed.rejected, getattr(proposed.reply, "touched", ()) or ())
        if not scope.ok:
            return settle(ctx, cand, Result(Outcome(scope.metrics["outcome"]), Verdict.failed(*scope.blocking),
                                            signature=scope.metrics.get("signature")))
        commit(ctx, cand)
        result = measure_and_gate(ctx, cand, best_then, "main")
        return settle(ctx, cand, result)
    finally:
        ctx.night.in_flight.pop(w.id, None)


def start_from_tip(ctx: Context, w: Worker) -> tuple[str, str, ExperimentRecord, str]:
    """The worker's checkout at the branch tip: (parent commit, its train.py, the best, start time)."""
    started_at = now_iso()
    with ctx.night.keep_lock:
        if w.detached:
            w.wt.reset_hard(ctx.tag.branch_tip())
        parent = w.wt.head()
        best = ctx.tag.best()
    return parent, (w.wt.path / "train.py").read_text(), best, started_at


def propose(ctx: Context, w: Worker, parent_source: str) -> Proposed:
    """Ask the agent (one at a time for the planner or a single worker)."""
    from looper.agents.base import ProposalRejected
    from looper.agents.view import build_context
    from looper.core.propose.hyperblock import HyperblockError, read_knobs

    ctx.display.set_phase(None, f"{ctx.night.wlabel(w)}agent ({ctx.agent.name}) proposes")
    t0 = time.monotonic()
    serial = ctx.agent.name == "planner" or len(ctx.night.workers) == 1
    with ctx.night.agent_lock if serial else threading.Lock():
        others = tuple(dict(k) for wid, k in sorted(ctx.night.in_flight.items()) if wid != w.id)
        try:
            reply = ctx.agent.propose(build_context(ctx.store, ctx.tag.name, w.wt.path, parent_source, ctx.night.program_md,
                                                    ctx.cfg, in_flight=others))
            rejected = None
        except ProposalRejected as exc:
            reply, rejected = None, str(exc)
        if reply is not None and not getattr(reply, "exhausted", False):
            source = reply.new_source if reply.new_source is not None else (w.wt.path / "train.py").read_text()
            try:
                ctx.night.in_flight[w.id] = read_knobs(source)
            except (HyperblockError, SyntaxError, ValueError):
                ctx.night.in_flight[w.id] = {}
    return Proposed(reply, rejected, time.monotonic() - t0)


def open_candidate(ctx: Context, w: Worker, parent: str, parent_source: str, source: str, description: str,
                   rationale: str = "", diff: str = "") -> Candidate:
    exp_id = ctx.store.start_experiment(
        tag=ctx.tag.name, kind="candidate", parent=parent, seed=ctx.cfg.data.seed, config=ctx.cfg.redacted_dict(),
        description=description, rationale=rationale, source=source, diff=diff, worker=w.label)
    return Candidate("candidate", exp_id, w, parent, parent_source, source, description,
                     reruns=ctx.cfg.loop.noise_reruns)


def candidate_of(ctx: Context, w: Worker, parent: str, parent_source: str, proposed: Proposed,
                 started_at: str) -> Candidate:
    """The proposal written into the worker's checkout and opened as an experiment."""
    reply = proposed.reply
    if reply is not None and reply.new_source is not None:
        (w.wt.path / "train.py").write_text(reply.new_source)
    description = (reply.description if reply else f"(rejected proposal) {proposed.rejected}")[:300]
    description = one_line(description) or "(no description)"  # an agent's words: no escape code reaches a log
    cand = open_candidate(ctx, w, parent, parent_source, (w.wt.path / "train.py").read_text(), description,
                          rationale=reply.rationale if reply else "",
                          diff=w.wt._git("diff", "HEAD", "--", "train.py"))
    cand.agent_seconds = proposed.seconds
    ctx.store.update_experiment(cand.exp_id, agent_seconds=proposed.seconds, started_at=started_at)
    return cand


def check_scope(ctx: Context, cand: Candidate, rejected: str | None, touched: Sequence[str] = ()) -> Verdict:
    """Only train.py may change: anything else is put back as the parent has it. ``touched``: what a boxed
    agent changed besides train.py in its private copy (never copied into the checkout)."""
    ctx.store.set_phase(cand.exp_id, "scope check")
    changed = [c.path for c in cand.worker.wt.changes()]
    verdict = core_scope.check(sorted({*changed, *touched}), cand.source, cand.parent_source, rejected)
    others = [p for p in changed if p != "train.py"]
    if not verdict.ok and others:
        cand.worker.wt.restore(others)
    return verdict


def commit(ctx: Context, cand: Candidate) -> None:
    """On the branch with one worker; on the worker's detached checkout with several."""
    cand.commit = cand.worker.wt.commit(f"looper #{cand.exp_id}: {cand.description}")
    ctx.store.update_experiment(cand.exp_id, commit=cand.commit)
