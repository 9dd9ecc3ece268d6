"""The search plan: which knob change to try next, from the history (pure).

Phases, as program.md states them:

1. one knob at a time, in ranked order, each candidate value in turn (relative to the
   current best);
2. combinations of the winners (changes that were kept, or that beat the then-best score
   and were held back only by noise), pairs first, then triples, ...;
3. small steps around the best values of numeric knobs (x0.8 and x1.25, then one step
   either way along the candidate ladder).

Rules that hold in every phase:

- never propose a knob set that an earlier experiment already ran (same values of every
  ranked knob), except that an idea whose only attempt was inconclusive may run once more;
- never move knobs to the values of an excluded experiment (discard, crash);
- never propose what is in flight on another worker;
- when nothing is left, say so: :class:`Exhausted` is a stop rule, not a crash.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Outcomes that mean the change was not measured at all: the idea may run again.
_UNMEASURED = frozenset({"error", "interrupted"})
_EXCLUDING = frozenset({"discard", "crash"})
_MAX_COMBO = 4  # largest combination phase 2 builds


class PlanError(ValueError):
    """The plan cannot be applied to this train.py (a knob missing, a value of the wrong type)."""


@dataclass(frozen=True)
class Knob:
    """One ranked knob of the search plan with its candidate values (rank 1 = most promising)."""

    name: str
    candidates: tuple[Any, ...]
    rank: int = 0
    note: str = ""  # the comment on program.md's knob line ("... rare classes" marks a rare-class knob)

    @property
    def targets_rare_classes(self) -> bool:
        return "rare" in self.note.lower()


@dataclass(frozen=True)
class PastExperiment:
    """One earlier experiment, as plain data.

    ``changes``: the knob changes it made, ``{NAME: (old, new)}``.
    ``knobs_after``: the full knob values it ran with, when known (else reconstructed).
    ``excluded``: None means "derive from the outcome" (discard and crash are exclusions).
    ``best_before``: the best score when it ran, when known (else the running best).
    """

    changes: Mapping[str, tuple[Any, Any]]
    outcome: str
    score: float | None = None
    excluded: bool | None = None
    id: int | None = None
    knobs_after: Mapping[str, Any] | None = None
    best_before: float | None = None

    @property
    def is_excluded(self) -> bool:
        return self.excluded if self.excluded is not None else self.outcome in _EXCLUDING


@dataclass(frozen=True)
class PlanProposal:
    changes: dict[str, tuple[Any, Any]]  # {NAME: (current, proposed)}
    phase: int
    description: str  # one line, e.g. "LR0 0.003 -> 0.006"
    rationale: str
    retry: bool = False


@dataclass(frozen=True)
class Exhausted:
    reason: str


def fmt(value: Any) -> str:
    """A value as a person writes it in a description."""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def describe(changes: Mapping[str, tuple[Any, Any]]) -> str:
    return ", ".join(f"{name} {fmt(old)} -> {fmt(new)}" for name, (old, new) in changes.items())


def _norm(value: Any) -> tuple[str, Any]:
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, (int, float)):
        return ("n", round(float(value), 12))
    if isinstance(value, str):
        return ("s", value)
    return ("r", repr(value))


def coerce(name: str, current: Any, candidate: Any) -> Any:
    """A candidate in the type of the knob's current value; PlanError when it cannot be."""
    if isinstance(current, bool) or isinstance(candidate, bool):
        if isinstance(current, bool) and isinstance(candidate, bool):
            return candidate
    elif isinstance(current, float) and isinstance(candidate, (int, float)):
        return float(candidate)
    elif isinstance(current, int) and isinstance(candidate, int):
        return candidate
    elif isinstance(current, int) and isinstance(candidate, float) and candidate.is_integer():
        return int(candidate)
    elif type(current) is type(candidate):
        return candidate
    raise PlanError(
        f"search plan knob {name}: candidate {candidate!r} ({type(candidate).__name__}) does not fit "
        f"train.py's value {current!r} ({type(current).__name__})")


@dataclass
class _State:
    knobs: tuple[Knob, ...]
    current: dict[str, Any]
    names: tuple[str, ...]
    attempts: dict[tuple, list[PastExperiment]] = field(default_factory=dict)  # by full knob set
    singles: dict[tuple, list[PastExperiment]] = field(default_factory=dict)  # by exact change
    exclusions: list[tuple[dict[str, tuple], PastExperiment]] = field(default_factory=list)
    in_flight: set[tuple] = field(default_factory=set)
    weak: list[str] = field(default_factory=list)  # classes of the current best at recall 0

    def key(self, values: Mapping[str, Any]) -> tuple:
        return tuple(_norm(values.get(n, self.current.get(n))) for n in self.names)


def _reconstruct(current: Mapping[str, Any], history: Sequence[PastExperiment]
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(knob values each experiment ran with, the best it started from), walking back from today."""
    after: list[dict[str, Any]] = [dict()] * len(history)
    bases: list[dict[str, Any]] = [dict()] * len(history)
    base = dict(current)  # the best after the last experiment
    for i in range(len(history) - 1, -1, -1):
        exp = history[i]
        if exp.outcome == "keep":
            before = dict(base)
            for name, (old, _new) in exp.changes.items():
                before[name] = old
        else:
            before = base
        ran = dict(before)
        for name, (_old, new) in exp.changes.items():
            ran[name] = new
        if exp.knobs_after is not None:
            ran.update(exp.knobs_after)
        after[i] = ran
        bases[i] = before
        base = before
    return after, bases


def _winners(history: Sequence[PastExperiment], baseline_score: float | None) -> list[PastExperiment]:
    """Kept changes, and inconclusive ones that beat the then-best score (held back by noise)."""
    out: list[PastExperiment] = []
    seen: set[tuple] = set()
    best = baseline_score
    for exp in history:
        then_best = exp.best_before if exp.best_before is not None else best
        key = tuple(sorted((n, _norm(new)) for n, (_o, new) in exp.changes.items()))
        if exp.changes and not exp.is_excluded and key not in seen:
            won = exp.outcome == "keep" or (
                exp.outcome == "inconclusive" and exp.score is not None and then_best is not None
                and exp.score > then_best)
            if won:
                seen.add(key)
                out.append(exp)
        if exp.outcome == "keep" and exp.score is not None:
            best = exp.score if best is None else max(best, exp.score)
    return out


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _round_like(value: float, ladder: Sequence[Any], as_int: bool) -> Any:
    if as_int:
        # the largest power of two that divides every value (strides, batch sizes)
        ints = [abs(int(v)) for v in ladder if _numeric(v) and float(v).is_integer() and v != 0]
        step = 0
        for v in ints:
            step = math.gcd(step, v)
        step = (step & -step) if step else 1
        return int(round(value / step) * step)
    if value == 0:
        return 0.0
    return float(f"{value:.3g}")


def _steps(knob: Knob, current: Any) -> list[Any]:
    """Phase-3 neighbours of the current value: x0.8, x1.25, then +-1 on the candidate ladder."""
    if not _numeric(current):
        return []
    ladder = [v for v in knob.candidates if _numeric(v)]
    as_int = isinstance(current, int)
    unit = all(0.0 <= float(v) <= 1.0 for v in ladder + [current])  # probabilities, fractions
    out: list[Any] = []
    for factor in (0.8, 1.25):
        out.append(_round_like(current * factor, ladder + [current], as_int))
    values = sorted({float(v) for v in ladder + [current]})
    i = values.index(float(current))
    if i > 0:
        out.append(values[i - 1])
    if i + 1 < len(values):
        out.append(values[i + 1])
    seen: set = set()
    result: list[Any] = []
    for v in out:
        v = int(round(v)) if as_int else float(v)
        if unit and not 0.0 <= v <= 1.0:
            continue
        if as_int and v <= 0 < current:
            continue
        if _norm(v) == _norm(current) or _norm(v) in seen:
            continue
        seen.add(_norm(v))
        result.append(v)
    return result


def _won(exp: PastExperiment) -> bool | None:
    """Did a measured single change beat the best it started from? None: unknown."""
    if exp.outcome == "keep":
        return True
    if exp.outcome in _EXCLUDING:
        return False
    if exp.outcome == "inconclusive" and exp.score is not None and exp.best_before is not None:
        return exp.score > exp.best_before
    return None


def _sides(st: _State, name: str) -> dict[int, list[bool]]:
    """For one numeric knob: the results of its single changes by direction (-1 lower, +1 higher)."""
    out: dict[int, list[bool]] = {-1: [], 1: []}
    for (knob_name, _new), exps in st.singles.items():
        if knob_name != name:
            continue
        for exp in exps:
            old, new = exp.changes[name]
            won = _won(exp)
            if won is None or not (_numeric(old) and _numeric(new)) or old == new:
                continue
            out[1 if new > old else -1].append(won)
    return out


def _direction_order(st: _State, knob: Knob, cur: Any, cands: list[Any]) -> tuple[list[Any], str]:
    """Candidates reordered by what the night learned about the knob's direction, and why."""
    if not _numeric(cur) or not all(_numeric(c) for c in cands):
        return cands, ""
    sides = _sides(st, knob.name)

    def merit(side: int) -> int:
        return 2 * sum(sides[side]) - sum(1 for w in sides[side] if not w)

    if merit(-1) == merit(1):
        return cands, ""
    better = 1 if merit(1) > merit(-1) else -1
    ordered = sorted(cands, key=lambda c: (0 if (c > cur) == (better > 0) else 1))
    if ordered == cands:
        return cands, ""
    worse = -better
    lost = sum(1 for w in sides[worse] if not w)
    words = {1: "higher", -1: "lower"}
    why = (f"learned direction: {lost} {words[worse]} value(s) of {knob.name} lost"
           + (f", {sum(sides[better])} {words[better]} won" if sum(sides[better]) else "")
           + f"; {words[better]} values first")
    return ordered, why


def _knob_order(st: _State) -> tuple[tuple[Knob, ...], str]:
    """Rare-class knobs first while classes of the best score zero."""
    if not st.weak:
        return st.knobs, ""
    rare = [k for k in st.knobs if k.targets_rare_classes]
    if not rare:
        return st.knobs, ""
    order = tuple(rare) + tuple(k for k in st.knobs if not k.targets_rare_classes)
    shown = ", ".join(st.weak[:5]) + (f" and {len(st.weak) - 5} more" if len(st.weak) > 5 else "")
    return order, f"{len(st.weak)} class(es) of the best at recall 0 ({shown}): rare-class knobs first"


def _phase1(st: _State) -> Iterator[tuple[dict[str, tuple], str]]:
    knobs, weak_note = _knob_order(st)
    for knob in knobs:
        cur = st.current[knob.name]
        cands = [coerce(knob.name, cur, c) for c in knob.candidates]
        cands = [c for c in cands if _norm(c) != _norm(cur)]
        cands, dir_note = _direction_order(st, knob, cur, cands)
        notes = "".join(f"; {n}" for n in (weak_note if knob.targets_rare_classes else "", dir_note) if n)
        for cand in cands:
            yield {knob.name: (cur, cand)}, f"phase 1: knob #{knob.rank} {knob.name}, candidate {fmt(cand)}{notes}"


def _phase2(st: _State, winners: list[PastExperiment]) -> Iterator[tuple[dict[str, tuple], str]]:
    for size in range(2, min(len(winners), _MAX_COMBO) + 1):
        for combo in itertools.combinations(winners, size):
            merged: dict[str, Any] = {}
            conflict = False
            for exp in combo:
                for name, (_old, new) in exp.changes.items():
                    if name in merged and _norm(merged[name]) != _norm(new):
                        conflict = True
                    merged[name] = new
            if conflict or any(n not in st.current for n in merged):
                continue
            changes = {n: (st.current[n], coerce(n, st.current[n], v)) for n, v in merged.items()
                       if _norm(v) != _norm(st.current[n])}
            if not changes:
                continue  # every part is already in the best
            ids = ", ".join(
                f"#{e.id} ({describe({k: v for k, v in e.changes.items()})}, {e.outcome})" for e in combo)
            yield changes, f"phase 2: combines winners {ids}"


def _phase3(st: _State) -> Iterator[tuple[dict[str, tuple], str]]:
    for knob in st.knobs:
        cur = st.current[knob.name]
        for v in _steps(knob, cur):
            v = coerce(knob.name, cur, v)
            yield {knob.name: (cur, v)}, f"phase 3: step around the best {knob.name}={fmt(cur)}"


def _build_state(knobs: Sequence[Knob], current: Mapping[str, Any], history: Sequence[PastExperiment],
                 in_flight: Sequence[Mapping[str, Any]], weak_classes: Sequence[str]) -> _State:
    """What was measured, excluded and in flight, by knob set, for the phase generators."""
    st = _State(tuple(knobs), dict(current), tuple(k.name for k in knobs), weak=list(weak_classes))
    ran, bases = _reconstruct(current, history)
    # Every best the night started from was measured: going back to one is not new.
    for i, values in enumerate(bases + [dict(current)]):
        st.attempts.setdefault(st.key(values), [PastExperiment({}, "keep", None, excluded=False,
                                                               id=history[i].id if i < len(history) else None)])
    for exp, values in zip(history, ran, strict=True):
        if exp.outcome in _UNMEASURED:
            continue
        st.attempts.setdefault(st.key(values), []).append(exp)
        if len(exp.changes) == 1:
            (name, (_o, new)), = exp.changes.items()
            st.singles.setdefault((name, _norm(new)), []).append(exp)
        if exp.is_excluded and exp.changes:
            st.exclusions.append((dict(exp.changes), exp))
    st.in_flight = {st.key(s) for s in in_flight}
    return st


def _blocked_by_exclusion(st: _State, changes: dict[str, tuple]) -> PastExperiment | None:
    for ex_changes, exp in st.exclusions:
        if all(n in changes and _norm(changes[n][1]) == _norm(new) for n, (_o, new) in ex_changes.items()):
            return exp
    return None


def _status(st: _State, changes: dict[str, tuple], phase: int) -> tuple[str, str]:
    """('fresh'|'retry'|'done', note) of a proposed change."""
    values = {n: new for n, (_o, new) in changes.items()}
    k = st.key(values)
    if k in st.in_flight:
        return "done", "in flight"
    ex = _blocked_by_exclusion(st, changes)
    if ex is not None:
        return "done", f"excluded by #{ex.id}"
    prior = list(st.attempts.get(k, []))
    if phase == 1:
        (name, (_o, new)), = changes.items()
        prior += [e for e in st.singles.get((name, _norm(new)), []) if e not in prior]
    if not prior:
        return "fresh", ""
    if len(prior) == 1 and prior[0].outcome == "inconclusive":
        return "retry", f"retry of inconclusive #{prior[0].id}"
    return "done", "already measured"


def _avoid_note(st: _State, changes: dict[str, tuple]) -> str:
    """The exclusions on the same knobs that this proposal steers around (newest 5)."""
    near = [f"#{exp.id} ({describe(ch)})" for ch, exp in st.exclusions if set(ch) & set(changes)]
    if not near:
        return ""
    more = f" and {len(near) - 5} older" if len(near) > 5 else ""
    return f"; avoids exclusions {', '.join(near[-5:])}{more}"


def next_proposal(
    knobs: Sequence[Knob],
    current: Mapping[str, Any],
    history: Sequence[PastExperiment],
    in_flight: Sequence[Mapping[str, Any]] = (),
    *,
    phases: Sequence[int] = (1, 2, 3),
    baseline_score: float | None = None,
    weak_classes: Sequence[str] = (),
) -> PlanProposal | Exhausted:
    """The next knob change to try, or :class:`Exhausted` with the reason.

    ``knobs``: the ranked knobs (rank order); ``current``: the knob values of the current
    best train.py; ``history``: earlier experiments, oldest first; ``in_flight``: knob sets
    (name -> value; missing names mean "as in current") running on other workers;
    ``weak_classes``: classes the current best finds none of (rare-class knobs go first).
    Raises PlanError when a ranked knob is not in ``current`` or a candidate has the wrong type.
    """
    if not knobs:
        return Exhausted("the search plan ranks no knobs")
    missing = [k.name for k in knobs if k.name not in current]
    if missing:
        raise PlanError(f"search plan ranks knob(s) {', '.join(missing)} that train.py's block does not have")
    st = _build_state(knobs, current, history, in_flight, weak_classes)
    winners = _winners(history, baseline_score)
    summary: list[str] = []
    for phase in (1, 2, 3):
        if phase not in phases:
            continue
        gen = list(_phase1(st) if phase == 1 else _phase2(st, winners) if phase == 2 else _phase3(st))
        for want in ("fresh", "retry"):
            for changes, why in gen:
                state, note = _status(st, changes, phase)
                if state == want:
                    rationale = why + (f"; {note}" if note else "") + _avoid_note(st, changes)
                    return PlanProposal(changes, phase, describe(changes), rationale, retry=want == "retry")
        summary.append({1: f"phase 1 tried all {len(gen)} candidate changes of {len(knobs)} knobs",
                        2: f"phase 2 has no untried combination of {len(winners)} winner(s)",
                        3: "phase 3 has no untried step around the best values"}[phase])
    skipped = [str(p) for p in (1, 2, 3) if p not in phases]
    if skipped:
        summary.append(f"phase(s) {', '.join(skipped)} not in the plan")
    return Exhausted("search plan exhausted: " + "; ".join(summary))
