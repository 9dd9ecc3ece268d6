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
