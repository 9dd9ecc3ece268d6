"""What one experiment needs from the night: the worker, the store, the config, the executor,
the display, the pinned tag and the journal. No decisions are made here."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from looper.adapters.executors import Executor
from looper.adapters.gitops import Workspace, Worktree
from looper.adapters.notify import redact
from looper.config import Config
from looper.core import cores as core_cores
from looper.core.verdict import Outcome
from looper.display import Display
from looper.errors import HarnessError
from looper.store import ExperimentRecord, Store, TagRecord


def usable_cores() -> list[int]:
    """The CPUs this process may use (its affinity mask; where a system has none, every CPU)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))  # macOS: no affinity


def run_threads(cfg: Config) -> int:
    """Each run's threads with ``seed_jobs`` x ``workers`` runs side by side on this process's cores (0
    with ``seed_jobs`` 1: nothing set); a harness error naming the keys where there are fewer cores than runs."""
    if cfg.loop.seed_jobs <= 1:
        return 0
    try:
        return core_cores.threads_per_run(len(usable_cores()), cfg.loop.seed_jobs * cfg.loop.workers)
    except core_cores.TooFewCores as exc:
        raise HarnessError(f"loop.seed_jobs {cfg.loop.seed_jobs} x loop.workers {cfg.loop.workers}: {exc}; "
                           "lower loop.seed_jobs") from None


def now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def fault_pause(point: str) -> None:
    """Fault-injection hook for the reliability tests: LOOPER_FAULT_PAUSE=<point>:<seconds>
    makes the daemon sleep at that point (so a test can kill it exactly there). Unset in
    normal use; it changes nothing else."""
    spec = os.environ.get("LOOPER_FAULT_PAUSE", "")
    if spec.startswith(point + ":"):
        print(f"[fault-injection] pausing at {point}", flush=True)
        time.sleep(float(spec.split(":", 1)[1]))


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
    experiments: int = 0  # started (claimed)
    outcomes: dict[str, int] = field(default_factory=dict)  # finished, by outcome

    @property
    def finished(self) -> int:
        return sum(self.outcomes.values())


# What a tag's baseline depends on: a change to any of these since it was measured starts a new one.
BASELINE_DEPENDS_ON = (("loop", "budget_seconds"), ("loop", "max_steps"), ("data", "scale"), ("data", "seed"),
                       ("executor", "kind"))


def baseline_drift(then: dict | None, now: dict) -> list[str]:
    """What changed between the config a baseline was measured under and ``now`` (both as
    ``Config.redacted_dict()``), as "section.key a -> b" lines; a key ``then`` lacks is unknown
    and counts as unchanged."""
    changed = []
    for section, key in BASELINE_DEPENDS_ON:
        old = ((then or {}).get(section) or {}).get(key)
        new = now[section][key]
        if old is not None and old != new:
            changed.append(f"{section}.{key} {old} -> {new}")
    return changed


class Context:
    """The night's shared parts, handed to every step of an experiment."""

    def __init__(self, root: Path, cfg: Config, store: Store, executor: Executor, agent: Any,
                 display: Display, secrets: list[str], program_md: str = "") -> None:
        self.root = Path(root)
        self.cfg = cfg
        self.store = store
        self.executor = executor
        self.agent = agent
        self.display = display
        self.secrets = secrets
        self.program_md = program_md
        self.tag = cfg.loop.tag
        self.ws = Workspace(self.root)
        self.wt: Worktree | None = None  # the branch's own checkout, once the tag is set up
        self.pinned: TagRecord | None = None  # the store's record of the tag: what it pinned
        self.device = "cuda" if cfg.executor.require_gpu else "cpu"
        self.workers: list[Worker] = []
        self.cancel = threading.Event()
        self.stats = NightStats()
        self.exhausted = False
        self.keep_lock = threading.RLock()  # branch tip, best and keep decisions move together
        self.agent_lock = threading.Lock()
        self.count_lock = threading.Lock()
        self.seed_lock = threading.Lock()  # the best gains a seed one worker at a time (experiment.gain_best_seeds)
        self.in_flight: dict[int, dict] = {}  # worker id -> knobs of the candidate it runs
        self._threads: int | None = None  # [loop] seed_jobs > 1: each run's share of the cores
        self._threads_lock = threading.Lock()
        from looper import limits, proc
        from looper.guard import release_reserve

        proc.set_output_caps(cfg.limits.log_max_bytes, cfg.limits.line_max_bytes)  # every run's log and lines
        limits.configure(cfg.limits)  # every sandboxed run's memory, processes, tmpfs, quota (issue 39)
        release_reserve(self.root, cfg.limits.reserve_bytes)  # a daemon killed on a full disk: room to start

    # ------------------------------------------------------------------ the journal
    def event(self, kind: str, message: str, experiment_id: int | None = None, data: dict | None = None) -> None:
        self.store.add_event(self.tag, kind, redact(message, self.secrets), experiment_id=experiment_id,
                             data=data)

    def journal(self, kind: str, message: str, exp_id: int | None = None, data: dict | None = None) -> None:
        """A journal entry that must never hide what it reports (a halt, a failed page)."""
        try:
            self.event(kind, message, exp_id, data)
        except Exception as exc:
            print(f"looper: could not write the journal entry ({kind}: {redact(message, self.secrets)}): "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def redact(self, text: str) -> str:
        return redact(text, self.secrets)

    # ------------------------------------------------------------------ places and labels
    def runs_dir(self, exp_id: int, role: str, seed: int) -> Path:
        d = self.root / "runs" / self.tag / f"{exp_id:05d}" / f"{role}-s{seed}"
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        return d

    def wlabel(self, w: Worker) -> str:
        return f"[{w.label}] " if len(self.workers) > 1 else ""

    def main_worker(self) -> Worker:
        assert self.wt is not None
        return Worker(0, self.wt, self.executor, self.device, detached=False)

    # ------------------------------------------------------------------ threads for runs side by side
    def run_threads(self) -> int:
        """The threads every run of the night gets (``[loop] seed_jobs`` > 1: its share of the cores,
        :func:`run_threads`; 0: the run's own choice, as one run at a time)."""
        with self._threads_lock:
            if self._threads is None:
                self._threads = run_threads(self.cfg)
            return self._threads

    # ------------------------------------------------------------------ the tag's state
    def best(self) -> ExperimentRecord:
        best = self.store.best(self.tag)
        if best is None:
            raise HarnessError(f"tag {self.tag} has no baseline or kept experiment to compare against")
        return best

    def kept_baselines(self) -> list[ExperimentRecord]:
        return self.store.find_experiments(tag=self.tag, kind="baseline", status=Outcome.KEEP)

    def last_kept_commit(self) -> str | None:
        commits = [r.commit for r in self.store.find_experiments(tag=self.tag, status=Outcome.KEEP) if r.commit]
        return commits[-1] if commits else None

    def max_steps(self) -> int:
        """The step budget every run of the tag trains (LOOPER_MAX_STEPS; 0: the wall clock alone):
        ``[loop] max_steps``, or with ``"auto"`` the one the tag's warm-up run measured (0 until then)."""
        if self.cfg.loop.max_steps != "auto":
            return int(self.cfg.loop.max_steps)
        noise = (self.pinned.noise if self.pinned else None) or {}
        return int(noise.get("max_steps") or 0)

    def branch_tip(self) -> str:
        assert self.wt is not None
        return self.ws.repo.git.rev_parse(f"refs/heads/{self.wt.branch}").strip()

    def count(self, outcome: Outcome) -> None:
        with self.count_lock:
            self.stats.outcomes[outcome.value] = self.stats.outcomes.get(outcome.value, 0) + 1
