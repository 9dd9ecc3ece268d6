"""Search strategies beside the phased plan (pure): ``random`` and ``evolve``.

Both work on the ranked knobs of program.md's search plan and propose a knob set for the
current best train.py, like :func:`looper.core.propose.plan.next_proposal`, under the same rules:
never a knob set that already ran, never one that moves knobs to an excluded experiment's
values, never one in flight on another worker; :class:`~looper.core.propose.plan.Exhausted` when
nothing new can be drawn. Every draw is seeded (``seed`` plus the history's length), so a
night replays.

``random``
    Every ranked knob drawn uniformly from its ladder (program.md's candidates plus the
    current best's value). The control arm: what a search that learns nothing finds.

``evolve``
    The idea of Ultralytics' ``Tuner`` (``model.tune()``), done on looper's gated score:
    genes are the ranked knobs scaled to [0, 1] over the range their ladder spans (a log
    scale when the ladder spans 4x or more, as for learning rates); a parent is drawn from
    the ``parents`` fittest experiments with weight ``fitness - min + 1e-6``; each gene
    mutates with probability 0.5 by a Gaussian step of ``sigma`` (shrinking by up to 20 %
    as the search goes stale, as the Tuner does); non-numeric knobs (an optimizer name, a
    flag) switch to another ladder value with the same probability. Fitness is the gated
    page-level score, never mAP on validation tiles: a keep or an inconclusive run counts
    its score; a discard counts its score but never more than the best it failed against (a
    discard lost on a class gate is not a good parent); a crash is the worst fitness (it is
    not a parent, and its knob set is never drawn again). Experiments that were never
    measured (error, interrupted) carry no fitness.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from looper.core.propose.plan import (
    Exhausted,
    Knob,
    PastExperiment,
    PlanError,
    PlanProposal,
    _norm,
    _numeric,
    _reconstruct,
    _round_like,
    coerce,
    describe,
)

STRATEGIES = ("planner", "random", "evolve")
_DRAWS = 400  # attempts at a new knob set before a strategy says it is exhausted
_UNMEASURED = frozenset({"error", "interrupted"})


@dataclass(frozen=True)
class _Gene:
    knob: Knob
    values: tuple[Any, ...]  # the ladder plus the current value, in ladder order
    lo: float = 0.0
    hi: float = 0.0
    log: bool = False
    as_int: bool = False
    unit: bool = False  # a probability or fraction: stays in [0, 1]

    @property
    def numeric(self) -> bool:
        return self.hi > self.lo

    def to_unit(self, value: Any) -> float:
        v = float(value)
        if self.log:
            return (math.log(v) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        return (v - self.lo) / (self.hi - self.lo)

    def from_unit(self, g: float) -> Any:
        g = min(1.0, max(0.0, g))
        if self.log:
            v = math.exp(math.log(self.lo) + g * (math.log(self.hi) - math.log(self.lo)))
        else:
            v = self.lo + g * (self.hi - self.lo)
        v = _round_like(v, list(self.values), self.as_int)
        if self.unit:
            v = min(1.0, max(0.0, v))
        return int(v) if self.as_int else float(v)


def _genes(knobs: Sequence[Knob], current: Mapping[str, Any]) -> list[_Gene]:
    genes: list[_Gene] = []
    for knob in knobs:
        cur = current[knob.name]
        ladder = [coerce(knob.name, cur, c) for c in knob.candidates]
        seen: set[tuple] = set()
        values = tuple(v for v in [*ladder, cur] if not (_norm(v) in seen or seen.add(_norm(v))))
        nums = [float(v) for v in values if _numeric(v)]
        if _numeric(cur) and len(nums) == len(values) and max(nums) > min(nums):
            lo, hi = min(nums), max(nums)
            genes.append(_Gene(knob, values, lo, hi, log=lo > 0 and hi / lo >= 4.0,
                               as_int=isinstance(cur, int), unit=all(0.0 <= v <= 1.0 for v in nums)))
        else:
            genes.append(_Gene(knob, values))
    return genes


@dataclass
class _Seen:
    """Knob sets that may not be drawn: already measured, excluded, in flight."""

    names: tuple[str, ...]
    current: dict[str, Any]
    keys: set[tuple]
    excluded: list[dict[str, Any]]

    def key(self, values: Mapping[str, Any]) -> tuple:
        return tuple(_norm(values.get(n, self.current.get(n))) for n in self.names)

    def blocked(self, values: Mapping[str, Any]) -> bool:
        if self.key(values) in self.keys:
            return True
        return any(all(_norm(values.get(n, self.current.get(n))) == _norm(v) for n, v in ex.items())
                   for ex in self.excluded)


def _seen(knobs: Sequence[Knob], current: Mapping[str, Any], history: Sequence[PastExperiment],
          in_flight: Sequence[Mapping[str, Any]], ran: list[dict[str, Any]], bases: list[dict[str, Any]]) -> _Seen:
    s = _Seen(tuple(k.name for k in knobs), dict(current), set(), [])
    for values in [*bases, dict(current)]:
        s.keys.add(s.key(values))
    for exp, values in zip(history, ran, strict=True):
        if exp.outcome in _UNMEASURED:
            continue
        s.keys.add(s.key(values))
        if exp.is_excluded and exp.changes:
            s.excluded.append({n: new for n, (_o, new) in exp.changes.items()})
    for values in in_flight:
        s.keys.add(s.key(values))
    return s


def _check(knobs: Sequence[Knob], current: Mapping[str, Any]) -> None:
    missing = [k.name for k in knobs if k.name not in current]
    if missing:
        raise PlanError(f"search plan ranks knob(s) {', '.join(missing)} that train.py's block does not have")


def _space(knobs: Sequence[Knob], current: Mapping[str, Any], history: Sequence[PastExperiment],
           in_flight: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], _Seen, list[_Gene]]:
    """What each experiment ran with, what may not be drawn, and the genes: a strategy's search space."""
    _check(knobs, current)
    ran, bases = _reconstruct(current, history)
    return ran, _seen(knobs, current, history, in_flight, ran, bases), _genes(knobs, current)


def _proposal(current: Mapping[str, Any], values: Mapping[str, Any], phase: int, rationale: str) -> PlanProposal:
    changes = {n: (current[n], v) for n, v in values.items() if _norm(v) != _norm(current[n])}
    return PlanProposal(changes, phase, describe(changes), rationale)


def random_proposal(knobs: Sequence[Knob], current: Mapping[str, Any], history: Sequence[PastExperiment],
                    in_flight: Sequence[Mapping[str, Any]] = (), *, seed: int = 0) -> PlanProposal | Exhausted:
    """Every ranked knob drawn uniformly from its ladder (plus its current value)."""
    if not knobs:
        return Exhausted("the search plan ranks no knobs")
    _ran, seen, genes = _space(knobs, current, history, in_flight)
    rng = random.Random(f"random:{seed}:{len(history)}")
    for attempt in range(_DRAWS):
        values = {g.knob.name: rng.choice(g.values) for g in genes}
        if all(_norm(v) == _norm(current[n]) for n, v in values.items()) or seen.blocked(values):
            continue
        n_changed = sum(1 for n, v in values.items() if _norm(v) != _norm(current[n]))
        return _proposal(current, values, 0, f"random: {n_changed} of {len(genes)} knobs drawn uniformly "
                                             f"from their ladders (seed {seed}, draw {attempt + 1})")
    return Exhausted(f"random: no new knob set in {_DRAWS} draws over {len(genes)} ladders")


def fitness(exp: PastExperiment, best_then: float | None) -> float | None:
    """The gated score an experiment counts with as a parent (see the module docstring)."""
    if exp.outcome in _UNMEASURED:
        return None
    if exp.outcome == "crash":
        return -math.inf
    if exp.score is None or not math.isfinite(exp.score):
        return None
    if exp.outcome == "discard" and best_then is not None:
        return min(exp.score, best_then)
    return exp.score


def evolve_proposal(knobs: Sequence[Knob], current: Mapping[str, Any], history: Sequence[PastExperiment],
                    in_flight: Sequence[Mapping[str, Any]] = (), *, seed: int = 0,
                    baseline_score: float | None = None, sigma: float = 0.2,
                    parents: int = 9) -> PlanProposal | Exhausted:
    """A mutation of a fit parent's knob set (the Ultralytics Tuner's scheme on the gated score)."""
    if not knobs:
        return Exhausted("the search plan ranks no knobs")
    ran, seen, genes = _space(knobs, current, history, in_flight)
    # The population: the current best (its score is the best known) and every measured run.
    best = baseline_score
    pop: list[tuple[float, dict[str, Any], str]] = []
    for exp, values in zip(history, ran, strict=True):
        then = exp.best_before if exp.best_before is not None else best
        f = fitness(exp, then)
        if f is not None and math.isfinite(f):
            pop.append((f, values, f"#{exp.id}"))
        if exp.outcome == "keep" and exp.score is not None:
            best = exp.score if best is None else max(best, exp.score)
    pop.append((best if best is not None else 0.0, dict(current), "the current best"))
    pop.sort(key=lambda p: -p[0])
    top = pop[:parents]
    fits = [f for f, _v, _l in top]
    weights = [f - min(fits) + 1e-6 for f in fits]
    best_index = max(range(len(history)), key=lambda i: (fitness(history[i], None) or -math.inf), default=-1)
    stale = len(history) - 1 - best_index if history else 0
    scale = sigma * (1 - 0.2 * min(stale / 25, 1))
    rng = random.Random(f"evolve:{seed}:{len(history)}")
    for attempt in range(_DRAWS):
        k = rng.choices(range(len(top)), weights=weights)[0]
        parent_fitness, parent, label = top[k]
        values = dict(parent)
        mask = [rng.random() < 0.5 for _ in genes]
        if not any(mask):
            mask[rng.randrange(len(genes))] = True
        for g, on in zip(genes, mask, strict=True):
            if not on:
                continue
            now = values.get(g.knob.name, current[g.knob.name])
            if g.numeric:
                values[g.knob.name] = g.from_unit(g.to_unit(now) + rng.gauss(0.0, 1.0) * max(scale, 0.05))
            elif len(g.values) > 1:
                others = [v for v in g.values if _norm(v) != _norm(now)]
                values[g.knob.name] = rng.choice(others)
        if all(_norm(v) == _norm(current[n]) for n, v in values.items() if n in current) or seen.blocked(values):
            continue
        values = {n: v for n, v in values.items() if n in current}
        return _proposal(current, values, 0, f"evolve: mutation of {label} (fitness {parent_fitness:.4f}, parent "
                                             f"{k + 1} of the {len(top)} fittest), sigma {scale:.2f}, "
                                             f"seed {seed}, draw {attempt + 1}")
    return Exhausted(f"evolve: no new mutation in {_DRAWS} draws from {len(top)} parent(s)")
