"""Runs side by side on this machine's cores (pure: the core count comes in, nothing is read).

With ``[loop] seed_jobs = N`` a worker runs up to N seeds of one experiment at the same time, on the
local executor only. Runs that each take every core oversubscribe them (two runs of two threads on two
cores), so each run gets a share of the cores as its thread count (``OMP_NUM_THREADS``,
``MKL_NUM_THREADS`` and ``LOOPER_THREADS``, which the baseline train.py gives torch), and every run of
such a night gets it, a lone one too, so that all its runs train in one regime. On this 2-core machine,
in the same hour, two one-thread runs side by side did 8 demo runs of 169 steps in 6 min 20 s where one
two-thread run at a time did 6 in 6 min 13 s: about 1.3 times the runs an hour (bench/RESULTS-archive.md, "Seeds
side by side, and a confirmed demo night"). The runs are not pinned to cores: a night pinned to one core
a run measured its 8 baseline seeds in 6 min 22 s, unpinned the next in 6 min 01 s, and a thread count
needs nothing a system may lack (macOS has no affinity).
"""

from __future__ import annotations


class TooFewCores(ValueError):
    """More runs side by side than cores to give each one."""


def threads_per_run(cores: int, runs: int) -> int:
    """The threads each of ``runs`` runs side by side gets on ``cores`` cores: an equal share, rounded
    down (a core left over stays with the daemon and the data loaders).

    >>> threads_per_run(2, 2)
    1
    >>> threads_per_run(16, 3)
    5
    """
    if runs < 1:
        raise ValueError(f"runs side by side must be >= 1, got {runs}")
    if runs > cores:
        raise TooFewCores(f"{runs} runs side by side need a core each, but this process may use {cores}")
    return cores // runs


def side_by_side(seed_jobs: int, workers: int, executor: str) -> int:
    """The runs that train at once on the machine they run on, at least one: each worker's ``seed_jobs`` seeds,
    every worker's on this machine (``executor`` ``"local"``) or on the one ssh host (``"ssh"``); on SLURM each
    job is an allocation of its own, one run.

    >>> side_by_side(2, 2, "local"), side_by_side(1, 2, "local"), side_by_side(2, 2, "ssh"), side_by_side(2, 2, "slurm")
    (4, 2, 4, 1)
    """
    return max(1, seed_jobs * workers) if executor in ("local", "ssh") else 1


def host_threads(cores: int, runs: int) -> int:
    """The threads of each run on an ssh host where the daemon puts ``runs`` runs at a time (its workers) on its
    ``cores``: an equal share, at least one (the host refuses nothing: the daemon cannot preflight its cores);
    0 with one run at a time (nothing set: every core, or the environment's own setting).

    >>> host_threads(16, 2), host_threads(2, 3), host_threads(8, 1)
    (8, 1, 0)
    """
    return max(1, cores // runs) if runs > 1 else 0
