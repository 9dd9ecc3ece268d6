"""A seed the harness owns: does a candidate's training follow ``LOOPER_SEED``?

The gate's noise is the spread over seeds the harness chooses. A train.py that ignores
``LOOPER_SEED`` (a fixed seed of its own: seed engineering) trains the same weights on every
seed: its reruns measure no noise and its one lucky seed would pass as a gain. The rule: when
two runs of the same source with different seeds left bit-identical weights (the same sha256),
the candidate ignores the seed, and that is a crash of the change that names it.

The check is decidable only when at least two seeds of the candidate left weights: with one
seed it has not run, and says so (it never answers "pass" for a check it could not make).
Pure: seeds and hashes in (the hashing is :func:`looper.night.measure.weights_sha256`), an answer out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

#: The failure signature of a candidate that ignores the seed (repeats of it make a loop stuck).
SIGNATURE = "ignores LOOPER_SEED: identical weights on different seeds"


@dataclass(frozen=True)
class SeedCheck:
    """``pass``: different seeds gave different weights; ``fail``: two gave identical weights
    (``reason`` names the seeds and the hash); ``not_run``: fewer than two seeds left weights."""

    status: Literal["pass", "fail", "not_run"]
    reason: str
    seeds: tuple[int, ...] = ()

    @property
    def ignores_seed(self) -> bool:
        return self.status == "fail"

    def as_metrics(self) -> dict[str, object]:
        return {"status": self.status, "reason": self.reason, "seeds": list(self.seeds)}


def _seed_list(seeds: Sequence[int]) -> str:
    return ", ".join(str(s) for s in seeds)


def check(runs: Sequence[tuple[int, str | None]]) -> SeedCheck:
    """``runs``: (seed, sha256 of the weights it left, or None when there were none to hash), in
    the order they ran. A seed that ran twice counts once (its first weights)."""
    by_seed: dict[int, str] = {}
    unhashed: list[int] = []
    for seed, digest in runs:
        if not digest:
            unhashed.append(seed)
        elif seed not in by_seed:
            by_seed[seed] = digest
    seeds = tuple(sorted(by_seed))
    if len(seeds) < 2:
        ran = f"{len(seeds)} seed" + ("" if len(seeds) == 1 else "s") + (f" ({_seed_list(seeds)})" if seeds else "")
        missing = f"; no weights to hash for seed(s) {_seed_list(sorted(set(unhashed)))}" if unhashed else ""
        return SeedCheck("not_run", f"seed check not run: weights of {ran}{missing}; a train.py that ignores "
                                    "LOOPER_SEED is caught only when a second seed runs", seeds)
    first_of: dict[str, int] = {}
    for seed in seeds:
        digest = by_seed[seed]
        if digest in first_of:
            return SeedCheck("fail", f"ignores LOOPER_SEED: seeds {first_of[digest]} and {seed} gave identical "
                                     f"weights sha256 {digest[:16]}", seeds)
        first_of[digest] = seed
    return SeedCheck("pass", f"seeds {_seed_list(seeds)} gave different weights", seeds)
