"""This process's cores and each run's share of them when several runs train side by side
(``[loop] seed_jobs`` x ``workers``; the arithmetic is :mod:`looper.core.run.cores`)."""

from __future__ import annotations

import os

from looper.config import Config
from looper.core.run import cores as core_cores
from looper.errors import HarnessError


def usable_cores() -> list[int]:
    """The CPUs this process may use (its affinity mask; where a system has none, every CPU)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))  # macOS: no affinity


def runs_at_once(cfg: Config) -> int:
    """The runs that train at once on the machine they run on: each worker's ``seed_jobs`` seeds, every worker's,
    here or on the ssh host (looper.core.run.cores.side_by_side); what run_threads shares this machine's cores
    among and what a tag's warm-up and fit run train side by side."""
    return core_cores.side_by_side(cfg.loop.seed_jobs, cfg.loop.workers, cfg.executor.kind)


def run_threads(cfg: Config) -> int:
    """Each run's threads with ``seed_jobs`` x ``workers`` runs side by side on this process's cores (the
    local executor's; 0 with one run at a time: nothing set); a harness error naming the keys where there are
    fewer cores than runs. Workers count too: two tiny trainings at once, each on every core of this 2-core
    machine, took 30.2 s each where one thread each took 11.1 s (bench/RESULTS.md, "Threads of runs at the same
    time"). An ssh host shares its own cores among the night's runs there (looper.remote run): 0 here."""
    runs = runs_at_once(cfg)
    if runs <= 1 or cfg.executor.kind != "local":
        return 0
    try:
        return core_cores.threads_per_run(len(usable_cores()), runs)
    except core_cores.TooFewCores as exc:
        raise HarnessError(f"loop.seed_jobs {cfg.loop.seed_jobs} x loop.workers {cfg.loop.workers}: {exc}; "
                           "lower loop.seed_jobs or loop.workers") from None
