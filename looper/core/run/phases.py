"""Where a run's time went (pure rules): its phases from four clock readings of the harness.

A run is started (the harness launches train.py), training starts (train.py's first optimizer step:
the harness's clock when the ``LOOPER_STARTUP`` line reaches it), training ends (train.py exited) and
evaluation ends (evaluate.py exited). :func:`split` turns the four ISO times into seconds of start-up,
training and evaluation; :func:`add` sums the splits of a decision's runs. A reading that is missing or
out of order leaves its phases unknown (None), never 0: a missing figure is not a fast one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

PHASES = ("startup", "train", "eval")


@dataclass(frozen=True)
class Split:
    """Seconds of one run (or of several added up) in each phase; None: not known."""

    startup: float | None
    train: float | None
    eval: float | None

    def as_dict(self) -> dict[str, float | None]:
        return {f"{p}_seconds": (None if getattr(self, p) is None else round(getattr(self, p), 3)) for p in PHASES}

    @property
    def useful_share(self) -> float | None:
        """The share of the run's clock that trained (None when a phase is unknown or nothing ran)."""
        parts = [self.startup, self.train, self.eval]
        if any(p is None for p in parts) or sum(parts) <= 0:  # type: ignore[arg-type]
            return None
        return self.train / sum(parts)  # type: ignore[operator, arg-type]


def _at(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _between(a: datetime | None, b: datetime | None) -> float | None:
    if a is None or b is None:
        return None
    s = (b - a).total_seconds()
    return s if s >= 0 else None


def split(started: str | None, train_started: str | None, train_ended: str | None,
          eval_ended: str | None) -> Split:
    """The phases of one run from its four readings (ISO times with a zone; an unreadable or
    out-of-order pair leaves that phase None)."""
    t0, t1, t2, t3 = (_at(x) for x in (started, train_started, train_ended, eval_ended))
    return Split(_between(t0, t1), _between(t1, t2), _between(t2, t3))


def add(splits: Iterable[Split]) -> Split:
    """The phases of several runs added up; a phase unknown in any run is unknown in the sum."""
    total: dict[str, float | None] = dict.fromkeys(PHASES, 0.0)
    for s in splits:
        for p in PHASES:
            v, t = getattr(s, p), total[p]
            total[p] = None if v is None or t is None else t + v
    return Split(**total)


@dataclass(frozen=True)
class Cover:
    """How much of a night's clock some run was training: the union of the runs' training phases over the
    window from the first run's start to the last run's end. On a GPU night a stretch with no run training is
    a stretch the GPU had nothing to train (an agent's proposal, a decision, every run of a look starting or
    being evaluated at once); on any machine it is the scheduling's own part of the GPU's idle time."""

    wall_s: float  # the window: the first run's start to the last run's end
    training_s: float  # of it, the seconds in which at least one run trained
    at_once: float  # the runs training at a time, on average over the window (their training seconds / wall_s)
    longest_gap_s: float  # the longest stretch of the window with no run training
    gap_starts_at: float  # where that stretch starts, in seconds from the window's start

    @property
    def share(self) -> float:
        """The share of the window in which some run trained (0 when the window is empty)."""
        return self.training_s / self.wall_s if self.wall_s > 0 else 0.0


def cover(training: Iterable[tuple[float, float]], start: float, end: float) -> Cover:
    """The :class:`Cover` of the training intervals ``(began, ended)`` (seconds on one clock) over the window
    ``start`` .. ``end``; an interval is clipped to the window, one that ends before it begins counts for
    nothing.

    >>> c = cover([(0, 4), (2, 6), (8, 10)], 0, 10)
    >>> c.training_s, c.longest_gap_s, c.gap_starts_at, c.at_once
    (8.0, 2.0, 6.0, 1.0)
    """
    wall = max(0.0, float(end) - float(start))
    spans = sorted((max(float(a), start), min(float(b), end)) for a, b in training)
    spans = [(a, b) for a, b in spans if b > a]
    covered = busy = 0.0
    gap, gap_at = 0.0, 0.0
    reach = float(start)  # the end of the union so far
    for a, b in spans:
        busy += b - a
        if a > reach and a - reach > gap:
            gap, gap_at = a - reach, reach - start
        covered += max(0.0, b - max(a, reach))
        reach = max(reach, b)
    if end - reach > gap:
        gap, gap_at = end - reach, reach - start
    return Cover(wall_s=wall, training_s=covered, at_once=busy / wall if wall > 0 else 0.0,
                 longest_gap_s=max(0.0, gap), gap_starts_at=gap_at if wall > 0 else 0.0)


def night_cover(runs: Iterable[tuple[str | None, str | None, str | None, str | None]]) -> Cover | None:
    """The :class:`Cover` of a night's runs from each one's readings (started, training started, training
    ended, its last reading: evaluated or finished; ISO times): the window from the earliest start to the
    latest reading. None when no run has both ends of its training (nothing to say, never a 0 %)."""
    rows = [tuple(_at(x) for x in r) for r in runs]
    spans = [(a, b) for _, a, b, _ in rows if a is not None and b is not None and b >= a]
    if not spans:
        return None
    zero = min(t for row in rows for t in row if t is not None)
    last = max(t for row in rows for t in row if t is not None)

    def s(t: datetime) -> float:
        return (t - zero).total_seconds()

    return cover(((s(a), s(b)) for a, b in spans), 0.0, s(last))
