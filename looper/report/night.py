"""The facts of one report window as values: :class:`Night` and what it holds.

:mod:`looper.report.facts` fills them from the store (:func:`~looper.report.facts.gather`);
this module only defines them (and the one rule :class:`Night` itself needs,
:func:`rare_classes`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from looper.core.run.phases import Cover
from looper.core.scoring.classes import CLASSES
from looper.report.fmt import num
from looper.store import EventRecord, ExperimentRecord, ExperimentRow

__all__ = [
    "DEFAULT_ALPHA", "DEFAULT_MAX_CLASS_DROP", "DEFAULT_SCORE", "UNMEASURED", "Attention", "CrashGroup", "Judgement",
    "KeptChange", "NearMiss", "Night", "Reference", "SeedBar", "Sorted", "rare_classes", "seed_count",
]

DEFAULT_SCORE = "weighted_f1"
DEFAULT_MAX_CLASS_DROP = 0.05
DEFAULT_ALPHA = 0.05
#: What a person is told when the noise could not be measured.
UNMEASURED = "noise unmeasured: no keep or discard on the score alone"


@dataclass(frozen=True)
class Attention:
    """One thing a person should look at, most urgent first. ``level``: halt | warn | note."""

    level: str
    text: str
    exp_id: int | None = None
    command: str | None = None


@dataclass(frozen=True)
class KeptChange:
    id: int
    tag: str
    commit: str | None
    description: str
    rationale: str
    diff: str
    score: float
    best_before: float | None
    best_before_id: int | None

    @property
    def delta(self) -> float | None:
        return None if self.best_before is None else self.score - self.best_before


@dataclass(frozen=True)
class NearMiss:
    id: int
    description: str
    score: float
    best_before: float | None
    best_before_id: int | None
    diff: float
    class_reasons: tuple[str, ...]

    @property
    def command(self) -> str:
        return f"looper baseline approve {self.id}"


@dataclass(frozen=True)
class CrashGroup:
    signature: str
    ids: tuple[int, ...]
    example_reason: str
    descriptions: tuple[str, ...]


def _digits(value: float | None, band: float | None = None) -> int:
    """Decimals to show a score difference with: 3 when the band (else the value) is >= 0.01."""
    ref = band if band is not None else value
    return 3 if ref is not None and abs(ref) >= 0.01 else 4


@dataclass(frozen=True)
class Judgement:
    """What the gate measured for one judged experiment, read from its verdict's metrics.

    ``diff``: mean candidate score minus the current best's; ``band``: the smallest difference
    the score test calls significant at this look (None when the noise is unmeasured);
    ``alpha``: the configured ``[gate] alpha``, ``alpha_look`` the share of it this look used
    (it is split over the planned seeds); ``p_better``/``p_worse``: the one-sided p-values.
    """

    id: int
    outcome: str
    diff: float | None
    band: float | None
    measured: bool
    alpha: float
    alpha_look: float
    looks: int
    candidate_scores: tuple[float, ...]
    n_best: int
    df: int | None
    p_better: float | None
    p_worse: float | None
    simpler: bool
    class_failures: tuple[str, ...]
    share: float | None = None  # this look's share of alpha (by its seeds), when the verdict records one
    paired_seeds: int = 0  # > 0: the paired t on this many seed pairs decided (else the pooled t)
    halved: bool = False  # two score tests to choose from: each held to half the look's alpha

    @property
    def n_candidate(self) -> int:
        return len(self.candidate_scores)

    @property
    def where(self) -> str:
        """``beyond the noise`` | ``below the noise`` | ``inside the noise`` | ``unmeasured``."""
        if not self.measured or self.band is None or self.diff is None:
            return "unmeasured"
        if self.p_better is not None and self.p_worse is not None:
            if self.p_better <= self.alpha_look:
                return "beyond the noise"
            return "below the noise" if self.p_worse <= self.alpha_look else "inside the noise"
        if abs(self.diff) < self.band:
            return "inside the noise"
        return "beyond the noise" if self.diff > 0 else "below the noise"

    @property
    def words(self) -> str:
        """The score test in words: ``+0.031 vs best, band 0.062 at alpha 0.05 (one-sided t-test,
        1 candidate + 3 best seeds, df 2): inside the noise``."""
        diff = "-" if self.diff is None else f"{self.diff:+.{_digits(self.diff, self.band)}f}"
        if self.where == "unmeasured":
            return f"{diff} vs best: {UNMEASURED}"
        assert self.band is not None
        how = []  # how this look's alpha came from the configured one
        if self.share is not None:  # intensification: the look's share of alpha by its seeds
            how.append(f"shared over {self.looks} looks by their seeds")
        elif self.looks > 1 and self.alpha_look < self.alpha - 1e-12:
            how.append(f"split over {self.looks} seeds")
        if self.halved:
            how.append("halved for two tests")
        alpha = f"alpha {self.alpha_look:.3g} ({self.alpha:g} {', '.join(how)})" if how else f"alpha {self.alpha:g}"
        seeds = f"{self.n_candidate} candidate + {self.n_best} best seed{'s' if self.n_best != 1 else ''}"
        test = "one-sided t-test"
        if self.paired_seeds:
            test, seeds = "one-sided paired t-test", f"{self.paired_seeds} seed pairs"
        dof = f", df {self.df}" if self.df is not None else ""
        where = self.where
        if where == "beyond the noise" and self.p_better is not None:
            where += f" (p = {self.p_better:.2g} better)"
        elif where == "below the noise" and self.p_worse is not None:
            where += f" (p = {self.p_worse:.2g} worse)"
        elif where == "inside the noise" and self.outcome == "keep" and self.simpler:
            where += "; simpler, so kept (simpler wins a tie)"
        return (f"{diff} vs best, band {self.band:.{_digits(self.band)}f} at {alpha} "
                f"({test}, {seeds}{dof}): {where}")


@dataclass(frozen=True)
class SeedBar:
    """An experiment measured with more than one seed: its mean score +- a band (score plot)."""

    id: int
    mean: float
    band: float
    scores: tuple[float, ...]
    what: str  # how the band was found, in words


@dataclass(frozen=True)
class Reference:
    """The baseline the gates compare against: an approved file, else the tag-start baseline."""

    source: str                       # "approved:<file> (#id)" | "tag-start #id" | "none"
    score: float | None
    id: int | None
    metrics: dict[str, Any]
    classes: dict[str, dict[str, Any]]
    approved: bool


@dataclass
class Sorted:
    """The window's experiments sorted by what the report says about them."""

    kept: list[KeptChange]
    near_misses: list[NearMiss]
    crash_groups: list[CrashGroup]
    vacuous: list[ExperimentRow]
    inconclusive: list[ExperimentRow]
    errors: list[ExperimentRow]
    interrupted: list[ExperimentRow]


@dataclass
class Night(Sorted):
    """The facts of one report window: its experiments sorted (the fields of :class:`Sorted`) and the rest."""

    since: str | None
    tag: str | None
    score_name: str
    experiments: list[ExperimentRow]
    events: list[EventRecord]
    counts: dict[str, int]
    baseline: ExperimentRecord | None           # the tag-start baseline experiment (measured)
    baseline_source: str                        # "approved:<file> (#id)" | "tag-start #id" | "none"
    baseline_score: float | None
    baseline_id: int | None                     # the experiment the compared baseline came from
    baseline_classes: dict[str, dict[str, Any]]
    best: ExperimentRecord | None
    best_classes: dict[str, dict[str, Any]]
    exclusions: list[str]
    dead_gates: list[str]
    attention: list[Attention]
    time: dict[str, float]
    time_ids: dict[str, int]                    # how many experiments reported each part
    gpu: dict[str, Any]
    best_before: dict[int, tuple[float | None, int | None]] = field(default_factory=dict)
    running_best: list[tuple[int, float]] = field(default_factory=list)  # (keep id, score) for the tag
    judgements: dict[int, Judgement] = field(default_factory=dict)   # judged experiments by id
    figures: dict[int, dict[str, Any]] = field(default_factory=dict)  # _FIGURES of each experiment
    sandbox_off: list[int] = field(default_factory=list)   # experiments run with [executor] sandbox = "none"
    network_on: list[int] = field(default_factory=list)    # ... with sandbox_network = true
    sandbox_config: str | None = None   # the workspace's [executor] sandbox when no experiment recorded it
    baseline_seeds: int = 1             # how many seeds measured the tag-start baseline
    reference_seeds: int = 1            # ... and the compared baseline (approved or tag-start)
    baseline_scores: dict[int, tuple[float, ...]] = field(default_factory=dict)  # seed scores of window baselines
    # a baseline that did not finish (a halt): the (seed, score) of each of its runs that scored
    unfinished_baselines: dict[int, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    sigma: float | None = None          # the score noise the tag's baseline measured (for rounding, fmt.shown)
    class_order: tuple[str, ...] = CLASSES  # the data's classes in its manifest's order (looper's 26 by default)
    cover: Cover | None = None          # how much of the runs' clock some run trained (None: no run's phases)

    @property
    def scored(self) -> list[ExperimentRow]:
        return [e for e in self.experiments if e.score is not None]

    @property
    def rare_classes(self) -> set[str]:
        return rare_classes(self.baseline_classes or self.best_classes)


def rare_classes(classes: dict[str, dict[str, Any]]) -> set[str]:
    """Classes with truth whose support is below the median support (of classes with truth)."""
    supports = {c: int(v.get("support") or 0) for c, v in classes.items()}
    present = [s for s in supports.values() if s > 0]
    if not present:
        return set()
    median = statistics.median(present)
    return {c for c, s in supports.items() if 0 < s < median}


def seed_count(metrics: dict[str, Any] | None) -> int:
    """How many seeds measured an experiment (its metrics' ``seed_scores`` or ``runs``; else 1)."""
    metrics = metrics if isinstance(metrics, dict) else {}
    scores = metrics.get("seed_scores")
    if isinstance(scores, list) and scores:
        return len(scores)
    runs = num(metrics.get("runs"))
    return int(runs) if runs is not None and runs >= 1 else 1
