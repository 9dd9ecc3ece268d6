"""One experiment as one straight pipeline.

    proposal -> candidate -> measurements -> gate decision -> result -> settle()

:func:`run_candidate` reads top to bottom; every path ends in :func:`settle`, which commits or
resets the checkout from the outcome's own properties and writes the outcome with one store
call. :func:`verify` is the same pipeline on the workspace's train.py, committing nothing;
:func:`measure_baseline` measures the train.py a tag starts from.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper import proc
from looper.adapters.executors.base import FIXED_FILES
from looper.context import Context, Worker, fault_pause, now_iso
from looper.core import failure as core_failure
from looper.core import gate as core_gate
from looper.core import intensify
from looper.core import phases as core_phases
from looper.core import scope as core_scope
from looper.core import seeds as core_seeds
from looper.core.untrusted import one_line
from looper.core.verdict import Outcome, Verdict
from looper.errors import HarnessError, LooperError, StuckError, UsageError
from looper.guard import release_reserve
from looper.measure import (
    Measurement,
    best_checkout,
    mean_metrics,
    measure,
    preflight,
    record_best_run,
    record_run,
    side_by_side,
    weights_sha256,
)
from looper.report.fmt import shown
from looper.store import ExperimentRecord

CUT_SHORT_ADVICE = ("The wall clock ended a baseline run before the tag's step budget: this machine is slower now "
                    "than when the budget was measured (another job on it?). Free the machine, or lower "
                    "[loop] max_steps (with \"auto\", starting again measures a new warm-up), and start `looper run` "
                    "again.")
SEED_ADVICE = ("The workspace's train.py trains the same weights whatever LOOPER_SEED says, so the baseline's "
               "seeds measure no noise and the gate would judge every difference as certain. Seed every random "
               "source in train.py from LOOPER_SEED, commit it, and start `looper run` again.")
RACE_REASON = "conflicts with kept change"  # a raced candidate's idea is handed back, not excluded
GATE_ADVICE = ("The gate cannot judge candidates against this baseline. Change what the baseline depends on "
               "(a longer loop.budget_seconds, another data.scale or data.seed, another executor kind) and "
               "start `looper run` again: it measures a new baseline under the new settings. Starting again "
               "with the same settings halts the same way.")


@dataclass
class Candidate:
    """The train.py under test and what it costs: handed from step to step of one experiment."""

    kind: str  # "candidate" (moves git) | "baseline" | "verify" (never move git)
    exp_id: int
    worker: Worker
    parent: str | None
    parent_source: str
    source: str
    description: str
    checkout: Path | None = None  # where it trains; None: the worker's checkout
    commit: str | None = None  # its own commit, once made
    reruns: int = 0  # reruns the gate may ask for
    started: float = field(default_factory=time.monotonic)
    agent_seconds: float = 0.0
    spent: float = 0.0  # seconds in training and evaluation
    timing: dict[str, Any] = field(default_factory=dict)

    @property
    def moves_git(self) -> bool:
        return self.kind == "candidate"


@dataclass(frozen=True)
class Result:
    """How an experiment ended, before (and after) it is settled."""

    outcome: Outcome
    verdict: Verdict
    score: float | None = None
    metrics: dict | None = None
    signature: str | None = None
    halt: str | None = None  # with an ERROR outcome: what the halt says (default: the reasons)
    advice: str | None = None  # with a halt: what a person should do (None: the general advice)
    exp_id: int | None = None  # set by settle()
    stuck: str | None = None  # set by settle() when this failure makes the loop stuck

    @property
    def halt_error(self) -> LooperError | None:
        """The error the night stops with once this result is recorded, if any."""
        if self.stuck:
            return StuckError(self.stuck)
        if self.outcome.halts_loop:
            return HarnessError(self.halt or "; ".join(self.verdict.blocking))
        return None


@dataclass(frozen=True)
class Proposed:
    """The agent's answer: a reply, or why it was refused."""

    reply: Any | None
    rejected: str | None
    seconds: float

    @property
    def exhausted(self) -> bool:
        return self.reply is not None and bool(getattr(self.reply, "exhausted", False))


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
            ctx.exhausted = True
            reply = proposed.reply
            ctx.event("stop", f"the agent has run out of ideas: {reply.rationale or reply.description}")
            return None
        cand = candidate_of(ctx, w, parent, parent_source, proposed, started_at)
        scope = check_scope(ctx, cand, proposed.rejected)
        if not scope.ok:
            return settle(ctx, cand, Result(Outcome(scope.metrics["outcome"]), Verdict.failed(*scope.blocking),
                                            signature=scope.metrics.get("signature")))
        commit(ctx, cand)
        result = measure_and_gate(ctx, cand, best_then, "main")
        return land(ctx, cand, result)
    finally:
        ctx.in_flight.pop(w.id, None)


def start_from_tip(ctx: Context, w: Worker) -> tuple[str, str, ExperimentRecord, str]:
    """The worker's checkout at the branch tip: (parent commit, its train.py, the best, start time)."""
    started_at = now_iso()
    with ctx.keep_lock:
        if w.detached:
            w.wt.reset_hard(ctx.branch_tip())
        parent = w.wt.head()
        best = ctx.best()
    return parent, (w.wt.path / "train.py").read_text(), best, started_at


def propose(ctx: Context, w: Worker, parent_source: str) -> Proposed:
    """Ask the agent (one at a time for the planner or a single worker)."""
    from looper.adapters.agents.base import ProposalRejected
    from looper.agentctx import build_context
    from looper.core.hyperblock import HyperblockError, read_knobs

    ctx.display.set_phase(None, f"{ctx.wlabel(w)}agent ({getattr(ctx.agent, 'name', 'agent')}) proposes")
    t0 = time.monotonic()
    serial = getattr(ctx.agent, "name", "") == "planner" or len(ctx.workers) == 1
    with ctx.agent_lock if serial else threading.Lock():
        others = tuple(dict(k) for wid, k in sorted(ctx.in_flight.items()) if wid != w.id)
        try:
            reply = ctx.agent.propose(build_context(ctx.store, ctx.tag, w.wt.path, parent_source, ctx.program_md,
                                                    ctx.cfg, in_flight=others))
            rejected = None
        except ProposalRejected as exc:
            reply, rejected = None, str(exc)
        if reply is not None and not getattr(reply, "exhausted", False):
            source = reply.new_source if reply.new_source is not None else (w.wt.path / "train.py").read_text()
            try:
                ctx.in_flight[w.id] = read_knobs(source)
            except (HyperblockError, SyntaxError, ValueError):
                ctx.in_flight[w.id] = {}
    return Proposed(reply, rejected, time.monotonic() - t0)


def open_candidate(ctx: Context, w: Worker, parent: str, parent_source: str, source: str, description: str,
                   rationale: str = "", diff: str = "") -> Candidate:
    exp_id = ctx.store.start_experiment(
        tag=ctx.tag, kind="candidate", parent=parent, seed=ctx.cfg.data.seed, config=ctx.cfg.redacted_dict(),
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


def check_scope(ctx: Context, cand: Candidate, rejected: str | None) -> Verdict:
    """Only train.py may change: anything else is put back as the parent has it."""
    ctx.store.set_phase(cand.exp_id, "scope check")
    changed = [c.path for c in cand.worker.wt.changes()]
    verdict = core_scope.check(changed, cand.source, cand.parent_source, rejected)
    others = [p for p in changed if p != "train.py"]
    if not verdict.ok and others:
        cand.worker.wt.restore(others)
    return verdict


def commit(ctx: Context, cand: Candidate) -> None:
    """On the branch with one worker; on the worker's detached checkout with several."""
    cand.commit = cand.worker.wt.commit(f"looper #{cand.exp_id}: {cand.description}")
    ctx.store.update_experiment(cand.exp_id, commit=cand.commit)


# ====================================================================== measurements -> a decision
def measure_once(ctx: Context, cand: Candidate, role: str, seed: int, record_as: str | None = None) -> Measurement:
    """Train + evaluate the candidate once and record the run."""
    m = measure(ctx, cand.worker, cand.exp_id, role, seed, checkout=cand.checkout)
    account(ctx, cand, role, m, record_as)
    return m


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
    """Measure and gate with intensification (looper.core.intensify): 1, then 2, then 4 ... seeds
    (with ``[loop] seed_jobs`` slots: the first look fills them, each batch after it whole slots)
    of the best's own seeds, up to ``1 + noise_reruns``, stopping early when the gate keeps or
    discards; a seed the best never ran is run on the best first (it gains that seed)."""
    started = time.monotonic()
    race = intensify.Race(cap=1 + max(0, cand.reruns), first_seed=ctx.cfg.data.seed,
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
        outcome, verdict = not_comparable(d, cut, ctx.max_steps())
    return Result(outcome, verdict, score=d.score, metrics=mean_metrics(runs))


def gain_best_seeds(ctx: Context, cand: Candidate, best: ExperimentRecord,
                    wanted: list[int]) -> tuple[float, list[int], list[core_phases.Split]] | Result:
    """Run the current best's train.py on the ``wanted`` seeds it never ran (side by side with ``[loop]
    seed_jobs`` > 1) and record them as the best's own runs (role rerun, in seed order), before the
    candidate runs them. Returns (the seconds they took, the seeds gained: a seed another worker ran on
    the best meanwhile is not gained again, the runs' phases), or the Result that ends the candidate when the best could
    not be measured."""
    if not wanted:
        return 0.0, [], []
    with ctx.seed_lock:  # one worker at a time extends the best; the others then find the seeds there
        have = {s for s, _ in seeded_runs(ctx, best)}
        todo = [s for s in wanted if s not in have]
        if not todo:  # another worker ran the best on them meanwhile
            return 0.0, [], []
        for seed in todo:
            ctx.event("note", f"#{cand.exp_id} needs seed {seed}, which the current best #{best.id} never ran: "
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
    from looper.baselines import newest_baseline

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
        base = ctx.kept_baselines()[-1]
        source, baseline, baseline_runs, baseline_seeds = "tag-start", base.metrics, runs_of(base), seeds_of(base)
    noise = (ctx.pinned.noise if ctx.pinned else None) or {}
    inp = core_gate.GateInput(candidate=runs, best=runs_of(best) or [best.metrics], baseline=baseline,
                              baseline_source=source, noise_sigma=noise.get("sigma"), candidate_simpler=simpler,
                              baseline_runs=baseline_runs, candidate_seeds=list(seeds or []),
                              best_seeds=seeds_of(best) if runs_of(best) else [], baseline_seeds=baseline_seeds)
    gcfg = core_gate.GateConfig(score=ctx.cfg.gate.score, max_class_drop=ctx.cfg.gate.max_class_drop,
                                noise_sigmas=ctx.cfg.gate.noise_sigmas, alpha=ctx.cfg.gate.alpha,
                                score_test=ctx.cfg.gate.score_test)
    return core_gate.decide(inp, gcfg, reruns_left, looks=looks, share=share)


# ====================================================================== a keep lands on the branch
def land(ctx: Context, cand: Candidate, result: Result) -> Result:
    """Settle the result; a keep whose parent is no longer the best is merged onto it and rerun."""
    w = cand.worker
    for attempt in range(3):
        if result.outcome is not Outcome.KEEP:
            return settle(ctx, cand, result)
        with ctx.keep_lock:
            tip = ctx.branch_tip()
            if tip == cand.parent or not w.detached:
                return settle(ctx, cand, result)  # under the keep lock: branch and best move together
            # The best moved while this candidate ran: its win is conditional on the new best.
            kept_by = next((r.id for r in reversed(ctx.store.find_experiments(tag=ctx.tag, status=Outcome.KEEP))
                            if r.commit == tip), None)
            tip_source = w.wt.show(tip, "train.py")
            best_now = ctx.best()
        if attempt == 2:
            return settle(ctx, cand, Result(Outcome.DISCARD, Verdict.failed(
                f"{RACE_REASON} #{kept_by}: the best kept moving; idea handed back")))
        merged, clean = merge_train(cand.parent_source, tip_source, cand.source)
        if not clean:
            return settle(ctx, cand, Result(Outcome.DISCARD, Verdict.failed(
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
    ctx.event("note", f"#{cand.exp_id} raced keep #{kept_by}: merged cleanly, rerunning the merged source",
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


# ====================================================================== settle: the one end
def settle(ctx: Context, cand: Candidate, result: Result) -> Result:
    """Commit or reset as the outcome says, then write the outcome with ONE store call."""
    fault_pause("record")
    outcome = result.outcome
    # reasons may quote run logs: secrets never reach the database, the display or a page
    verdict = result.verdict.model_copy(update={"blocking": [ctx.redact(b) for b in result.verdict.blocking]})
    off = sandbox_opt_out(ctx)
    if off:  # every verdict says when train.py ran without its sandbox
        verdict = verdict.model_copy(update={"metrics": {**verdict.metrics, "sandbox": off}})
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
    if outcome is Outcome.INTERRUPTED:
        ctx.event("interrupted", verdict.blocking[0], cand.exp_id)
    elif cand.kind == "candidate":
        ctx.count(outcome)
        best = ctx.store.best(ctx.tag)
        ctx.display.outcome(cand.exp_id, outcome.value, result.score, "; ".join(verdict.blocking)[:200],
                            best.score if best else None)
        if outcome in (Outcome.CRASH, Outcome.VACUOUS):
            sigs = ctx.store.recent_signatures(ctx.tag, 2 * ctx.cfg.loop.stuck_after)
            result = dataclasses.replace(result, stuck=core_failure.is_stuck(sigs, ctx.cfg.loop.stuck_after))
    return result


def sandbox_opt_out(ctx: Context) -> str | None:
    """The line a verdict carries when ``[executor] sandbox = "none"`` (None when sandboxed)."""
    from looper.sandbox import SandboxPolicy, opt_out_line

    return opt_out_line(SandboxPolicy.from_section(ctx.cfg.executor))


def advance_branch(ctx: Context, cand: Candidate) -> None:
    """Move looper/<tag> to the kept commit (the caller holds the keep lock)."""
    w = cand.worker
    if not w.detached:
        return  # the commit was made on the branch itself
    assert ctx.wt is not None and cand.commit is not None and cand.parent is not None
    ctx.ws.repo.git.update_ref(f"refs/heads/{ctx.wt.branch}", cand.commit, cand.parent)
    ctx.wt.reset_hard(cand.commit)  # keep the branch's own worktree in step


def reset_checkout(cand: Candidate) -> None:
    """Back to the parent; the candidate's commit stays reachable under refs/looper/discarded/."""
    assert cand.parent is not None
    if cand.commit is not None:
        cand.worker.wt.save_ref(f"refs/looper/discarded/{cand.exp_id}", cand.commit)
    cand.worker.wt.reset_hard(cand.parent)


# ====================================================================== the baseline and verify
def measure_baseline(ctx: Context, w: Worker) -> Result:
    """Measure the train.py the tag starts from with ``baseline_seeds`` seeds: the noise the gate uses."""
    assert ctx.wt is not None
    seeds = [ctx.cfg.data.seed + i for i in range(ctx.cfg.loop.baseline_seeds)]
    source = (ctx.wt.path / "train.py").read_text()
    description = "baseline: the train.py the tag started from"
    exp_id = ctx.store.start_experiment(tag=ctx.tag, kind="baseline", parent=None, seed=seeds[0],
                                        config=ctx.cfg.redacted_dict(), description=description, source=source)
    ctx.store.update_experiment(exp_id, commit=ctx.wt.head(), started_at=now_iso())
    cand = Candidate("baseline", exp_id, w, None, source, source, description)
    budget: dict[str, Any] = {}
    if ctx.cfg.loop.max_steps == "auto":
        warm = warm_up(ctx, cand)
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
            return settle(ctx, cand, Result(Outcome.ERROR, Verdict.errored(why), halt=why, advice=CUT_SHORT_ADVICE))
        results.append(m)
    seeded = core_seeds.check([(r.seed, weights_sha256(r)) for r in results])
    if seeded.ignores_seed:  # its noise would read as zero: nothing may be judged against it
        why = f"baseline train.py {seeded.reason}"
        return settle(ctx, cand, Result(Outcome.ERROR, Verdict.errored(why), halt=why, advice=SEED_ADVICE))
    scores = [float(r.metrics[ctx.cfg.gate.score]) for r in results]
    mean, sigma = statistics.fmean(scores), (statistics.stdev(scores) if len(scores) > 1 else None)
    metrics = {**mean_metrics([r.metrics for r in results]), "seed_scores": scores}
    ctx.store.set_tag_noise(ctx.tag, {**budget, "sigma": sigma, "scores": scores, "seeds": seeds,
                                      "class_recall_sd": core_gate.class_recall_spread([r.metrics for r in results])})
    ctx.pinned = ctx.store.tag_record(ctx.tag)
    result = settle(ctx, cand, Result(Outcome.KEEP, Verdict.passed({"score": mean, "noise_sigma": sigma,
                                                                     "seeds": seeds, **budget}),
                                      score=mean, metrics=metrics))
    dead = core_gate.dead_gates(metrics, ctx.cfg.gate.max_class_drop)
    ctx.event("baseline", f"baseline #{exp_id}: {ctx.cfg.gate.score} mean {mean:.4f} over seeds {seeds}, "
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


def warm_up(ctx: Context, cand: Candidate) -> dict[str, Any] | Result:
    """``[loop] max_steps = "auto"``: train the baseline once under the wall clock alone (it also takes
    the tag's cold start) and pin the tag's step budget from the steps it fitted (core.budget). Returns
    what is pinned, or the Result that ends the baseline when the warm-up could not train."""
    from looper.core.budget import HEADROOM, step_budget
    from looper.measure import train

    ctx.store.set_tag_noise(ctx.tag, {})  # a new baseline forgets the old budget: the warm-up runs unbudgeted
    ctx.pinned = ctx.store.tag_record(ctx.tag)
    seed = ctx.cfg.data.seed
    ctx.display.note("warm-up: one run under the wall clock alone measures the tag's step budget")
    rd = ctx.runs_dir(cand.exp_id, "warmup", seed)
    (rd / "out").mkdir()
    m = train(ctx, cand.worker, cand.exp_id, "warmup", seed, float(ctx.cfg.loop.budget_seconds),
              cand.checkout or cand.worker.wt.path, rd)
    cand.spent += m.train_seconds
    cand.timing["train_seconds"] = cand.timing.get("train_seconds", 0.0) + m.train_seconds  # the baseline's cost
    if m.measured and int((m.train_json or {}).get("steps") or 0) < 1:  # e.g. steps 0.5: no whole step to budget
        m.ended(Outcome.ERROR, f"train.json says {(m.train_json or {}).get('steps')!r} steps: less than one "
                               "whole optimizer step, no step budget can be measured from it")
    if not m.measured:
        return baseline_failed(m, "during the warm-up run", "warm-up",
                               f"could not train its warm-up run ({m.outcome.value})")
    tj = m.train_json or {}
    steps = tj.get("steps")
    pinned = {"max_steps": step_budget(int(steps)),
              "warmup": {"steps": steps, "seconds": tj.get("seconds"), "stopped_by": tj.get("stopped_by"),
                         "headroom": HEADROOM}}
    ctx.store.set_tag_noise(ctx.tag, pinned)
    ctx.pinned = ctx.store.tag_record(ctx.tag)
    ctx.event("baseline", f"warm-up #{cand.exp_id}: {steps} steps in {ctx.cfg.loop.budget_seconds} s; "
                          f"the tag's runs train {pinned['max_steps']} steps ({HEADROOM:.0%})", cand.exp_id, pinned)
    return pinned


def verify(ctx: Context) -> Verdict:
    """The pipeline on the workspace's current train.py, gated against the best, committed nowhere."""
    from looper.measure import integrity

    ctx.wt = ctx.ws.ensure_worktree(ctx.tag)
    tag_row = ctx.store.tag_record(ctx.tag)
    if tag_row is None or ctx.store.best(ctx.tag) is None:
        return Verdict.errored(f"tag {ctx.tag} has no measured baseline yet: run `looper run` first")
    ctx.pinned = tag_row
    for check in (lambda: ctx.executor.preflight(ctx.cfg.executor.require_gpu),
                  lambda: integrity(ctx, "in the workspace since the tag began", ctx.root)):
        v = check()
        if not v.ok:
            return Verdict.errored(*v.blocking)
    source = (ctx.root / "train.py").read_text()
    broken = core_scope.compile_problem(source)
    if broken:
        return Verdict.failed(broken[0])
    exp_id = ctx.store.start_experiment(tag=ctx.tag, kind="verify", parent=ctx.wt.head(), seed=ctx.cfg.data.seed,
                                        config=ctx.cfg.redacted_dict(), description="looper verify",
                                        source=source)
    cand = Candidate("verify", exp_id, ctx.main_worker(), ctx.wt.head(), source, source, "looper verify")
    cand.checkout = Path(tempfile.mkdtemp(prefix="looper-verify-", dir=ctx.root / ".looper"))
    try:
        for name in ("train.py", *FIXED_FILES):
            shutil.copy2(ctx.root / name, cand.checkout / name)
        result = settle(ctx, cand, measure_and_gate(ctx, cand, ctx.best(), "main"))
    finally:
        shutil.rmtree(cand.checkout, ignore_errors=True)
    metrics = {**result.verdict.metrics, "outcome": result.outcome.value, "experiment_id": exp_id}
    if result.outcome is Outcome.KEEP:
        return Verdict.passed(metrics)
    if result.outcome in (Outcome.ERROR, Outcome.INTERRUPTED):
        return Verdict.errored(*result.verdict.blocking, metrics=metrics)
    return Verdict.failed(*(result.verdict.blocking or [f"{result.outcome.value}: did not beat the current best"]),
                          metrics=metrics)
