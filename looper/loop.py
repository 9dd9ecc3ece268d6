"""The loop: one experiment at a time, each step a check with a verdict.

preflight -> agent proposes -> scope check -> commit on looper/<tag> -> train under the
budget -> integrity check -> evaluate (old metrics deleted first) -> gate -> keep or reset
-> record. Errors halt the loop and page a person; a stuck loop halts too.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from looper.adapters.executors import EvalJob, Executor, RunResult, TrainJob
from looper.adapters.executors.base import FIXED_FILES
from looper.adapters.gitops import Workspace, Worktree
from looper.adapters.notify import Notifier, redact
from looper.config import Config
from looper.core import evidence as core_evidence
from looper.core import failure as core_failure
from looper.core import gate as core_gate
from looper.core.verdict import Outcome, Verdict
from looper.datahash import fixed_hashes
from looper.display import Display
from looper.errors import HarnessError, StuckError
from looper.store import Store

# Top-level modules train.py may import without being a "new third-party import".
DECLARED_MODULES = frozenset({
    "torch", "torchvision", "ultralytics", "numpy", "PIL", "cv2", "yaml", "looper", "sqlalchemy",
    "pydantic", "rich", "typer", "git", "apprise", "pynvml",
})


def now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def imports_of(source: str) -> set[str]:
    """Top-level module names a source imports (absolute imports only)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def new_third_party_imports(new: str, old: str) -> list[str]:
    stdlib = set(getattr(sys, "stdlib_module_names", ()))
    allowed = stdlib | DECLARED_MODULES | imports_of(old)
    return sorted(imports_of(new) - allowed)


def code_lines(source: str) -> int:
    return sum(1 for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("#"))


def mean_metrics(runs: list[dict]) -> dict:
    """Average the numeric fields of several METRICS.json objects (reruns of one source)."""
    if len(runs) == 1:
        return runs[0]
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if key == "classes":
            continue
        vals = [r.get(key) for r in runs]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            out[key] = statistics.fmean(vals)
        else:
            out[key] = value
    classes: dict[str, dict] = {}
    for name, first in runs[0].get("classes", {}).items():
        row: dict[str, Any] = {}
        for k in first:
            vals = [r.get("classes", {}).get(name, {}).get(k) for r in runs]
            nums = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
            row[k] = statistics.fmean(nums) if len(nums) == len(vals) and nums else first[k]
        classes[name] = row
    out["classes"] = classes
    out["runs"] = len(runs)
    return out


@dataclass
class Measurement:
    """One train + evaluate of one source with one seed."""

    kind: str  # "measured" | "vacuous" | "crash" | "error" | "interrupted"
    seed: int
    blocking: list[str] = field(default_factory=list)
    metrics: dict | None = None
    train_json: dict | None = None
    train: RunResult | None = None
    eval: RunResult | None = None
    signature: str | None = None
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    run_dir: Path | None = None

    @property
    def score_of(self) -> Any:
        return None


def fault_pause(point: str) -> None:
    """Fault-injection hook for the reliability tests: LOOPER_FAULT_PAUSE=<point>:<seconds>
    makes the daemon sleep at that point (so a test can kill it exactly there). Unset in
    normal use; it changes nothing else."""
    spec = os.environ.get("LOOPER_FAULT_PAUSE", "")
    if spec.startswith(point + ":"):
        print(f"[fault-injection] pausing at {point}", flush=True)
        time.sleep(float(spec.split(":", 1)[1]))


class Halt(Exception):
    """Internal: stop the night with an exit code after the experiment is recorded."""

    def __init__(self, error: HarnessError | StuckError) -> None:
        super().__init__(str(error))
        self.error = error


RACE_REASON = "conflicts with kept change"  # a raced candidate's idea is handed back, not excluded


@dataclass
class Worker:
    """One experiment slot: its checkout, where it runs, and on which device."""

    id: int
    wt: Worktree
    executor: Executor
    device: str
    detached: bool  # True with several workers: the branch moves only under the keep lock

    @property
    def label(self) -> str:
        return f"w{self.id}"


@dataclass
class NightStats:
    experiments: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)


class Loop:
    """One daemon's night on one workspace and tag."""

    def __init__(self, root: Path, cfg: Config, store: Store, executor: Executor, agent: Any,
                 notifier: Notifier, display: Display | None = None, secrets: list[str] | None = None,
                 program_md: str = "") -> None:
        self.root = Path(root)
        self.cfg = cfg
        self.store = store
        self.executor = executor
        self.agent = agent
        self.notifier = notifier
        self.display = display or Display()
        self.secrets = list(secrets or [])
        self.tag = cfg.loop.tag
        self.ws = Workspace(self.root)
        self.wt: Worktree | None = None
        self.cancel = threading.Event()
        self.stats = NightStats()
        self.program_md = program_md
        self.pinned: dict | None = None
        self.device = "cuda" if cfg.executor.require_gpu else "cpu"
        if hasattr(executor, "use_data"):
            executor.use_data(cfg.data.dir)
        self.workers: list[Worker] = []
        self.keep_lock = threading.RLock()  # branch tip, best and keep decisions move together
        self.agent_lock = threading.Lock()
        self.count_lock = threading.Lock()
        self.in_flight: dict[int, dict] = {}
        self.halt_error: HarnessError | StuckError | None = None
        self.exhausted = False
        self._noted: set[str] = set()

    # ------------------------------------------------------------------ plumbing
    def event(self, kind: str, message: str, experiment_id: int | None = None, data: dict | None = None) -> None:
        self.store.add_event(self.tag, kind, redact(message, self.secrets), experiment_id=experiment_id,
                             data=data)

    def runs_dir(self, exp_id: int, role: str, seed: int) -> Path:
        d = self.root / "runs" / self.tag / f"{exp_id:05d}" / f"{role}-s{seed}"
        if d.exists():
            import shutil

            shutil.rmtree(d)
        d.mkdir(parents=True)
        return d

    def install_signals(self) -> None:
        def handler(signum: int, _frame: Any) -> None:
            self.display.note(f"signal {signal.Signals(signum).name}: stopping after cleanup")
            self.cancel.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    # ------------------------------------------------------------------ the tag
    def setup(self) -> None:
        """Worktree, data, pinned hashes, recovery, and the tag's baseline."""
        self.wt = self.ws.ensure_worktree(self.tag)
        self.recover()
        v = self.executor.ensure_data(self.root / "prepare.py", self.cfg.data.dir, self.cfg.data.scale,
                                      self.cfg.data.seed)
        if not v.ok:
            raise HarnessError("data: " + "; ".join(v.blocking))
        tag_row = self.store.get_tag(self.tag)
        if tag_row is None:
            fixed = fixed_hashes(self.wt.path, FIXED_FILES)
            missing = [n for n, h in fixed.items() if h is None]
            if missing:
                raise HarnessError(f"fixed files missing in the workspace: {', '.join(missing)}")
            self.store.put_tag(self.tag, branch=self.wt.branch, base_commit=self.wt.head(),
                               fixed_hashes=fixed, data_hash=v.metrics["hash"], noise=None,
                               started_at=now_iso())
            self.event("baseline", f"tag {self.tag} started at {self.wt.head()[:10]}; "
                                   f"data hash {v.metrics['hash'][:12]}")
            tag_row = self.store.get_tag(self.tag)
        self.pinned = tag_row
        main = Worker(0, self.wt, self.executor, self.device, detached=False)
        if not self.store.experiments(tag=self.tag, kind="baseline", status=Outcome.KEEP.value):
            pre = self.preflight(main)  # nothing trains, not even the baseline, on a broken harness
            if not pre.ok:
                raise HarnessError("preflight failed before the baseline: " + "; ".join(pre.blocking))
            self.measure_baseline(main)
        n = self.cfg.loop.workers
        if n == 1:
            self.workers = [main]
        else:
            gpu = self.cfg.executor.require_gpu
            self.workers = [Worker(i, self.ws.ensure_detached_worktree(self.tag, i, self.wt.head()), self.executor,
                                   str(self.cfg.executor.gpu_index + i) if gpu else "cpu", detached=True)
                            for i in range(n)]

    def recover(self) -> None:
        """A row left `running` by a killed daemon is interrupted; the checkout goes back."""
        assert self.wt is not None
        for row in self.store.running_experiments():
            self.store.mark_interrupted(row["id"], "the daemon stopped or died mid-experiment")
            self.event("recover", f"experiment #{row['id']} was left running "
                                  f"(phase {row.get('phase') or '?'}): marked interrupted", row["id"])
            self.display.note(f"recovered: #{row['id']} marked interrupted")
        for line in self.executor.reap():
            self.event("recover", line)
        self.restore_last_kept()

    def last_kept_commit(self) -> str | None:
        rows = self.store.experiments(tag=self.tag, status=Outcome.KEEP.value)
        rows = [r for r in rows if r.get("commit")]
        return rows[-1]["commit"] if rows else None

    def restore_last_kept(self) -> None:
        assert self.wt is not None
        kept = self.last_kept_commit()
        head = self.wt.head()
        if kept and head != kept:
            self.wt.save_ref(f"refs/looper/orphaned/{head}", head)
            self.wt.reset_hard(kept)
            self.event("recover", f"checkout restored to last kept commit {kept[:10]} (was {head[:10]})")
        elif not self.wt.is_clean():
            self.wt.reset_hard(head)
            self.event("recover", f"uncommitted changes in the checkout were reset to {head[:10]}")

    # ------------------------------------------------------------------ integrity
    def integrity(self, when: str, folder: Path | None = None, executor: Executor | None = None) -> Verdict:
        """Fixed files and data exactly as pinned when the tag began."""
        assert self.wt is not None and self.pinned is not None
        problems: list[str] = []
        now = fixed_hashes(folder or self.wt.path, FIXED_FILES)
        for name, h in (self.pinned.get("fixed_hashes") or {}).items():
            if now.get(name) != h:
                problems.append(f"fixed file {name} changed {when} (expected sha256 {str(h)[:12]}, "
                                f"found {str(now.get(name))[:12]})")
        v = (executor or self.executor).data_hash(self.cfg.data.dir)
        if not v.ok:
            problems.extend(v.blocking)
        elif v.metrics.get("hash") != self.pinned.get("data_hash"):
            problems.append(f"data in {self.cfg.data.dir} changed {when} (manifest/tree hash "
                            f"{v.metrics.get('hash', '')[:12]} != pinned {str(self.pinned.get('data_hash'))[:12]})")
        return Verdict.errored(*problems) if problems else Verdict.passed({"checked": when})

    def preflight(self, w: Worker) -> Verdict:
        parts = {"executor": w.executor.preflight(self.cfg.executor.require_gpu),
                 "integrity": self.integrity("since the tag began", w.wt.path, w.executor)}
        dirty = [c.path for c in w.wt.changes()]
        parts["checkout"] = (Verdict.errored(f"checkout not clean: {', '.join(dirty[:5])}") if dirty
                             else Verdict.passed())
        problems = [f"{k}: {b}" for k, v in parts.items() for b in v.blocking]
        metrics = {k: v.status.value for k, v in parts.items()}
        return Verdict.errored(*problems, metrics=metrics) if problems else Verdict.passed(metrics)

    # ------------------------------------------------------------------ measuring
    def measure(self, w: Worker, exp_id: int, role: str, seed: int, budget: float | None = None,
                checkout: Path | None = None) -> Measurement:
        """Train and evaluate the checkout's train.py once."""
        ck = checkout or w.wt.path
        budget = float(budget or self.cfg.loop.budget_seconds)
        rd = self.runs_dir(exp_id, role, seed)
        out = rd / "out"
        out.mkdir()
        self.store.set_phase(exp_id, f"train ({role}, seed {seed})")
        self.display.set_phase(exp_id, f"{self.wlabel(w)}train {role} seed={seed}", budget)
        tr = w.executor.train(
            TrainJob(checkout=ck, out_dir=out, seed=seed, budget_seconds=budget,
                     grace_seconds=self.cfg.loop.grace_seconds, stall_seconds=self.cfg.loop.stall_seconds,
                     log_path=rd / "train.log", device=w.device),
            self.display.log_line, self.cancel)
        m = Measurement(kind="measured", seed=seed, train=tr, train_seconds=tr.seconds, run_dir=rd)
        if tr.cancelled or self.cancel.is_set():
            m.kind = "interrupted"
            m.blocking = ["the daemon was stopped during training"]
            return m
        after = self.integrity("during the training run", ck, w.executor)
        if not after.ok:
            m.kind, m.blocking = "error", list(after.blocking)
            return m
        if tr.gpu.get("lost"):
            m.kind, m.blocking = "error", [f"GPU lost during the run: {tr.gpu.get('lost_reason', 'NVML error')}"]
            return m
        if not tr.clean_exit:
            self.classify_failed(w, m, tr, exp_id)
            return m
        train_json = None
        tj = out / "train.json"
        if tj.is_file():
            try:
                train_json = json.loads(tj.read_text())
            except ValueError:
                train_json = None
        m.train_json = train_json
        weights = out / "weights.pt"
        tv = core_evidence.judge_training(core_evidence.TrainEvidence(
            exit_code=tr.exit_code or 0, weights_bytes=weights.stat().st_size if weights.is_file() else None,
            train_json=train_json))
        if not tv.ok:
            m.kind = "vacuous" if core_evidence.is_vacuous(tv) else "error"
            m.blocking = list(tv.blocking)
            return m
        # evaluate: the old metrics file is deleted by the executor before the run
        metrics_path = rd / "METRICS.json"
        self.store.set_phase(exp_id, f"evaluate ({role}, seed {seed})")
        self.display.set_phase(exp_id, f"{self.wlabel(w)}evaluate {role} seed={seed}")
        ev = w.executor.evaluate(
            EvalJob(checkout=ck, weights=weights, metrics_path=metrics_path, log_path=rd / "eval.log",
                    timeout_seconds=max(600.0, 2 * budget), stall_seconds=self.cfg.loop.stall_seconds,
                    device=w.device),
            self.display.log_line, self.cancel)
        m.eval, m.eval_seconds = ev, ev.seconds
        if ev.cancelled or self.cancel.is_set():
            m.kind, m.blocking = "interrupted", ["the daemon was stopped during evaluation"]
            return m
        if not ev.clean_exit:
            last = ev.log_tail.strip().splitlines()[-1:] or ["(no output)"]
            why = ("evaluation timed out" if ev.timed_out else "evaluation hung" if ev.stalled
                   else f"evaluate.py exited {ev.exit_code if ev.exit_code is not None else 'by signal ' + str(ev.signal)}")
            m.kind, m.blocking = "error", [f"{why}: {last[0][:200]}"]
            if ev.transport_error:
                m.blocking.append(ev.transport_error)
            return m
        if not metrics_path.is_file():
            m.kind, m.blocking = "error", ["the evaluator exited 0 but wrote no METRICS.json"]
            return m
        after = self.integrity("during the evaluation", ck, w.executor)
        if not after.ok:
            m.kind, m.blocking = "error", list(after.blocking)
            return m
        try:
            metrics = json.loads(metrics_path.read_text())
        except ValueError as exc:
            m.kind, m.blocking = "error", [f"METRICS.json is not valid JSON: {exc}"]
            return m
        mv = core_evidence.judge_metrics(metrics, self.cfg.gate.score)
        if not mv.ok:
            m.kind = "vacuous" if core_evidence.is_vacuous(mv) else "error"
            m.blocking = list(mv.blocking)
            return m
        m.metrics = metrics
        return m

    def classify_failed(self, w: Worker, m: Measurement, tr: RunResult, exp_id: int,
                        allow_canary: bool = True) -> None:
        data_dir = Path(self.cfg.data.dir)
        data_dir = data_dir if data_dir.is_absolute() else self.root / data_dir

        transport = tr.transport_exit_code
        if tr.transport_error and transport in (None, 0):
            transport = -1  # a transport fault in words, with no tool's exit code: still the harness

        def evidence(canary_failed: bool | None) -> core_failure.FailureEvidence:
            tail = tr.log_tail + (f"\n{tr.transport_error}" if tr.transport_error else "")
            tail = redact(tail, self.secrets)  # reasons and signatures are built from this text
            return core_failure.FailureEvidence(
                exit_code=tr.exit_code, signal=tr.signal, timed_out=tr.timed_out, stalled=tr.stalled,
                log_tail=tail, transport_exit_code=transport, canary_failed=canary_failed,
                data_dir=str(data_dir))

        c = core_failure.classify_failure(evidence(None))
        if c.needs_canary and allow_canary:
            c = core_failure.classify_failure(evidence(self.canary(w, exp_id)))
        m.kind = "crash" if c.outcome is Outcome.CRASH else "error"
        m.blocking = [c.reason] + ([tr.transport_error] if tr.transport_error else [])
        m.signature = c.signature

    def canary(self, w: Worker, exp_id: int) -> bool:
        """Rerun the last kept train.py briefly in a scratch folder: did it fail too?"""
        assert self.wt is not None
        kept = self.last_kept_commit()
        if kept is None:
            return True
        budget = float(min(self.cfg.loop.budget_seconds, 60))
        self.display.set_phase(exp_id, "canary (last kept train.py)", budget)
        import shutil
        import tempfile

        scratch = Path(tempfile.mkdtemp(prefix="looper-canary-", dir=self.root / ".looper"))
        try:
            for name in ("train.py", *FIXED_FILES):
                (scratch / name).write_text(self.wt.show(kept, name))
            rd = self.runs_dir(exp_id, "canary", self.cfg.data.seed)
            tr = w.executor.train(
                TrainJob(checkout=scratch, out_dir=rd / "out", seed=self.cfg.data.seed, budget_seconds=budget,
                         grace_seconds=self.cfg.loop.grace_seconds, stall_seconds=self.cfg.loop.stall_seconds,
                         log_path=rd / "train.log", device=w.device),
                self.display.log_line, self.cancel)
            failed = not tr.clean_exit and not tr.cancelled
            self.event("note", f"canary of kept {kept[:10]}: {'FAILED' if failed else 'ok'}", exp_id)
            return failed
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    # ------------------------------------------------------------------ baseline
    def measure_baseline(self, w: Worker) -> None:
        assert self.wt is not None
        seeds = [self.cfg.data.seed + i for i in range(self.cfg.loop.noise_reruns + 1)]
        source = (self.wt.path / "train.py").read_text()
        exp_id = self.store.create_experiment(
            self.tag, "baseline", parent=None, seed=seeds[0], config=self.cfg.redacted_dict(),
            description="baseline: the train.py the tag started from", source=source, diff="")
        self.store.update_experiment(exp_id, commit=self.wt.head(), started_at=now_iso())
        self.display.note(f"measuring the baseline with {len(seeds)} seed(s) to learn the noise")
        results = []
        for seed in seeds:
            m = self.measure(w, exp_id, "baseline", seed)
            self.record_run(exp_id, "main", m)
            if m.kind == "interrupted":
                self.store.mark_interrupted(exp_id, "stopped while measuring the baseline")
                return
            if m.kind != "measured":
                status = Outcome.ERROR
                self.store.finish_experiment(exp_id, status, None, None, None, None,
                                             [f"baseline seed {seed}: {b}" for b in m.blocking],
                                             finished_at=now_iso(), failure_signature=m.signature)
                raise Halt(HarnessError(
                    f"the baseline train.py could not produce a result (seed {seed}, {m.kind}): "
                    + "; ".join(m.blocking)))
            results.append(m)
        scores = [float(r.metrics[self.cfg.gate.score]) for r in results]
        sigma = statistics.stdev(scores) if len(scores) > 1 else None
        metrics = mean_metrics([r.metrics for r in results])
        metrics["seed_scores"] = scores
        self.store.set_tag_noise(self.tag, {"sigma": sigma, "scores": scores, "seeds": seeds})
        self.pinned = self.store.get_tag(self.tag)
        verdict = Verdict.passed({"score": statistics.fmean(scores), "noise_sigma": sigma, "seeds": seeds})
        self.store.finish_experiment(exp_id, Outcome.KEEP, statistics.fmean(scores), metrics,
                                     metrics.get("classes"), verdict.to_json_dict(), [],
                                     finished_at=now_iso(),
                                     train_seconds=sum(r.train_seconds for r in results),
                                     eval_seconds=sum(r.eval_seconds for r in results))
        dead = core_gate.dead_gates(metrics, self.cfg.gate.max_class_drop)
        self.event("baseline", f"baseline #{exp_id}: {self.cfg.gate.score} mean {statistics.fmean(scores):.4f} "
                               f"over seeds {seeds}, sigma {sigma if sigma is None else round(sigma, 4)}; "
                               f"{len(dead)} dead gate(s)", exp_id, {"dead_gates": dead})
        self.display.outcome(exp_id, "baseline", statistics.fmean(scores), f"sigma={sigma}", statistics.fmean(scores))

    def record_run(self, exp_id: int, role: str, m: Measurement) -> None:
        score = None
        if m.metrics is not None:
            score = m.metrics.get(self.cfg.gate.score)
        tail = (m.train.log_tail if m.train else "")[-4000:]
        self.store.add_run(exp_id, role=role, seed=m.seed,
                           exit_code=m.train.exit_code if m.train else None, score=score,
                           metrics=m.metrics, train=m.train_json, log_tail=redact(tail, self.secrets),
                           started_at=None, finished_at=now_iso())

    # ------------------------------------------------------------------ gating inputs
    def approved_baseline(self) -> tuple[str, dict] | None:
        from looper.baselines import newest_baseline

        found = newest_baseline(self.root / "baselines")
        if found is None:
            return None
        name, data = found
        return f"approved:{name}", data["metrics"]

    def best(self) -> dict:
        best = self.store.best_experiment(self.tag)
        if best is None:
            raise HarnessError(f"tag {self.tag} has no baseline or kept experiment to compare against")
        return best

    def best_runs(self, best: dict) -> list[dict]:
        runs = [r["metrics"] for r in self.store.runs(best["id"]) if r.get("metrics")]
        return runs or [best["metrics"]]

    def gate_input(self, candidate: list[dict], simpler: bool,
                   best: dict | None = None) -> tuple[core_gate.GateInput, dict]:
        best = best or self.best()
        approved = self.approved_baseline()
        if approved:
            source, baseline = approved
        else:
            base_rows = self.store.experiments(tag=self.tag, kind="baseline", status=Outcome.KEEP.value)
            source, baseline = "tag-start", base_rows[-1]["metrics"]
        noise = (self.pinned or {}).get("noise") or {}
        inp = core_gate.GateInput(candidate=candidate, best=self.best_runs(best), baseline=baseline,
                                  baseline_source=source, noise_sigma=noise.get("sigma"),
                                  candidate_simpler=simpler)
        return inp, best

    # ------------------------------------------------------------------ one experiment
    def wlabel(self, w: Worker) -> str:
        return f"[{w.label}] " if len(self.workers) > 1 else ""

    def branch_tip(self) -> str:
        return self.ws.repo.git.rev_parse(f"refs/heads/{self.wt.branch}").strip()

    def advance_branch(self, w: Worker, commit: str, expected: str) -> None:
        """Move looper/<tag> to a kept commit (under keep_lock)."""
        if not w.detached:
            return  # the commit was made on the branch itself
        self.ws.repo.git.update_ref(f"refs/heads/{self.wt.branch}", commit, expected)
        self.wt.reset_hard(commit)  # keep the branch's own worktree in step

    def propose(self, w: Worker, parent_source: str) -> tuple[Any, str | None, float]:
        """Ask the agent; returns (proposal or None, rejection reason, seconds)."""
        from looper.adapters.agents.base import ProposalRejected
        from looper.core.hyperblock import HyperblockError, read_knobs

        ta = time.monotonic()
        serial = getattr(self.agent, "name", "") == "planner" or len(self.workers) == 1
        lock = self.agent_lock if serial else threading.Lock()
        with lock:
            try:
                proposal = self.agent.propose(self.agent_context(parent_source, w))
                rejected = None
            except ProposalRejected as exc:
                proposal, rejected = None, str(exc)
            if proposal is not None and not getattr(proposal, "exhausted", False):
                source = proposal.new_source if proposal.new_source is not None else \
                    (w.wt.path / "train.py").read_text()
                try:
                    self.in_flight[w.id] = read_knobs(source)
                except (HyperblockError, SyntaxError, ValueError):
                    self.in_flight[w.id] = {}
        return proposal, rejected, time.monotonic() - ta

    def run_one(self, w: Worker | None = None) -> Outcome | None:
        """Run one experiment. Returns its outcome, or None when the agent has run out of ideas."""
        w = w or self.workers[0]
        try:
            return self._run_one(w)
        finally:
            self.in_flight.pop(w.id, None)

    def _run_one(self, w: Worker) -> Outcome | None:
        t0 = time.monotonic()
        started_at = now_iso()
        with self.keep_lock:
            if w.detached:
                w.wt.reset_hard(self.branch_tip())
            parent = w.wt.head()
            best_then = self.best()
        parent_source = (w.wt.path / "train.py").read_text()
        pre = self.preflight(w)
        if not pre.ok:
            exp_id = self.store.create_experiment(self.tag, "candidate", parent=parent, seed=self.cfg.data.seed,
                                                  config=self.cfg.redacted_dict(), description="(preflight)",
                                                  source=parent_source, diff="", worker=w.label)
            self.store.finish_experiment(exp_id, Outcome.ERROR, None, None, None, pre.to_json_dict(),
                                         list(pre.blocking), finished_at=now_iso())
            raise Halt(HarnessError("preflight failed: " + "; ".join(pre.blocking)))
        # -- the agent proposes
        self.display.set_phase(None, f"{self.wlabel(w)}agent ({getattr(self.agent, 'name', 'agent')}) proposes")
        proposal, rejected, agent_seconds = self.propose(w, parent_source)
        if proposal is not None and getattr(proposal, "exhausted", False):
            self.exhausted = True
            self.event("stop", f"the agent has run out of ideas: {proposal.rationale or proposal.description}")
            return None
        if proposal is not None and proposal.new_source is not None:
            (w.wt.path / "train.py").write_text(proposal.new_source)
        description = (proposal.description if proposal else f"(rejected proposal) {rejected}")[:300]
        description = " ".join(description.split()) or "(no description)"
        rationale = proposal.rationale if proposal else ""
        new_source = (w.wt.path / "train.py").read_text()
        diff = w.wt._git("diff", "HEAD", "--", "train.py")
        exp_id = self.store.create_experiment(
            self.tag, "candidate", parent=parent, seed=self.cfg.data.seed, config=self.cfg.redacted_dict(),
            description=description, rationale=rationale, source=new_source, diff=diff, worker=w.label)
        self.store.update_experiment(exp_id, agent_seconds=agent_seconds, started_at=started_at)
        spent = 0.0

        def finish(outcome: Outcome, verdict: Verdict, score: float | None = None, metrics: dict | None = None,
                   signature: str | None = None, **extra: Any) -> Outcome:
            fault_pause("record")
            # reasons may quote run logs: secrets never reach the database, the display or a page
            verdict = verdict.model_copy(update={"blocking": [redact(b, self.secrets) for b in verdict.blocking]})
            blocking = list(verdict.blocking)
            self.store.finish_experiment(
                exp_id, outcome, score if outcome.has_score else None, metrics,
                (metrics or {}).get("classes") if outcome.has_score else None, verdict.to_json_dict(), blocking,
                finished_at=now_iso(), failure_signature=signature,
                harness_seconds=max(0.0, time.monotonic() - t0 - agent_seconds - spent), **extra)
            with self.count_lock:
                self.stats.outcomes[outcome.value] = self.stats.outcomes.get(outcome.value, 0) + 1
            best = self.store.best_experiment(self.tag)
            self.display.outcome(exp_id, outcome.value, score, "; ".join(blocking)[:200],
                                 best.get("score") if best else None)
            return outcome

        # -- scope check
        self.store.set_phase(exp_id, "scope check")
        if rejected is not None:
            w.wt.reset_hard(parent)
            try:
                compile(new_source, "train.py", "exec")
            except SyntaxError as exc:  # a change that does not compile broke the run: a crash
                sig = core_failure.signature_of(f"SyntaxError: {exc.msg}")
                out = finish(Outcome.CRASH, Verdict.failed(
                    f"train.py does not compile: {exc.msg} (line {exc.lineno})"), signature=sig)
                self.check_stuck()
                return out
            return finish(Outcome.DISCARD, Verdict.failed(f"agent reply rejected: {rejected}"))
        others = [c.path for c in w.wt.changes() if c.path != "train.py"]
        if others:
            w.wt.restore(others)
            w.wt.reset_hard(parent)
            return finish(Outcome.DISCARD, Verdict.failed(
                "scope violation: the agent changed " + ", ".join(sorted(others)[:8])
                + " (only train.py may change); restored"))
        if new_source == parent_source:
            return finish(Outcome.DISCARD, Verdict.failed("the agent changed nothing in train.py"))
        try:
            compile(new_source, "train.py", "exec")
        except SyntaxError as exc:
            w.wt.reset_hard(parent)
            sig = core_failure.signature_of(f"SyntaxError: {exc.msg}")
            out = finish(Outcome.CRASH, Verdict.failed(f"train.py does not compile: {exc.msg} (line {exc.lineno})"),
                         signature=sig)
            self.check_stuck()
            return out
        new_imports = new_third_party_imports(new_source, parent_source)
        if new_imports:
            w.wt.reset_hard(parent)
            return finish(Outcome.DISCARD, Verdict.failed(
                f"new third-party import: {', '.join(new_imports)} (no new packages)"))
        # -- commit (on the branch with one worker; on the worker's detached checkout with several)
        commit = w.wt.commit(f"looper #{exp_id}: {description}")
        self.store.update_experiment(exp_id, commit=commit)

        def reset() -> None:
            w.wt.save_ref(f"refs/looper/discarded/{exp_id}", commit)
            w.wt.reset_hard(parent)

        timing: dict[str, Any] = {}

        def measured(role: str, seed: int) -> Measurement | Outcome:
            """Train + evaluate; a non-result ends the experiment here (returned as its Outcome)."""
            nonlocal spent
            m = self.measure(w, exp_id, role, seed)
            self.record_run(exp_id, "main" if role == "main" else "rerun", m)
            spent += m.train_seconds + m.eval_seconds
            timing.update(train_seconds=timing.get("train_seconds", 0.0) + m.train_seconds,
                          eval_seconds=timing.get("eval_seconds", 0.0) + m.eval_seconds)
            if role == "main":
                timing.update(exit_code=m.train.exit_code if m.train else None, train=m.train_json,
                              gpu=(m.train.gpu if m.train else None) or None)
            if m.kind == "measured":
                return m
            if m.kind == "interrupted":
                reset()
                self.store.mark_interrupted(exp_id, m.blocking[0])
                return Outcome.INTERRUPTED
            prefix = "" if role == "main" else f"{role} seed {seed}: "
            if m.kind == "error":
                finish(Outcome.ERROR, Verdict.errored(*(prefix + b for b in m.blocking)), signature=m.signature,
                       **timing)
                raise Halt(HarnessError("; ".join(m.blocking)))
            reset()
            outcome = Outcome.CRASH if m.kind == "crash" else Outcome.VACUOUS
            out = finish(outcome, Verdict.failed(*(prefix + b for b in m.blocking)), signature=m.signature,
                         **timing)
            self.check_stuck()
            return out

        gcfg = core_gate.GateConfig(score=self.cfg.gate.score, max_class_drop=self.cfg.gate.max_class_drop,
                                    noise_sigmas=self.cfg.gate.noise_sigmas)

        def judge(runs: list[dict], against: dict, source: str, base_source: str) -> core_gate.GateDecision | Outcome:
            """Gate with reruns for a candidate inside the noise band."""
            simpler = code_lines(source) < code_lines(base_source)
            reruns_left = self.cfg.loop.noise_reruns
            while True:
                inp, _ = self.gate_input(runs, simpler, best=against)
                d = core_gate.decide(inp, gcfg, reruns_left)
                if d.outcome is not Outcome.INCONCLUSIVE or d.needs_reruns <= 0 or reruns_left <= 0:
                    return d
                for _ in range(min(d.needs_reruns, reruns_left)):
                    r = measured("rerun", self.cfg.data.seed + len(runs))
                    reruns_left -= 1
                    if isinstance(r, Outcome):
                        return r
                    runs.append(r.metrics)

        def measure_and_judge(role: str, against: dict) -> tuple[list[dict], core_gate.GateDecision] | Outcome:
            m = measured(role, self.cfg.data.seed)
            if isinstance(m, Outcome):
                return m
            runs = [m.metrics]
            d = judge(runs, against, new_source, parent_source)
            return d if isinstance(d, Outcome) else (runs, d)

        got = measure_and_judge("main", best_then)
        if isinstance(got, Outcome):
            return got
        runs, d = got
        for attempt in range(3):
            if d.outcome is Outcome.ERROR:
                finish(Outcome.ERROR, d.verdict, **timing)
                raise Halt(HarnessError("gate: " + "; ".join(d.verdict.blocking)))
            if d.outcome is not Outcome.KEEP:
                reset()
                return finish(d.outcome, d.verdict, score=d.score, metrics=mean_metrics(runs), **timing)
            with self.keep_lock:
                tip = self.branch_tip()
                if tip == parent or not w.detached:
                    self.advance_branch(w, commit, parent)
                    return finish(Outcome.KEEP, d.verdict, score=d.score, metrics=mean_metrics(runs), **timing)
                # The best moved while this candidate ran: its win is conditional on the new best.
                kept_by = next((r["id"] for r in reversed(self.store.experiments(tag=self.tag,
                                status=Outcome.KEEP.value)) if r.get("commit") == tip), None)
                tip_source = w.wt.show(tip, "train.py")
                best_now = self.best()
            if attempt == 2:
                reset()
                return finish(Outcome.DISCARD, Verdict.failed(
                    f"{RACE_REASON} #{kept_by}: the best kept moving; idea handed back"), **timing)
            merged, clean = self.merge_train(parent_source, tip_source, new_source)
            if not clean:
                reset()
                return finish(Outcome.DISCARD, Verdict.failed(
                    f"{RACE_REASON} #{kept_by}: the train.py change does not merge onto the new best; "
                    "idea handed back"), **timing)
            # Rerun the merged source and judge THAT: never keep a result measured on another source.
            w.wt.save_ref(f"refs/looper/raced/{exp_id}-{attempt}", commit)
            w.wt.reset_hard(tip)
            (w.wt.path / "train.py").write_text(merged)
            parent, parent_source, new_source = tip, tip_source, merged
            commit = w.wt.commit(f"looper #{exp_id}: {description} (merged onto #{kept_by})")
            self.store.update_experiment(exp_id, commit=commit, parent=parent, source=merged,
                                         diff=w.wt.diff(parent, commit))
            self.event("note", f"#{exp_id} raced keep #{kept_by}: merged cleanly, rerunning the merged source",
                       exp_id)
            got = measure_and_judge("rerun", best_now)
            if isinstance(got, Outcome):
                return got
            runs, d = got
        raise AssertionError("unreachable")  # pragma: no cover

    def merge_train(self, base: str, ours: str, theirs: str) -> tuple[str, bool]:
        """Three-way merge of train.py (git merge-file): (merged text, clean?)."""
        import tempfile

        from looper import proc

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

    def check_stuck(self) -> None:
        sigs = self.store.recent_signatures(self.tag, 2 * self.cfg.loop.stuck_after)
        why = core_failure.is_stuck(sigs, self.cfg.loop.stuck_after)
        if why:
            raise Halt(StuckError(why))

    def agent_context(self, train_py: str, w: Worker) -> Any:
        from looper.agentctx import build_context

        others = tuple(dict(k) for wid, k in sorted(self.in_flight.items()) if wid != w.id)
        return build_context(self.store, self.tag, w.wt.path, train_py, self.program_md, self.cfg, in_flight=others)

    # ------------------------------------------------------------------ the night
    def deadline(self) -> datetime | None:
        until = self.cfg.loop.until
        if not until:
            return None
        hh, mm = (int(x) for x in until.split(":"))
        now = datetime.now()
        target = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
        if now - target > timedelta(minutes=1):  # already past today (not just now): tomorrow's
            target += timedelta(days=1)
        return target

    def page(self, title: str, body: str, exp_id: int | None = None) -> None:
        title, body = redact(title, self.secrets), redact(body, self.secrets)
        try:
            ok, problem = self.notifier.page(title, body)
        except Exception as exc:  # a failing notifier never hides the halt
            ok, problem = False, f"{type(exc).__name__}: {exc}"
        if ok:
            self.journal("page", title, exp_id)
        else:
            self.journal("page_failed", f"{title} -- NOT DELIVERED: {problem}", exp_id)
            print(f"looper: PAGE NOT DELIVERED ({problem}). The halt stands:\n{title}\n{body}",
                  file=sys.stderr, flush=True)

    def halt(self, err: HarnessError | StuckError) -> int:
        """Page a person exactly once; the page goes out even when the database cannot be used."""
        kind = "stuck" if isinstance(err, StuckError) else "halt"
        last_exp, tail, store_problem = None, "", ""
        try:
            last = self.store.experiments(tag=self.tag, limit=1)
            last_exp = last[-1] if last else None
            if last_exp:
                runs = self.store.runs(last_exp["id"])
                if runs:
                    tail = "\n".join((runs[-1].get("log_tail") or "").splitlines()[-15:])
        except Exception as exc:  # the database itself may be what broke
            store_problem = f"(the database could not be read: {type(exc).__name__}: {exc})"
        blocking = (last_exp or {}).get("blocking") or [str(err)]
        what_next = ("Fix the harness problem named above (GPU, data, host, fixed files, database), then start "
                     "`looper run` again: the loop resumes from the last kept commit."
                     if kind == "halt" else
                     "The same failure keeps repeating. Read the failure signature, adjust program.md "
                     "(exclusions, search plan) or train.py by hand, then start `looper run` again.")
        body = (f"looper {kind} on tag {self.tag} at {now_iso()}\n\n"
                f"What happened: {err}\n\nBlocking reasons:\n" + "\n".join(f"- {b}" for b in blocking)
                + f"\n\nExperiments this run: {self.stats.experiments} {self.stats.outcomes}\n"
                + (f"Last experiment: #{last_exp['id']} ({last_exp['status']})\n" if last_exp else "")
                + (f"{store_problem}\n" if store_problem else "")
                + (f"\nLast lines of the run log:\n{tail}\n" if tail else "")
                + f"\nWhat to do next: {what_next}\n")
        exp_id = last_exp["id"] if last_exp else None
        self.display.note(f"HALT ({kind}): {err}")
        self.page(f"looper {kind}: {self.tag}: {str(err)[:120]}", body, exp_id)
        self.journal(kind, str(err), exp_id, {"blocking": blocking})
        return err.exit_code

    def journal(self, kind: str, message: str, exp_id: int | None = None, data: dict | None = None) -> None:
        """A journal entry that must never hide what it reports (a halt, a failed page)."""
        try:
            self.event(kind, message, exp_id, data)
        except Exception as exc:
            print(f"looper: could not write the journal entry ({kind}: {redact(message, self.secrets)}): "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def claim(self, limit: int, deadline: datetime | None) -> bool:
        """May one more experiment start? Counts it when yes."""
        with self.count_lock:
            if self.cancel.is_set() or self.exhausted or self.halt_error is not None:
                return False
            if limit and self.stats.experiments >= limit:
                if "limit" not in self._noted:
                    self._noted.add("limit")
                    self.event("stop", f"max_experiments reached ({limit})")
                return False
            if deadline and datetime.now() >= deadline:
                if "until" not in self._noted:
                    self._noted.add("until")
                    self.event("stop", f"until {self.cfg.loop.until} reached")
                return False
            self.stats.experiments += 1
            return True

    def worker_loop(self, w: Worker, limit: int, deadline: datetime | None) -> None:
        try:
            while self.claim(limit, deadline):
                outcome = self.run_one(w)
                if outcome is None or outcome is Outcome.INTERRUPTED:
                    break
        except Halt as h:
            with self.count_lock:
                self.halt_error = self.halt_error or h.error
            self.cancel.set()  # the other workers stop; their experiments are marked interrupted
        except HarnessError as exc:
            with self.count_lock:
                self.halt_error = self.halt_error or exc
            self.cancel.set()
        except Exception as exc:  # a bug in the harness is a harness error: halt and page
            import traceback

            traceback.print_exc()
            with self.count_lock:
                self.halt_error = self.halt_error or HarnessError(
                    f"internal error in looper ({w.label}): {type(exc).__name__}: {exc}")
            self.cancel.set()

    def run(self, max_experiments: int = 0) -> int:
        """The night. Returns the process exit code (0 stop rule/signal, 3 error, 4 stuck)."""
        self.event("start", f"daemon started (pid {os.getpid()}, {self.cfg.loop.workers} worker(s))")
        from looper import proc

        reaped = proc.reap_trail(self.root / ".looper" / "pids")  # before anything new is noted there
        proc.set_trail(self.root / ".looper" / "pids")
        for line in reaped:
            self.event("recover", line)
        deadline = self.deadline()
        limit = max_experiments or self.cfg.loop.max_experiments
        try:
            try:
                self.setup()
            except HarnessError as exc:
                return self.halt(exc)
            except Halt as h:
                return self.halt(h.error)
            if len(self.workers) == 1:
                self.worker_loop(self.workers[0], limit, deadline)
            else:
                threads = [threading.Thread(target=self.worker_loop, args=(w, limit, deadline), name=w.label,
                                            daemon=True) for w in self.workers]
                for t in threads:
                    t.start()
                while any(t.is_alive() for t in threads):  # join in slices: signals reach the main thread
                    for t in threads:
                        t.join(timeout=0.5)
            if self.halt_error is not None:  # leave everything as it is for the person
                return self.halt(self.halt_error)
            if self.cancel.is_set():
                self.event("interrupted", "stopped by a signal; checkout restored to the last kept commit")
                self.restore_last_kept()
            return 0
        except Halt as h:
            return self.halt(h.error)
        except HarnessError as exc:
            return self.halt(exc)
        except Exception as exc:  # a bug in the harness is a harness error: halt and page
            import traceback

            traceback.print_exc()
            return self.halt(HarnessError(f"internal error in looper: {type(exc).__name__}: {exc}"))
        finally:
            self.event("stop", f"daemon stopped after {self.stats.experiments} experiment(s)")
            self.display.close()

    # ------------------------------------------------------------------ looper verify
    def verify(self) -> Verdict:
        """One experiment of the workspace's current train.py, gated, committed nowhere."""
        import shutil
        import tempfile

        self.wt = self.ws.ensure_worktree(self.tag)
        tag_row = self.store.get_tag(self.tag)
        if tag_row is None or self.store.best_experiment(self.tag) is None:
            return Verdict.errored(f"tag {self.tag} has no measured baseline yet: run `looper run` first")
        self.pinned = tag_row
        pre = self.executor.preflight(self.cfg.executor.require_gpu)
        if not pre.ok:
            return Verdict.errored(*pre.blocking)
        root_fixed = self.integrity("in the workspace since the tag began", self.root)
        if not root_fixed.ok:
            return Verdict.errored(*root_fixed.blocking)
        source = (self.root / "train.py").read_text()
        try:
            compile(source, "train.py", "exec")
        except SyntaxError as exc:
            return Verdict.failed(f"train.py does not compile: {exc.msg} (line {exc.lineno})")
        exp_id = self.store.create_experiment(self.tag, "verify", parent=self.wt.head(), seed=self.cfg.data.seed,
                                              config=self.cfg.redacted_dict(), description="looper verify",
                                              source=source, diff="")
        scratch = Path(tempfile.mkdtemp(prefix="looper-verify-", dir=self.root / ".looper"))
        try:
            for name in ("train.py", *FIXED_FILES):
                shutil.copy2(self.root / name, scratch / name)
            w = Worker(0, self.wt, self.executor, self.device, detached=False)
            m = self.measure(w, exp_id, "main", self.cfg.data.seed, checkout=scratch)
            self.record_run(exp_id, "main", m)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if m.kind == "interrupted":
            self.store.mark_interrupted(exp_id, m.blocking[0])
            return Verdict.errored(*m.blocking)
        if m.kind == "error":
            v = Verdict.errored(*m.blocking)
            self.store.finish_experiment(exp_id, Outcome.ERROR, None, None, None, v.to_json_dict(), v.blocking,
                                         finished_at=now_iso())
            return v
        if m.kind in ("crash", "vacuous"):
            outcome = Outcome.CRASH if m.kind == "crash" else Outcome.VACUOUS
            v = Verdict.failed(*m.blocking, metrics={"outcome": outcome.value})
            self.store.finish_experiment(exp_id, outcome, None, None, None, v.to_json_dict(), v.blocking,
                                         finished_at=now_iso(), failure_signature=m.signature)
            return v
        gcfg = core_gate.GateConfig(score=self.cfg.gate.score, max_class_drop=self.cfg.gate.max_class_drop,
                                    noise_sigmas=self.cfg.gate.noise_sigmas)
        inp, _best = self.gate_input([m.metrics], False)
        d = core_gate.decide(inp, gcfg, 0)
        outcome = d.outcome
        self.store.finish_experiment(exp_id, outcome, d.score if outcome.has_score else None,
                                     m.metrics if outcome.has_score else None,
                                     m.metrics.get("classes") if outcome.has_score else None,
                                     d.verdict.to_json_dict(), d.verdict.blocking, finished_at=now_iso(),
                                     train_seconds=m.train_seconds, eval_seconds=m.eval_seconds)
        metrics = dict(d.verdict.metrics)
        metrics["outcome"] = outcome.value
        metrics["experiment_id"] = exp_id
        if outcome is Outcome.KEEP:
            return Verdict.passed(metrics)
        if outcome is Outcome.ERROR:
            return Verdict.errored(*d.verdict.blocking, metrics=metrics)
        return Verdict.failed(*(d.verdict.blocking or [f"{outcome.value}: did not beat the current best"]),
                              metrics=metrics)
