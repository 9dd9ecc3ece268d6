"""What one experiment needs from the night: the services (config, store, executor, agent, display,
journal), the tag's state (:mod:`looper.night.tag`) and the night's concurrency state (workers, locks,
the cancel flag, the counts). No decisions are made here."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from looper.agents.base import Agent
from looper.config import Config
from looper.core.run.slots import prestart
from looper.core.verdicts.untrusted import redact
from looper.core.verdicts.verdict import Outcome
from looper.executors import Executor, TrainJob
from looper.night.cores import run_threads
from looper.night.display import Display
from looper.night.gpushare import GpuShare
from looper.night.tag import TagState
from looper.store import Store
from looper.workspace.gitops import Worktree


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


@dataclass(frozen=True)
class Journal:
    """The night's journal in the store (events of the tag), every message redacted of the secrets."""

    store: Store
    tag: str
    secrets: tuple[str, ...] = ()

    def event(self, kind: str, message: str, experiment_id: int | None = None, data: dict | None = None) -> None:
        self.store.add_event(self.tag, kind, redact(message, list(self.secrets)), experiment_id=experiment_id,
                             data=data)

    def safe(self, kind: str, message: str, exp_id: int | None = None, data: dict | None = None) -> None:
        """A journal entry that must never hide what it reports (a halt, a failed page): a store that
        cannot take it is told on stderr instead."""
        try:
            self.event(kind, message, exp_id, data)
        except Exception as exc:
            print(f"looper: could not write the journal entry ({kind}: {self.redact(message)}): "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def redact(self, text: str) -> str:
        return redact(text, list(self.secrets))


class NightState:
    """The night's concurrency state: its workers, the cancel flag, the counts, the locks that order
    keeps and proposals, what each worker runs, and each run's share of the cores."""

    def __init__(self, cfg: Config, program_md: str = "") -> None:
        self.program_md = program_md  # the program the agent reads, as read when the night began
        self.workers: list[Worker] = []
        self.devices: list[str] = []  # each worker's device, known before the baseline (Loop.worker_devices)
        self.cancel = threading.Event()
        self.stats = NightStats()
        self.exhausted = False
        self.keep_lock = threading.RLock()  # branch tip, best and keep decisions move together
        self.agent_lock = threading.Lock()
        self.count_lock = threading.Lock()
        self.seed_lock = threading.Lock()  # the best gains a seed one worker at a time (race.gain_best_seeds)
        self.in_flight: dict[int, dict] = {}  # worker id -> knobs of the candidate it runs
        self._cfg = cfg
        self._threads: int | None = None  # [loop] seed_jobs > 1: each run's share of the cores
        self._threads_lock = threading.Lock()
        self._said: set[str] = set()  # what the night says once (first_time)
        self._gpus: dict[str, GpuShare] = {}  # each GPU's trainings (looper.night.gpushare)
        self._gpus_lock = threading.Lock()

    def wlabel(self, w: Worker) -> str:
        return f"[{w.label}] " if len(self.workers) > 1 else ""

    def gpu_share(self, w: Worker) -> GpuShare | None:
        """The trainings on worker ``w``'s GPU (looper.night.gpushare); None on the CPU and on SLURM, where a job's
        GPU is its own allocation."""
        if w.device in ("", "cpu") or self._cfg.executor.kind == "slurm":
            return None
        with self._gpus_lock:
            return self._gpus.setdefault(w.device, GpuShare())

    def run_threads(self) -> int:
        """The threads every run of the night gets (``[loop] seed_jobs`` > 1: its share of the cores,
        :func:`looper.night.cores.run_threads`; 0: the run's own choice, as one run at a time)."""
        with self._threads_lock:
            if self._threads is None:
                self._threads = run_threads(self._cfg)
            return self._threads

    def first_time(self, what: str) -> bool:
        """True the first time the night asks about ``what``, False after (a note said once a night)."""
        with self.count_lock:
            if what in self._said:
                return False
            self._said.add(what)
            return True

    def count(self, outcome: Outcome) -> None:
        with self.count_lock:
            self.stats.outcomes[outcome.value] = self.stats.outcomes.get(outcome.value, 0) + 1


@dataclass(frozen=True)
class Context:
    """The night's shared parts, handed to every step of an experiment: six services, the journal, the
    tag's state and the night's concurrency state."""

    root: Path
    cfg: Config
    store: Store
    executor: Executor
    agent: Agent
    display: Display
    journal: Journal
    tag: TagState
    night: NightState

    @classmethod
    def build(cls, root: Path, cfg: Config, store: Store, executor: Executor, agent: Agent, display: Display,
              secrets: list[str], program_md: str = "") -> Context:
        root = Path(root)
        return cls(root=root, cfg=cfg, store=store, executor=executor, agent=agent, display=display,
                   journal=Journal(store, cfg.loop.tag, tuple(secrets)),
                   tag=TagState(cfg.loop.tag, root, store, cfg.loop.max_steps), night=NightState(cfg, program_md))

    def main_worker(self) -> Worker:
        """The branch's own checkout as worker 0 (one worker, or the night's main line), on the GPU
        ``[executor] gpu_index`` names (as worker 0 of several is: looper.core.run.slots.worker_gpu)."""
        assert self.tag.wt is not None
        ex = self.cfg.executor
        return Worker(0, self.tag.wt, self.executor, str(ex.gpu_index) if ex.require_gpu else "cpu", detached=False)

    def train_job(self, w: Worker, checkout: Path, run_dir: Path, seed: int, budget: float,
                  threads: int = 0) -> TrainJob:
        """One training run of ``checkout`` on worker ``w`` (a measured seed or the canary): the night's grace,
        stall limit and step budget, its log and out/ in ``run_dir``."""
        loop = self.cfg.loop
        return TrainJob(checkout=checkout, out_dir=run_dir / "out", seed=seed, budget_seconds=budget,
                        grace_seconds=loop.grace_seconds, stall_seconds=loop.stall_seconds,
                        log_path=run_dir / "train.log", device=w.device, max_steps=self.tag.max_steps(),
                        threads=threads, prestart=self.prestarting(w),
                        seed_value=self.tag.seed_value(seed) if loop.secret_seeds else None)

    def prestarting(self, w: Worker) -> bool:
        """Whether worker ``w``'s runs and their evaluations go in boxes started ahead ([loop] prestart)."""
        return prestart(self.cfg.loop.prestart, self.cfg.executor.require_gpu) and w.executor.prestarts
