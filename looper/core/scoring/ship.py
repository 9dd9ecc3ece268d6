"""Which run of an experiment ships (``looper export``): a pure rule, records in, one answer out.

An experiment's score is the mean over its seeds, but a detector is one set of weights: the one
shipped is the run that scored highest among the runs whose weights the harness hashed when it
recorded them (``runs.weights_sha256``), or the run of the seed asked for. A run without a
recorded hash is never shipped (nothing proves its file is the one that was scored); a canary's
weights are never shipped (it is a check of the harness, not a run of the experiment).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NOT_SHIPPED_ROLES = ("canary",)


@dataclass(frozen=True)
class RunView:
    """What the rule needs of one recorded run."""

    run_id: int
    role: str
    seed: int | None
    score: float | None
    weights_path: str | None
    weights_sha256: str | None

    @property
    def shippable(self) -> bool:
        return (self.role not in NOT_SHIPPED_ROLES and self.score is not None
                and bool(self.weights_path) and bool(self.weights_sha256))


@dataclass(frozen=True)
class Pick:
    """``run``: the run to ship, or None with ``reason`` saying why none can be."""

    run: RunView | None
    reason: str


def pick_run(runs: Sequence[RunView], seed: int | None = None) -> Pick:
    """The highest-scoring shippable run (the lowest run id on a tie), or the one of ``seed``."""
    ok = [r for r in runs if r.shippable]
    if seed is not None:
        ok = [r for r in ok if r.seed == seed]
        if not ok:
            seeds = sorted({r.seed for r in runs if r.shippable and r.seed is not None})
            return Pick(None, f"no run of seed {seed} with weights the harness recorded "
                              f"(seeds that have: {', '.join(map(str, seeds)) or 'none'})")
    if not ok:
        unhashed = sum(1 for r in runs if r.score is not None and r.role not in NOT_SHIPPED_ROLES)
        why = (f"{unhashed} scored run(s), none with weights the harness hashed when it recorded them "
               "(recorded before looper kept weight hashes?)") if unhashed else "no scored run"
        return Pick(None, why)
    best = min(ok, key=lambda r: (-float(r.score or 0.0), r.run_id))
    return Pick(best, f"seed {best.seed} scored {best.score:.4f}, the highest of {len(ok)} run(s) with recorded weights")
