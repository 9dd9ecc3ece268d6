"""Intensification: how many seeds a challenger gets, which seeds, and when it stops (pure rules).

After SMAC3's intensifier and irace's races, with a significance test at every look:

- **Schedule.** A challenger runs 1 seed, then 2, then 4 ... seeds in all, up to ``cap``
  (``1 + [loop] noise_reruns``): :func:`schedule`. The gate looks after each batch, so a
  night's decision has ``len(schedule(cap))`` looks and the gate splits alpha over them.
- **Which seeds.** The current best's own seeds, in the best's order, then new seeds above
  every seed the best ran (:func:`candidate_seeds`): seed k of the candidate meets seed k of
  the best, so the score test can pair them.
- **The best gains seeds.** A seed the candidate is asked to run that the best never ran is
  run on the best first (:func:`best_needs`) and recorded as the best's measurement, so the
  best's estimate keeps improving over the night and a lucky best does not set the bar forever.
- **Stopping** (:func:`step`): the gate's KEEP stops early for success (clearly better on the
  seeds both ran, at the look's alpha), its DISCARD for futility (clearly worse, or a class
  lost); INCONCLUSIVE asking for more seeds goes on to the next batch while the cap allows;
  anything else ends the decision where it stands.
- **Fresh seeds** for the morning's confirmation (:func:`fresh_seeds`): above every seed the
  tag used, so no decision of the night saw them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

KEEP, DISCARD, INCONCLUSIVE = "keep", "discard", "inconclusive"


def schedule(cap: int) -> tuple[int, ...]:
    """Candidate seeds in all after each batch: 1, 2, 4 ... doubling, the last one ``cap``."""
    if cap < 1:
        raise ValueError(f"a challenger needs at least 1 seed, got a cap of {cap}")
    out = [1]
    while out[-1] < cap:
        out.append(min(cap, 2 * out[-1]))
    return tuple(out)


def looks(cap: int) -> int:
    """How many times the gate looks at one challenger (one look per batch)."""
    return len(schedule(cap))


def looks_left(done: int, cap: int) -> int:
    """Looks still to come after ``done`` candidate seeds (0 at or past the cap)."""
    return sum(1 for n in schedule(cap) if n > done)


def candidate_seeds(best_seeds: Sequence[int], count: int, first_seed: int) -> list[int]:
    """The first ``count`` seeds a challenger runs: the best's seeds in its order, then new seeds
    above every seed the best ran (``first_seed`` onwards when the best ran none)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    order = list(dict.fromkeys(best_seeds))  # the best's order, without repeats
    nxt = max(order) + 1 if order else first_seed
    while len(order) < count:
        order.append(nxt)
        nxt += 1
    return order[:count]


def best_needs(best_seeds: Sequence[int], wanted: Sequence[int]) -> list[int]:
    """The wanted seeds the best has not run (in the wanted order): run them on the best first."""
    have = set(best_seeds)
    return [s for s in wanted if s not in have]


@dataclass(frozen=True)
class Step:
    """What to do after a look: ``add`` more candidate seeds (0: stop), and why."""

    add: int
    why: str

    @property
    def stops(self) -> bool:
        return self.add == 0


def step(outcome: str, wants_more: bool, done: int, cap: int) -> Step:
    """The rule after the gate's look at ``done`` candidate seeds (``outcome``: the gate's
    keep | discard | inconclusive | error; ``wants_more``: an inconclusive that more seeds could settle)."""
    if outcome == KEEP:
        return Step(0, f"stopped early for success after {done} seed(s)" if done < cap else
                    f"kept after {done} seed(s)")
    if outcome == DISCARD:
        return Step(0, f"stopped early for futility after {done} seed(s)" if done < cap else
                    f"discarded after {done} seed(s)")
    if outcome != INCONCLUSIVE:
        return Step(0, f"ended ({outcome}) after {done} seed(s)")
    nxt = next((n for n in schedule(cap) if n > done), None)
    if not wants_more or nxt is None:
        return Step(0, f"inconclusive after {done} seed(s)" + (" (the cap)" if nxt is None else ""))
    return Step(nxt - done, f"inconclusive after {done} seed(s): {nxt - done} more (to {nxt} of at most {cap})")


def fresh_seeds(used: Sequence[int], count: int, first_seed: int) -> list[int]:
    """``count`` seeds no run of the tag used: above the highest used (``first_seed`` onwards when none)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    start = max(max(used) + 1, first_seed) if used else first_seed
    return list(range(start, start + count))
