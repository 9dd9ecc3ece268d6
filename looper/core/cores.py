"""Runs side by side on this machine's cores (pure: the core numbers come in, no affinity is read).

With ``[loop] seed_jobs = N`` a worker runs up to N seeds of one experiment at the same time, on the
local executor only. Two runs that share every core slow each other unevenly (one starts first, the
other's evaluation lands on the first's training), so each run gets a slot of its own: a fixed set of
cores no other run of the night uses, and as many threads as the slot has cores. Every run of such a
night runs in a slot, a lone run too, so that all its runs train in one regime (one thread on one core
trains 169 demo steps in 59 s where two threads on two cores take 43 s; the scores of the two regimes are
not interchangeable bit for bit). On two cores two one-core runs side by side did 24 runs in 13 minutes,
about 1.5 times what one two-core run at a time does (bench/RESULTS.md, "Seeds side by side").
"""

from __future__ import annotations

from collections.abc import Iterable


class TooFewCores(ValueError):
    """More runs side by side than cores to give each its own."""


def slots(cores: Iterable[int], runs: int) -> list[tuple[int, ...]]:
    """Split ``cores`` (the CPUs this process may use) into ``runs`` disjoint slots of consecutive cores,
    the first slots one core larger where they do not divide evenly.

    >>> slots([0, 1, 2, 3], 2)
    [(0, 1), (2, 3)]
    >>> slots([0, 1, 2], 2)
    [(0, 1), (2,)]
    """
    cpus = sorted(set(cores))
    if runs < 1:
        raise ValueError(f"runs side by side must be >= 1, got {runs}")
    if runs > len(cpus):
        raise TooFewCores(f"{runs} runs side by side need a core each, but this process may use "
                          f"{len(cpus)} ({', '.join(map(str, cpus)) or 'none'})")
    size, extra = divmod(len(cpus), runs)
    out, at = [], 0
    for i in range(runs):
        n = size + (1 if i < extra else 0)
        out.append(tuple(cpus[at:at + n]))
        at += n
    return out
