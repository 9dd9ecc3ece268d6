"""Measuring one train.py: preflight, integrity, train, classify a failure, canary, evaluate,
record the run. Each step answers with evidence; a :class:`Measurement` carries the outcome
it already decides (crash, vacuous, error, interrupted) or ``PENDING`` when it holds a result
for the gate to judge."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from looper.core.fault import blame as core_blame
from looper.core.fault import evidence as core_evidence
from looper.core.fault import failure as core_failure
from looper.core.run import budget as core_budget
from looper.core.run import limits as core_limits
from looper.core.run import phases as core_phases
from looper.core.run import slots as core_slots
from looper.core.verdicts.verdict import Outcome
from looper.executors import EvalJob, RunResult, TrainJob
from looper.executors.base import STARTUP_MARK
from looper.executors.sandbox import WEIGHTS_REFUSED_EXIT
from looper.night.canary import (
    EVAL_CANARY,
    TRAIN_CANARY,
    best_eval_seconds,
    canary,
    eval_canary,
    eval_limit,
    is_candidate,
)
from looper.night.clock import now_iso
from looper.night.context import Context, Worker
from looper.night.integrity import integrity
from looper.night.slots import NotStarted, current_slot
from looper.workspace import trees
from looper.workspace.hashes import file_sha256


@dataclass
class Measurement:
    """One train + evaluate of one source with one seed."""

    seed: int
    outcome: Outcome = Outcome.PENDING  # PENDING: measured, the gate decides
    blocking: list[str] = field(default_factory=list)
    metrics: dict | None = None
    train_json: dict | None = None
    train: RunResult | None = None
    eval: RunResult | None = None
    signature: str | None = None
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    run_dir: Path | None = None
    cut_short: str | None = None  # the wall clock ended it before its step budget (core.run.budget.cut_short)
    failure_kind: str = ""  # a failed training's kind (core.fault.failure: "oom", "hung", ...); "" otherwise
    # the run's phases on the harness's clock (ISO; None: not reached or not seen): launched, first optimizer
    # step (the LOOPER_STARTUP line's arrival), train.py exited, evaluate.py exited (core.run.phases)
    started_at: str | None = None
    train_started_at: str | None = None
    train_ended_at: str | None = None
    eval_ended_at: str | None = None

    @property
    def phases(self) -> core_phases.Split:
        return core_phases.split(self.started_at, self.train_started_at, self.train_ended_at, self.eval_ended_at)

    @property
    def measured(self) -> bool:
        return self.outcome is Outcome.PENDING

    def ended(self, outcome: Outcome, *reasons: str) -> Measurement:
        self.outcome, self.blocking = outcome, list(reasons)
        return self


def mean_metrics(runs: list[dict]) -> dict:
    """Average the numeric fields of several METRICS.json objects (reruns of one source).

    Rates are mean values; counts (tp, fp, fn, support) are the mean rounded to a whole number;
    per-instance lists are left out (each run's own METRICS.json keeps them, in the runs table)."""
    if len(runs) == 1:
        return runs[0]

    def numeric(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if key == "classes":
            continue
        vals = [r.get(key) for r in runs]
        out[key] = statistics.fmean(vals) if all(numeric(v) for v in vals) else value
    classes: dict[str, dict] = {}
    for name, first in runs[0].get("classes", {}).items():
        row: dict[str, Any] = {}
        for k in first:
            if isinstance(first[k], list):
                continue  # per-instance lists ("found") belong to one run: each run keeps its own
            vals = [r.get("classes", {}).get(name, {}).get(k) for r in runs]
            nums = [v for v in vals if numeric(v)]
            if len(nums) != len(vals) or not nums:
                row[k] = first[k]
            elif all(isinstance(v, int) for v in nums):  # counts (tp, fp, fn, support) stay whole numbers
                row[k] = round(statistics.fmean(nums))
            else:
                row[k] = statistics.fmean(nums)
        classes[name] = row
    out["classes"] = classes
    out["runs"] = len(runs)
    return out


# ---------------------------------------------------------------------- one measurement
def measure(ctx: Context, w: Worker, exp_id: int, role: str, seed: int, budget: float | None = None,
            checkout: Path | None = None) -> Measurement:
    """Train and evaluate the checkout's train.py once."""
    ck = checkout or w.wt.path
    budget = float(budget or ctx.tag.wall_seconds(ctx.cfg.loop.budget_seconds))
    rd = ctx.tag.runs_dir(exp_id, role, seed)
    (rd / "out").mkdir()
    threads = ctx.night.run_threads()  # [loop] seed_jobs > 1: training and its evaluation on the run's share of cores
    m = train(ctx, w, exp_id, role, seed, budget, ck, rd, threads)
    return evaluate(ctx, w, exp_id, role, m, budget, ck, threads) if m.measured else m


def startup_watch(sink: Callable[[str], None]) -> tuple[Callable[[str], None], list[str]]:
    """A line sink that passes every line on to ``sink`` and notes the harness's clock (ISO) when the
    first :data:`STARTUP_MARK` line arrives: the run's training started then."""
    seen: list[str] = []

    def on_line(line: str) -> None:
        if not seen and STARTUP_MARK in line:
            seen.append(now_iso())
        sink(line)

    return on_line, seen


def startup_from_json(started: str | None, train_json: dict | None) -> str | None:
    """Training's start from train.py's own ``startup_seconds`` after the launch (a fallback, when the
    executor delivered no line as it came: its clock starts after the sandbox's, so it reads a little low)."""
    s = (train_json or {}).get("startup_seconds")
    if started is None or not isinstance(s, (int, float)) or isinstance(s, bool) or not s >= 0:
        return None
    return (datetime.fromisoformat(started) + timedelta(seconds=float(s))).isoformat(timespec="milliseconds")


def train(ctx: Context, w: Worker, exp_id: int, role: str, seed: int, budget: float, ck: Path,
          rd: Path, threads: int = 0, alone: bool = False) -> Measurement:
    """The training run and the evidence it left: a Measurement still PENDING when it trained. A run that ran out
    of memory on a GPU it shared trains again with the GPU whole (``alone``; :func:`_alone`)."""
    out = rd / "out"
    max_steps = ctx.tag.max_steps()
    on_line, first_step = startup_watch(ctx.display.log_line)

    def announce() -> None:
        ctx.store.set_phase(exp_id, f"train ({role}, seed {seed})")
        ctx.display.set_phase(exp_id, f"{ctx.night.wlabel(w)}train {role} seed={seed}", budget)

    tr, started, peers = _in_slot(ctx, w, ctx.train_job(w, ck, rd, seed, budget, threads), on_line, announce, alone)
    m = Measurement(seed=seed, train=tr, train_seconds=tr.seconds, run_dir=rd, started_at=started,
                    train_started_at=first_step[0] if first_step else None, train_ended_at=now_iso())
    if not tr.started and not ctx.night.cancel.is_set():  # a run before it was not ok: this one never ran
        trees.remove_tree(rd)
        raise NotStarted(f"seed {seed}")
    if tr.cancelled or not tr.started or ctx.night.cancel.is_set():
        return m.ended(Outcome.INTERRUPTED, "the daemon was stopped during training")
    after = integrity(ctx, "during the training run", ck, w.executor)
    if not after.ok:
        return m.ended(Outcome.ERROR, *after.blocking)
    hit = None if tr.clean_exit else limit_hit(tr)
    if hit:  # memory, processes, tmpfs, its quota, a disk it filled: its crash; its out/ goes (issue 39)
        left = trees.remove_tree(out)  # iterative, links not followed: a tree of its making (issue 48)
        m.signature = core_failure.signature_of(f"run limit: {hit}")
        return m.ended(Outcome.CRASH, hit, *([f"its out/ was not removed entirely: {left}"] if left else []))
    if tr.gpu.get("lost"):
        lost = f"GPU lost during the run: {tr.gpu.get('lost_reason', 'NVML error')}"
        return _proven(ctx, w, exp_id, role, m.ended(Outcome.ERROR, lost), None)
    if not tr.clean_exit:
        m = classify_failed(ctx, w, m, tr, exp_id, role)
        then = (core_slots.after_failure(m.failure_kind, w.device, peers, role) if m.outcome is Outcome.CRASH
                else core_slots.AS_IT_FAILED)
        if then == core_slots.NIGHT_TOO_LARGE:  # the warm-up's and the fit run's copies: the night's load
            m.blocking[:1] = [f"{m.blocking[0] if m.blocking else 'out of memory'} (beside {_others(peers)} on "
                              f"GPU {w.device}: the runs the night trains at "
                              "once do not fit its memory; lower loop.seed_jobs or loop.workers)"]
        elif then == core_slots.ALONE:
            return _alone(ctx, w, exp_id, role, seed, budget, ck, rd, threads, m, peers)
        return m
    m.train_json, refused = _read_json(ctx, out / "train.json")
    if refused:  # too large, too deep, or a link: the change's crash, naming the limit or the link
        why = "over [limits]" if "[limits]" in refused else "a symbolic link"
        m.signature = core_failure.signature_of(f"train.json refused: {why}")
        return m.ended(Outcome.CRASH, refused)
    lied = core_budget.steps_disagree(m.train_json, core_budget.log_steps(tr.log_tail))
    if lied:  # train.json says one step count, its own log another: the change's crash
        m.signature = core_failure.signature_of("steps: train.json disagrees with the log")
        return m.ended(Outcome.CRASH, lied)
    weights = out / "weights.pt"
    tv = core_evidence.judge_training(core_evidence.TrainEvidence(
        exit_code=tr.exit_code or 0, weights_bytes=weights.stat().st_size if weights.is_file() else None,
        train_json=m.train_json))
    if not tv.ok:
        return m.ended(Outcome.VACUOUS if core_evidence.is_vacuous(tv) else Outcome.ERROR, *tv.blocking)
    overran = core_budget.overran(m.train_json, max_steps)
    if overran:  # the change dropped the step budget: a crash of the change, not a score
        m.signature = core_failure.signature_of("step budget ignored: trained more steps than LOOPER_MAX_STEPS")
        return m.ended(Outcome.CRASH, overran)
    m.cut_short = core_budget.cut_short(m.train_json, max_steps)
    m.train_started_at = m.train_started_at or startup_from_json(started, m.train_json)
    return m


def _in_slot(ctx: Context, w: Worker, job: TrainJob, on_line: Callable[[str], None],
             announce: Callable[[], None], alone: bool = False) -> tuple[RunResult, str, int]:
    """The executor's training run, in its training slot where runs go side by side (looper.night.slots), and
    the run's start on the harness's clock: when its slot was given (its wait is not its start-up). A
    prestarting executor starts the run's box first and waits for the slot itself (``job.gate``); another is
    started once the slot is given. ``announce`` (the run's phase) is called as its training starts. On a GPU
    the run trains holding a share of it, or with ``alone`` the GPU whole (looper.night.gpushare); the third
    value: the most runs that trained on its GPU at once while it did, itself included (1 on the CPU)."""
    slot, gpu, holds = current_slot(), ctx.night.gpu_share(w), []

    def hold() -> None:
        if gpu is not None:
            holds.append(gpu.take(alone, ctx.night.cancel.is_set))

    def given() -> bool:
        return bool(slot is not None and slot.take()) and (hold() or announce() or True)

    if slot is None:
        hold()
        announce()
    launched = now_iso()
    try:
        if slot is not None and not w.executor.prestarts:
            tr = w.executor.train(job, on_line, ctx.night.cancel) if given() else RunResult(None, started=False)
        else:
            tr = w.executor.train(dataclasses.replace(job, gate=given if slot is not None else None), on_line,
                                  ctx.night.cancel)
    except BaseException:
        if slot is not None:
            slot.give_back()
        raise
    finally:
        for h in holds:
            gpu.leave(h)  # type: ignore[union-attr]
    if slot is not None and tr.clean_exit:
        slot.give_back()  # trained: the slot is the next run's while this one is evaluated; a failure keeps it
        # until it is judged: the look stops before a run waiting for it starts (looper.night.slots)
    return tr, (slot.taken_at if slot is not None and slot.taken_at else launched), max((h.peers for h in holds), default=1)


def _alone(ctx: Context, w: Worker, exp_id: int, role: str, seed: int, budget: float, ck: Path, rd: Path,
           threads: int, shared: Measurement, peers: int) -> Measurement:
    """A run that ran out of memory on a GPU ``peers`` runs trained on at once, trained again with the GPU whole
    (looper.core.run.slots.after_failure): its verdict is then its own, not its neighbours'. Its first try's folder
    is kept beside it (``shared-oom-<run>``) and its seconds counted in the run's ``train_seconds`` (the night's and
    the candidate's cost); the journal and the screen say so. Out of memory alone too: its crash,
    saying so."""
    aside = rd.with_name(f"shared-oom-{rd.name}")  # not a run's name: never the experiment's weights or matches
    if os.path.lexists(aside):
        trees.remove_tree(aside)
    os.rename(rd, aside)
    (rd / "out").mkdir(parents=True)
    said = (f"{core_slots.SHARED_OOM_NOTE}{ctx.night.wlabel(w)}seed {seed} ran out of memory on GPU {w.device} beside "
            f"{_others(peers)} training on it: trained again with the GPU to itself "
            f"(its first try in {aside.name}): {shared.blocking[0] if shared.blocking else 'out of memory'}")
    ctx.journal.event("note", said, exp_id, {"seed": seed, "role": role, "peers": peers})
    ctx.display.note(said)
    m = train(ctx, w, exp_id, role, seed, budget, ck, rd, threads, alone=True)
    m.train_seconds += shared.train_seconds  # the GPU time the first try took is the run's cost too
    if m.outcome is Outcome.CRASH and m.failure_kind == "oom" and m.blocking:
        m.blocking[0] += f" (with GPU {w.device} to itself as well, after it ran out of memory beside {peers - 1})"
    return m


def _others(peers: int) -> str:
    """The runs beside one of ``peers`` on a GPU, in words: "1 other run", "3 other runs"."""
    return f"{peers - 1} other run{'s' if peers > 2 else ''}"


def limit_hit(tr: RunResult) -> str | None:
    """The run limit (looper.executors.limits) a failed run hit, in words naming it; None when none. Only what the
    harness saw itself counts where it applied the limits (a local run); elsewhere its stop and log alone."""
    from looper.executors import limits

    seen = core_limits.Seen(**tr.seen) if tr.seen else core_limits.Seen(
        stopped=tr.limit, log_full="No space left" in tr.log_error)
    caps = core_limits.Caps(**tr.caps) if tr.caps else limits.current().caps if tr.seen else core_limits.Caps()
    return core_limits.limit_hit(caps, seen, tr.log_tail)


def weights_sha256(m: Measurement) -> str | None:
    """The sha256 of the weights a run left (None when there is no plain file to hash): the seed
    check compares them across a candidate's seeds (:mod:`looper.core.fault.seeds`)."""
    weights = m.run_dir / "out" / "weights.pt" if m.run_dir is not None else None
    if weights is None or weights.is_symlink() or not weights.is_file():
        return None
    return file_sha256(weights)


def _read_json(ctx: Context, path: Path) -> tuple[dict | None, str | None]:
    """(the parsed file or None when missing/unreadable, why it was refused over a [limits] bound)."""
    from looper.night.guard import read_json

    lim = ctx.cfg.limits
    value, problem = read_json(path, lim.json_max_bytes, lim.json_max_depth)
    if problem and ("[limits]" in problem or "symbolic link" in problem):
        return None, problem
    return value, None


def evaluate(ctx: Context, w: Worker, exp_id: int, role: str, m: Measurement, budget: float,
             ck: Path, threads: int = 0, alone: bool = False) -> Measurement:
    """Evaluate the trained weights; the old metrics file is deleted by the executor before the run. On a GPU the
    evaluation holds a share of it (looper.night.gpushare); out of memory beside other runs, it is evaluated again
    with the GPU to itself (``alone``), its first try's log kept as ``shared-oom-eval.log`` and its seconds counted in the run's ``eval_seconds``."""
    assert m.run_dir is not None
    rd, seed = m.run_dir, m.seed
    metrics_path = rd / "METRICS.json"
    (rd / "MATCHES.json").unlink(missing_ok=True)  # the report reads only matched boxes this run wrote
    ctx.store.set_phase(exp_id, f"evaluate ({role}, seed {seed})")
    ctx.display.set_phase(exp_id, f"{ctx.night.wlabel(w)}evaluate {role} seed={seed}")
    limit = eval_limit(ctx, role)  # a candidate's evaluation far longer than the best's: its crash
    gpu = ctx.night.gpu_share(w)
    hold = None if gpu is None else gpu.take(alone, ctx.night.cancel.is_set)
    try:
        ev = w.executor.evaluate(
            EvalJob(checkout=ck, weights=rd / "out" / "weights.pt", metrics_path=metrics_path,
                    log_path=rd / "eval.log", timeout_seconds=limit or max(600.0, 2 * budget),
                    stall_seconds=max(float(ctx.cfg.loop.stall_seconds), (limit or 0.0) + 5.0), device=w.device,
                    threads=threads, prestart=ctx.prestarting(w)),
            ctx.display.log_line, ctx.night.cancel)
    finally:
        if gpu is not None and hold is not None:
            gpu.leave(hold)
    m.eval, m.eval_seconds, m.eval_ended_at = ev, ev.seconds, now_iso()
    if ev.cancelled or ctx.night.cancel.is_set():
        return m.ended(Outcome.INTERRUPTED, "the daemon was stopped during evaluation")
    if ev.exit_code == WEIGHTS_REFUSED_EXIT and not (ev.transport_error or ev.timed_out or ev.stalled):
        # evaluate.py (the harness's copy) refused what train.py handed over: the change broke the contract
        last = (ev.log_tail.strip().splitlines()[-1:] or ["weights refused"])[0][:200]
        m.signature = core_failure.signature_of("weights refused: the weights train.py wrote are not data")
        return m.ended(Outcome.CRASH, f"the weights train.py wrote are not data: {last}")
    if limit and ev.timed_out and not ev.transport_error:
        m.signature = core_failure.signature_of("evaluation too slow: past the limit set by the best's")
        return m.ended(Outcome.CRASH, f"evaluation ran past {limit:.0f} s ([limits] eval_time_factor "
                                      f"{ctx.cfg.limits.eval_time_factor:g} x the best's {best_eval_seconds(ctx) or 0:.1f} s "
                                      f"+ eval_time_floor {ctx.cfg.limits.eval_time_floor} s) and was stopped: "
                                      "the change's model is too slow to evaluate")
    peers = hold.peers if hold is not None else 1
    if not (ev.clean_exit or ev.transport_error or ev.timed_out or ev.stalled) and core_slots.after_failure(
            "oom" if core_failure.out_of_memory(ev.log_tail) else "", w.device, peers, role) == core_slots.ALONE:
        if (rd / "eval.log").is_file():
            os.replace(rd / "eval.log", rd / "shared-oom-eval.log")
        said = (f"{core_slots.SHARED_OOM_NOTE}{ctx.night.wlabel(w)}seed {seed}'s evaluation ran out of memory on GPU "
                f"{w.device} beside {_others(peers)} on it: evaluated again with the "
                "GPU to itself (its first try's log in shared-oom-eval.log)")
        ctx.journal.event("note", said, exp_id, {"seed": seed, "role": role, "peers": peers, "evaluation": True})
        ctx.display.note(said)
        first = m.eval_seconds
        m = evaluate(ctx, w, exp_id, role, m, budget, ck, threads, alone=True)
        m.eval_seconds += first  # the first try's seconds are the run's cost too
        return m
    if not ev.clean_exit:
        last = ev.log_tail.strip().splitlines()[-1:] or ["(no output)"]
        code = ev.exit_code if ev.exit_code is not None else "by signal " + str(ev.signal)
        why = ("evaluation timed out" if ev.timed_out else "evaluation hung" if ev.stalled
               else f"evaluate.py exited {code}")
        m.signature = core_failure.signature_of(f"{why}: {last[0][:200]}")
        m.ended(Outcome.ERROR, f"{why}: {last[0][:200]}", *([ev.transport_error] if ev.transport_error else []))
        return _proven(ctx, w, exp_id, role, m, lambda: eval_canary(ctx, w, exp_id, ck, seed), EVAL_CANARY)
    if not metrics_path.is_file():
        return m.ended(Outcome.ERROR, "the evaluator exited 0 but wrote no METRICS.json")
    after = integrity(ctx, "during the evaluation", ck, w.executor, runtime=False)  # pinned just before it
    if not after.ok:
        return m.ended(Outcome.ERROR, *after.blocking)
    metrics, refused = _read_json(ctx, metrics_path)
    if refused:  # too large or too deep to read: the change's crash, naming the limit
        m.signature = core_failure.signature_of("METRICS.json refused: over [limits]")
        return m.ended(Outcome.CRASH, refused)
    try:
        metrics = json.loads(metrics_path.read_text()) if metrics is None else metrics
    except ValueError as exc:
        return m.ended(Outcome.ERROR, f"METRICS.json is not valid JSON: {exc}")
    forged = recount_problem(ctx, metrics, rd / "MATCHES.json")
    if forged:  # METRICS.json says what its own evidence does not: a harness error, never a score
        return m.ended(Outcome.ERROR, forged)
    mv = core_evidence.judge_metrics(metrics, ctx.cfg.gate.score)
    if not mv.ok:
        return m.ended(Outcome.VACUOUS if core_evidence.is_vacuous(mv) else Outcome.ERROR, *mv.blocking)
    m.metrics = metrics
    return m


MATCHES_BYTES_FACTOR = 8  # MATCHES.json lists every matched box: it may be this many times [limits] json_max_bytes


def recount_problem(ctx: Context, metrics: Any, matches_path: Path) -> str | None:
    """None when METRICS.json's counts, rates and score are what MATCHES.json (written before it by the
    same evaluation) implies (:mod:`looper.core.scoring.recount`); otherwise the harness error naming both files."""
    from looper.core.scoring.recount import disagreements
    from looper.night.guard import read_json

    lim = ctx.cfg.limits
    what = f"METRICS.json and MATCHES.json in {matches_path.parent}"
    if matches_path.is_symlink() or not matches_path.is_file():
        return (f"the evaluator wrote METRICS.json but no MATCHES.json beside it ({what}): its score cannot be "
                "recounted from its evidence, so it is refused")
    matches, problem = read_json(matches_path, MATCHES_BYTES_FACTOR * lim.json_max_bytes, lim.json_max_depth)
    if problem or matches is None:
        return f"MATCHES.json cannot be read to recount METRICS.json ({what}): {problem or 'not JSON'}"
    found = disagreements(metrics, matches)
    if not found:
        return None
    return (f"METRICS.json disagrees with MATCHES.json, the evidence it was computed from ({what}): "
            + "; ".join(found) + ". The score is refused: something rewrote one of them after evaluate.py "
            "wrote it (the runtime, the evaluator or the harness is not what was pinned)")


# ---------------------------------------------------------------------- a failed run
def classify_failed(ctx: Context, w: Worker, m: Measurement, tr: RunResult, exp_id: int,
                    role: str = "main") -> Measurement:
    """Crash (the change broke it) or error (the harness did), a canary deciding when unclear, and
    before any candidate's failure halts as a harness error (looper.core.fault.blame)."""
    data_dir = Path(ctx.cfg.data.dir)
    data_dir = data_dir if data_dir.is_absolute() else ctx.root / data_dir
    transport = tr.transport_exit_code
    if tr.transport_error and transport in (None, 0):
        transport = -1  # a transport fault in words, with no tool's exit code: still the harness

    def evidence(canary_failed: bool | None) -> core_failure.FailureEvidence:
        tail = tr.log_tail + (f"\n{tr.transport_error}" if tr.transport_error else "")
        return core_failure.FailureEvidence(
            exit_code=tr.exit_code, signal=tr.signal, timed_out=tr.timed_out, stalled=tr.stalled,
            log_tail=ctx.journal.redact(tail),  # reasons and signatures are built from this text
            transport_exit_code=transport, canary_failed=canary_failed, data_dir=str(data_dir))

    c = core_failure.classify_failure(evidence(None))
    ran: list[bool] = []
    if c.needs_canary:
        ran.append(canary(ctx, w, exp_id))
        c = core_failure.classify_failure(evidence(ran[0]))
    m.ended(Outcome.CRASH if c.outcome is Outcome.CRASH else Outcome.ERROR,
            c.reason, *([tr.transport_error] if tr.transport_error else []))
    m.signature, m.failure_kind = c.signature, c.kind
    if ran:  # the canary already answered: its verdict is in the classification
        return m
    return _proven(ctx, w, exp_id, role, m, None)


def _proven(ctx: Context, w: Worker, exp_id: int, role: str, m: Measurement, run_canary: Any,
            canary_name: str = TRAIN_CANARY) -> Measurement:
    """A candidate's ERROR stands only when its canary fails too (looper.core.fault.blame); when the canary
    runs cleanly it is the candidate's crash, with its signature. ``run_canary`` (None: the training
    canary) answers True (failed), False (ran cleanly) or None (no canary could run)."""
    if not core_blame.needs_canary(m.outcome, is_candidate(role)):
        return m
    failed = canary(ctx, w, exp_id) if run_canary is None else run_canary()
    first = m.blocking[0] if m.blocking else "the run failed"
    decided = core_blame.decide(Outcome.ERROR, first, failed, canary_name)
    m.ended(decided.outcome, decided.reason, *m.blocking[1:])
    if m.outcome is Outcome.CRASH and not m.signature:
        m.signature = core_failure.signature_of(first)
    return m
