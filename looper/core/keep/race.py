"""Intensification: how many seeds a challenger gets, which seeds, and when it stops (pure rules).

After SMAC3's intensifier and irace's races, with a significance test at every look:

- **Schedule.** A challenger runs 1 seed, then 2, then 4 ... seeds in all, up to ``cap``
  (``1 + [loop] noise_reruns``): :func:`schedule`. With ``slots`` runs side by side (``[loop]
  seed_jobs``) the first batch fills them and every batch after it is whole slots: 2, 4, 8 with two,
  so no slot waits idle while the first look runs one seed alone. The gate looks after each batch, so a
  night's decision has ``len(schedule(cap))`` looks and the gate splits alpha over them in
  proportion to each look's seeds (:func:`alpha_share`: 1/7, 2/7, 4/7 of alpha at 1, 2, 4 seeds;
  a weighted Bonferroni split, so the whole sequence still errs at most alpha, with most of it
  where the seeds are: the first look, one seed, rarely decides anything).
- **Which seeds.** The current best's own seeds, in the best's order, then new seeds above
  every seed the best ran (:func:`candidate_seeds`): seed k of the candidate meets seed k of
  the best, so the score test can pair them.
- **The best gains seeds.** A seed the candidate is asked to run that the best never ran is
  run on the best first (:func:`best_needs`) and recorded as the best's measurement, so the
  best's estimate keeps improving over the night and a lucky best does not set the bar forever.
- **Stopping** (:func:`step`): the gate's KEEP stops early for success (clearly better on the
  seeds both ran, at the look's alpha), its DISCARD for futility (clearly worse, or a class
  lost) once the challenger has run :data:`DISCARD_SEEDS` seeds and more than its first look's (with
  two slots the first look's two seeds cannot discard: A/A false discards 6.4 and 5.2 % at 8 / 4 if they
  could, 4.4 and 3.7 % as it is, bench/RESULTS-archive.md "Looks that fill the slots"): a discard on one seed is checked
  on the next batch while the cap allows (the seed scores of a fine-tuned detector have a low
  tail: about 1 seed in 6 lands 2 to 3 seed sds below the rest, and with one seed allowed to
  discard, 6.2 to 6.7 % of A/A challengers were discarded at a cap of 2 against the 5 % stated:
  bench/RESULTS-archive.md, "Calibration at 300 steps"); INCONCLUSIVE asking
  for more seeds goes on to the next batch while the cap allows; anything else ends the decision
  where it stands.
- **One race** (:class:`Race`): the rules above as one state machine, driven alike by the loop
  (looper.night.race.measure_and_gate, which runs the seeds) and by the benches that calibrate it
  (bench/calibration_procedures.py on real runs, bench/sim_paired.py on simulated ones), so the
  error rates the benches state are those of the loop's own sequence of looks.
- **Fresh seeds** for the morning's confirmation (:func:`fresh_seeds`): above every seed the
  tag used, so no decision of the night saw them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

KEEP, DISCARD, INCONCLUSIVE = "keep", "discard", "inconclusive"
DISCARD_SEEDS = 2  # a discard stands on at least this many challenger seeds when the cap allows them


def schedule(cap: int, slots: int = 1) -> tuple[int, ...]:
    """Candidate seeds in all after each batch. The first batch fills the ``slots`` (runs side by
    side, ``[loop] seed_jobs``), then the seeds double, each batch rounded up to whole slots, the last
    one ``cap``: 1, 2, 4, 8 with one slot; 2, 4, 8 with two; 3, 6, 8 with three at a cap of 8."""
    if cap < 1:
        raise ValueError(f"a challenger needs at least 1 seed, got a cap of {cap}")
    if slots < 1:
        raise ValueError(f"seeds run in at least 1 slot, got {slots}")
    out = [min(cap, slots)]
    while out[-1] < cap:
        out.append(min(cap, -(-2 * out[-1] // slots) * slots))
    return tuple(out)


def looks(cap: int, slots: int = 1) -> int:
    """How many times the gate looks at one challenger (one look per batch)."""
    return len(schedule(cap, slots))


def alpha_share(done: int, cap: int, slots: int = 1) -> float:
    """The share of the decision's alpha that the look after ``done`` seeds may spend: its seeds over
    the seeds of every planned look (looks at 1, 2, 4 seeds: 1/7, 2/7, 4/7). The shares of all the
    looks sum to 1, so whatever looks a decision takes, it errs at most alpha (weighted Bonferroni)."""
    plan = schedule(cap, slots)
    if done not in plan:
        raise ValueError(f"no look after {done} seed(s) with a cap of {cap}: the looks are at {plan}")
    return done / sum(plan)


def _next_look(done: int, cap: int, slots: int = 1) -> int | None:
    return next((n for n in schedule(cap, slots) if n > done), None)


def looks_left(done: int, cap: int, slots: int = 1) -> int:
    """Looks still to come after ``done`` candidate seeds (0 at or past the cap)."""
    return sum(1 for n in schedule(cap, slots) if n > done)


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


def step(outcome: str, wants_more: bool, done: int, cap: int, discard_seeds: int = DISCARD_SEEDS,
         slots: int = 1) -> Step:
    """The rule after the gate's look at ``done`` candidate seeds (``outcome``: the gate's
    keep | discard | inconclusive | error; ``wants_more``: an inconclusive that more seeds could settle;
    ``discard_seeds``: the seeds a discard must stand on while the cap allows them, and never a first
    look of several seeds alone (with 2 slots the first look has 2 seeds: a discard there waits for
    the next look; at one slot ``discard_seeds`` alone rules, as before); ``slots``: the schedule's, :func:`schedule`)."""
    if outcome == KEEP:
        return Step(0, f"stopped early for success after {done} seed(s)" if done < cap else
                    f"kept after {done} seed(s)")
    nxt = _next_look(done, cap, slots)
    if outcome == DISCARD:
        first = schedule(cap, slots)[0]
        need = max(discard_seeds, first + 1) if first > 1 else discard_seeds  # never a first look of several
        if done < need and nxt is not None:
            return Step(nxt - done, f"worse after {done} seed(s), but a discard stands on {need}: "
                                    f"{nxt - done} more (to {nxt} of at most {cap})")
        return Step(0, f"stopped early for futility after {done} seed(s)" if done < cap else
                    f"discarded after {done} seed(s)")
    if outcome != INCONCLUSIVE:
        return Step(0, f"ended ({outcome}) after {done} seed(s)")
    if not wants_more or nxt is None:
        return Step(0, f"inconclusive after {done} seed(s)" + (" (the cap)" if nxt is None else ""))
    return Step(nxt - done, f"inconclusive after {done} seed(s): {nxt - done} more (to {nxt} of at most {cap})")


@dataclass(frozen=True)
class Batch:
    """The seeds of one batch: ``best`` to run on the best first (seeds it never ran: it gains them),
    then ``candidate`` to run on the challenger, in this order."""

    best: list[int]
    candidate: list[int]


@dataclass
class Race:
    """One challenger's intensification against the best: :meth:`batch` names the next batch's
    seeds, :meth:`ran` records each candidate seed as it is measured, and :meth:`look` applies
    :func:`step` to the gate's decision on the seeds run so far (at :attr:`share` of alpha, with
    :attr:`reruns_left` more allowed). The seeds come from the best's seeds at each batch, so a best
    that gained seeds meanwhile (another worker's race) is followed."""

    cap: int
    first_seed: int
    discard_seeds: int = DISCARD_SEEDS
    seeds: list[int] = field(default_factory=list)  # the candidate's seeds run so far, in order
    slots: int = 1  # runs side by side ([loop] seed_jobs): every batch fills them (schedule)
    target: int = field(init=False)  # candidate seeds in all once the current batch is run

    def __post_init__(self) -> None:
        self.target = schedule(self.cap, self.slots)[0]  # refuses a cap or slots below 1

    @property
    def looks(self) -> int:
        return looks(self.cap, self.slots)

    @property
    def share(self) -> float:
        """The alpha share of the look after the seeds run so far."""
        return alpha_share(len(self.seeds), self.cap, self.slots)

    @property
    def reruns_left(self) -> int:
        return self.cap - len(self.seeds)

    def batch(self, best_seeds: Sequence[int]) -> Batch:
        new = candidate_seeds(best_seeds, self.target, self.first_seed)[len(self.seeds):]
        return Batch(best_needs(best_seeds, new), new)

    def ran(self, seed: int) -> None:
        self.seeds.append(seed)

    def look(self, outcome: str, wants_more: bool) -> Step:
        """The rule after the gate's look at the seeds run so far; a step that goes on sets the next batch."""
        st = step(outcome, wants_more, len(self.seeds), self.cap, self.discard_seeds, self.slots)
        self.target = len(self.seeds) + st.add
        return st


def fresh_seeds(used: Sequence[int], count: int, first_seed: int) -> list[int]:
    """``count`` seeds no run of the tag used: above the highest used (``first_seed`` onwards when none)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    start = max(max(used) + 1, first_seed) if used else first_seed
    return list(range(start, start + count))
