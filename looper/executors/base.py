"""The executor seam: where training and evaluation actually run.

An executor runs the experiment's ``train.py`` and the fixed ``evaluate.py`` somewhere (this
machine, an SSH host, a cluster) under the budget and stall rules, and brings the evidence
back into a local run folder. It never judges: it reports what happened, and the pure core
decides what that means.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from looper.core.verdicts.verdict import Verdict

if TYPE_CHECKING:
    from looper.executors.nightgpu import GpuWatch

FIXED_FILES = ("prepare.py", "evaluate.py")
STARTUP_MARK = "LOOPER_STARTUP"  # train.py's line at its first optimizer step (its start-up ends there)


@dataclass
class RunResult:
    """What happened to one child run (training, evaluation or data preparation)."""

    exit_code: int | None
    signal: int | None = None
    timed_out: bool = False
    stalled: bool = False
    cancelled: bool = False
    seconds: float = 0.0
    log_tail: str = ""
    transport_exit_code: int | None = None  # e.g. ssh's own 255; None for local runs
    transport_error: str = ""  # a transport fault described in words
    gpu: dict = field(default_factory=dict)  # peak memory, mean utilisation, ... when known
    limit: str = ""  # a run limit stopped it (looper.executors.limits: its quota watch), in words
    log_error: str = ""  # the daemon could not write the run's log (a full disk): the log is cut there
    seen: dict = field(default_factory=dict)  # what the harness saw of the run's limits (looper.core.run.limits.Seen)
    caps: dict = field(default_factory=dict)  # the limits it ran under where not the daemon's (an ssh host's own figures)
    started: bool = True  # False: a prestarted run whose slot was not given (TrainJob.gate); it never ran
    held_seconds: float = 0.0  # a prestarted run: how long its box waited for the slot (not in ``seconds``)

    @property
    def clean_exit(self) -> bool:
        return (self.exit_code == 0 and not self.timed_out and not self.stalled
                and not self.cancelled and self.transport_exit_code in (None, 0)
                and not self.transport_error and not self.limit)


@dataclass
class TrainJob:
    checkout: Path  # local checkout holding train.py (and the fixed files)
    out_dir: Path  # local, empty: weights.pt, train.json come back here
    seed: int
    budget_seconds: float
    grace_seconds: float
    stall_seconds: float
    log_path: Path
    device: str = ""
    max_steps: int = 0  # a step budget (LOOPER_MAX_STEPS); 0: the wall clock alone
    threads: int = 0  # its share of the cores ([loop] seed_jobs > 1, local only): LOOPER_THREADS; 0: unset
    # Its training slot (runs side by side, looper.night.slots): blocks until the slot is the run's (True) or will
    # never be (False). Given only to an executor that ``prestarts``: it starts the run's box first, then waits.
    gate: Callable[[], bool] | None = None
    prestart: bool = False  # [loop] prestart: run it in a box started ahead (an executor that ``prestarts``)
    seed_value: int | None = None  # LOOPER_SEED ([loop] secret_seeds: the seed's value under the secret); None: seed


@dataclass
class EvalJob:
    checkout: Path  # where the (verified) evaluate.py is
    weights: Path  # local weights file (the executor moves it where it is needed)
    metrics_path: Path  # local path METRICS.json must end up at; deleted before the run
    log_path: Path
    timeout_seconds: float
    stall_seconds: float
    device: str = ""
    threads: int = 0  # as TrainJob.threads: a run's evaluation on its training's share of the cores
    prestart: bool = False  # [loop] prestart: evaluated in a box started ahead (an executor that ``prestarts``)


LineSink = Callable[[str], None]


@runtime_checkable
class Executor(Protocol):
    name: str
    prestarts: bool  # honours TrainJob.gate itself (starts the run's box, then waits); False: the caller waits

    def plan(self, data_dir: str, runs: int) -> str:
        """Once, before the first run: the data folder ([data] dir) and the runs that may be at a time; returns
        what the night should say of it ("" for nothing)."""
        ...

    def preflight(self, require_gpu: bool, gpu: int | None = None) -> Verdict:
        """Reachable, enough disk, GPU present when required (``gpu``: the GPU this experiment's runs use, a
        worker's; None: ``[executor] gpu_index``'s) and a run can use it in its box. Error verdict otherwise."""
        ...

    def gpu_count(self) -> int | None:
        """The GPUs a run's machine shows it, numbered from 0 as ``LOOPER_DEVICE`` names them (workers take them
        from ``[executor] gpu_index`` on in turn: looper.core.run.slots.worker_gpu); None: not known."""
        ...

    def watch_gpus(self, gpus: Collection[int]) -> GpuWatch | None:
        """The night's watch of the GPUs its runs use, sampled until its ``stop()`` (looper.executors.nightgpu);
        None where this executor cannot watch them."""
        ...

    def ensure_data(self, prepare_py: Path, data_dir: str, scale: str, seed: int) -> Verdict:
        """Build the data set where training runs when it is missing; metrics carry its hash."""
        ...

    def data_hash(self, data_dir: str) -> Verdict:
        """Re-hash the data set; metrics['hash'] is the recomputed manifest hash."""
        ...

    def train(self, job: TrainJob, on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        ...

    def evaluate(self, job: EvalJob, on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        ...

    def reap(self) -> list[str]:
        """End runs a previous daemon left behind; returns what it ended, in words."""
        ...

    def close(self) -> None:
        """The night is over: end whatever the executor started ahead of runs that will not come."""
        ...
