"""The facts of one report window, gathered from the store: :func:`gather` -> :class:`Night`.

Everything here only reads, through the store's records and queries
(:mod:`looper.store.queries`). Free text is redacted on its way in, so the pages can show
it as it is. The helpers at the bottom (:func:`class_rows`, :func:`class_intervals`,
:func:`nothing_kept`, :func:`gpu_line`, :func:`worker_lines`) derive what both the text and the
HTML page show.

The gate's statistics come from each verdict's metrics (:mod:`looper.core.gate`): the noise
band, the score test and the class tests. A verdict from before them (no ``noise_band`` and no
``noise_measured``) has no :class:`Judgement`: the report then shows what it always showed.
"""

from __future__ import annotations

import bisect
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper.core import exclusions as core_excl
from looper.core.classes import CLASSES
from looper.core.verdict import Outcome
from looper.report.fmt import MAX_ATTENTION, clean, id_list, num
from looper.store import TIME_PARTS, EventRecord, ExperimentRecord, ExperimentRow, Store
from looper.store.queries import (
    json_fields,
    kept_texts,
    latest_start,
    lean_experiments,
    running_best,
    tag_baseline,
)

__all__ = [
    "Attention", "CrashGroup", "Judgement", "KeptChange", "NearMiss", "Night", "SeedBar", "class_intervals",
    "class_rows", "gather", "gpu_line", "nothing_kept", "rare_classes", "seed_bars", "with_intervals",
    "worker_lines",
]

DEFAULT_SCORE = "weighted_f1"
DEFAULT_MAX_CLASS_DROP = 0.05
DEFAULT_ALPHA = 0.05
#: What a person is told when the noise could not be measured (issue 15's wording).
UNMEASURED = "noise unmeasured: no keep or discard on the score alone"
#: The figures each experiment's verdict, configuration and metrics are read for (one query).
_FIGURES: dict[str, tuple[str, str]] = {
    "band": ("verdict", "$.metrics.noise_band"),
    "measured": ("verdict", "$.metrics.noise_measured"),
    "diff": ("verdict", "$.metrics.diff"),
    "alpha": ("verdict", "$.metrics.alpha"),
    "alpha_look": ("verdict", "$.metrics.alpha_per_look"),
    "looks": ("verdict", "$.metrics.looks"),
    "sigma": ("verdict", "$.metrics.noise_sigma"),
    "df": ("verdict", "$.metrics.noise_df"),
    "test": ("verdict", "$.metrics.score_test"),
    "cand": ("verdict", "$.metrics.candidate_scores"),
    "best": ("verdict", "$.metrics.best_scores"),
    "simpler": ("verdict", "$.metrics.candidate_simpler"),
    "cut_short": ("verdict", "$.metrics.cut_short"),
    "sandbox": ("config", "$.executor.sandbox"),
    "network": ("config", "$.executor.sandbox_network"),
}


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
        alpha = (f"alpha {self.alpha:g}" if self.looks <= 1 or abs(self.alpha_look - self.alpha) < 1e-12
                 else f"alpha {self.alpha_look:.3g} ({self.alpha:g} split over {self.looks} seeds)")
        seeds = f"{self.n_candidate} candidate + {self.n_best} best seed{'s' if self.n_best != 1 else ''}"
        dof = f", df {self.df}" if self.df is not None else ""
        where = self.where
        if where == "beyond the noise" and self.p_better is not None:
            where += f" (p = {self.p_better:.2g} better)"
        elif where == "below the noise" and self.p_worse is not None:
            where += f" (p = {self.p_worse:.2g} worse)"
        elif where == "inside the noise" and self.outcome == "keep" and self.simpler:
            where += "; simpler, so kept (simpler wins a tie)"
        return (f"{diff} vs best, band {self.band:.{_digits(self.band)}f} at {alpha} "
                f"(one-sided t-test, {seeds}{dof}): {where}")


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


@dataclass(frozen=True)
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
class Night:
    """The facts of one report window."""

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
    kept: list[KeptChange]
    near_misses: list[NearMiss]
    crash_groups: list[CrashGroup]
    vacuous: list[ExperimentRow]
    inconclusive: list[ExperimentRow]
    errors: list[ExperimentRow]
    interrupted: list[ExperimentRow]
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

    @property
    def scored(self) -> list[ExperimentRow]:
        return [e for e in self.experiments if e.score is not None]

    @property
    def rare_classes(self) -> set[str]:
        return rare_classes(self.baseline_classes or self.best_classes)


# --------------------------------------------------------------------------- gather


def gather(store: Store, root: Path, since: str | None = None) -> Night:
    """The facts of the window starting at ``since`` (default: the latest ``start`` event)."""
    start_tag: str | None = None
    if since is None:
        start = latest_start(store)
        since, start_tag = (start.at, start.tag) if start else (None, None)
    experiments = lean_experiments(store, since=since, tag=start_tag, clean=clean)
    events = store.journal(since=since, tag=start_tag)
    tag = start_tag or (experiments[-1].tag if experiments else None)
    if tag is None:
        last = store.find_experiments(limit=1)
        tag = last[-1].tag if last else None
    counts: dict[str, int] = {}
    for e in experiments:
        counts[e.status.value] = counts.get(e.status.value, 0) + 1
    # the running best of every tag in the window (keeps before the window count too)
    keeps_by_tag = {t: running_best(store, t) for t in sorted({e.tag for e in experiments} | ({tag} if tag else set()))}
    best_before = _best_before(experiments, keeps_by_tag)
    baseline = tag_baseline(store, tag) if tag is not None else None
    score_name = _score_name(baseline or (store.experiment(experiments[-1].id) if experiments else None))
    ref = _reference(store, Path(root), baseline, score_name)
    best = store.best(tag) if tag else None
    best_classes = {c: m.figures() for c, m in store.class_scores(best.id).items()} if best else {}
    kinds = _sort(store, experiments, best_before)
    time, time_ids = _time(experiments)
    figures = json_fields(store, _FIGURES, tag=start_tag, since=since)
    figures = {e.id: figures.get(e.id, {}) for e in experiments}
    off, net, workspace_sandbox = _sandbox(figures, Path(root))
    night = Night(
        since=since, tag=tag, score_name=score_name, experiments=experiments, events=events, counts=counts,
        baseline=baseline, baseline_source=ref.source, baseline_score=ref.score, baseline_id=ref.id,
        baseline_classes=ref.classes, best=best, best_classes=best_classes, kept=kinds.kept,
        near_misses=kinds.near_misses, crash_groups=kinds.crash_groups, vacuous=kinds.vacuous,
        inconclusive=kinds.inconclusive, errors=kinds.errors, interrupted=kinds.interrupted,
        exclusions=[clean(x) for x in _exclusion_lines(experiments)],
        dead_gates=_dead_gates(ref.metrics, baseline, events), attention=[], time=time, time_ids=time_ids,
        gpu=_gpu_summary(experiments), best_before=best_before,
        running_best=keeps_by_tag.get(tag, []) if tag else [],
        judgements=_judgements(experiments, figures), figures=figures, sandbox_off=off, network_on=net,
        sandbox_config=workspace_sandbox, baseline_seeds=_seeds(baseline.metrics if baseline else None),
        reference_seeds=_seeds(ref.metrics), baseline_scores=_baseline_scores(store, experiments),
    )
    night.attention = attention(night, ref.approved)
    return night


def _best_before(experiments: list[ExperimentRow], keeps_by_tag: dict[str, list[tuple[int, float]]],
                 ) -> dict[int, tuple[float | None, int | None]]:
    """For each experiment: the running best of its tag just before it (score, keep id)."""
    out: dict[int, tuple[float | None, int | None]] = {}
    for e in experiments:
        ks = keeps_by_tag.get(e.tag, [])
        i = bisect.bisect_left(ks, (e.id, float("-inf")))
        out[e.id] = (ks[i - 1][1], ks[i - 1][0]) if i > 0 else (None, None)
    return out


def _score_name(exp: ExperimentRecord | None) -> str:
    name = exp.gate.get("score") if exp is not None else None
    return name if isinstance(name, str) and name else DEFAULT_SCORE


def _max_class_drop(exp: ExperimentRecord | None) -> float:
    value = num(exp.gate.get("max_class_drop")) if exp is not None else None
    return DEFAULT_MAX_CLASS_DROP if value is None else value


def _reference(store: Store, root: Path, baseline: ExperimentRecord | None, score_name: str) -> Reference:
    """The baseline the gates compare against: the newest approved file, else the tag start."""
    from looper.baselines import newest_baseline

    approved = newest_baseline(root / "baselines")
    if approved is not None:
        name, data = approved
        ref_id = data.get("experiment_id") if isinstance(data.get("experiment_id"), int) else None
        metrics = data.get("metrics") or {}
        score = num(data.get("score"))
        if score is None:
            score = num(metrics.get(score_name))
        classes = metrics.get("classes")
        return Reference(
            source=f"approved:{name}" + (f" (#{ref_id})" if ref_id is not None else ""), score=score, id=ref_id,
            metrics=metrics, approved=True,
            classes={str(k): dict(v) for k, v in classes.items()} if isinstance(classes, dict) else {})
    if baseline is not None:
        return Reference(source=f"tag-start #{baseline.id}", score=num(baseline.score), id=baseline.id,
                         metrics=baseline.metrics or {}, approved=False,
                         classes={c: m.figures() for c, m in store.class_scores(baseline.id).items()})
    return Reference(source="none", score=None, id=None, metrics={}, classes={}, approved=False)


def _seeds(metrics: dict[str, Any] | None) -> int:
    """How many seeds measured an experiment (its metrics' ``seed_scores`` or ``runs``; else 1)."""
    metrics = metrics if isinstance(metrics, dict) else {}
    scores = metrics.get("seed_scores")
    if isinstance(scores, list) and scores:
        return len(scores)
    runs = num(metrics.get("runs"))
    return int(runs) if runs is not None and runs >= 1 else 1


def _baseline_scores(store: Store, experiments: list[ExperimentRow]) -> dict[int, tuple[float, ...]]:
    """The seed scores of each scored baseline in the window (a few experiments: read whole)."""
    out: dict[int, tuple[float, ...]] = {}
    for e in experiments:
        if e.kind == "baseline" and e.score is not None:
            metrics = store.experiment(e.id).metrics or {}
            out[e.id] = _floats(metrics.get("seed_scores"))
    return out


def _floats(value: Any) -> tuple[float, ...]:
    if not isinstance(value, list):
        return ()
    out = tuple(v for v in (num(x) for x in value) if v is not None)
    return out if len(out) == len(value) else ()


def _judgements(experiments: list[ExperimentRow], figures: dict[int, dict[str, Any]]) -> dict[int, Judgement]:
    """The judged experiments (a gate verdict with the noise figures) by id."""
    out: dict[int, Judgement] = {}
    judged = (Outcome.KEEP, Outcome.DISCARD, Outcome.INCONCLUSIVE)
    for e in experiments:
        f = figures.get(e.id) or {}
        if e.status not in judged or e.kind == "baseline" or (f.get("band") is None and f.get("measured") is None):
            continue
        band = num(f.get("band"))
        alpha = num(f.get("alpha")) or DEFAULT_ALPHA
        test = f.get("test") if isinstance(f.get("test"), dict) else {}
        cand = _floats(f.get("cand")) or ((float(e.score),) if e.score is not None else ())
        df = num(f.get("df"))
        out[e.id] = Judgement(
            id=e.id, outcome=e.status.value, diff=num(f.get("diff")), band=band,
            measured=bool(f.get("measured")) and band is not None, alpha=alpha,
            alpha_look=num(f.get("alpha_look")) or alpha, looks=int(num(f.get("looks")) or 1),
            candidate_scores=cand, n_best=len(_floats(f.get("best"))) or 1,
            df=int(df) if df is not None and df >= 1 else None,
            p_better=num(test.get("p_better")), p_worse=num(test.get("p_worse")), simpler=f.get("simpler") is True,
            class_failures=tuple(r for r in e.blocking if r.startswith("recall.")))
    return out


def _sandbox(figures: dict[int, dict[str, Any]], root: Path) -> tuple[list[int], list[int], str | None]:
    """(experiments run without the training sandbox, experiments whose sandbox let train.py reach
    the network, the workspace's own ``[executor] sandbox`` when no experiment recorded one)."""
    off = [i for i, f in figures.items() if f.get("sandbox") == "none"]
    net = [i for i, f in figures.items() if f.get("network") is True and f.get("sandbox") != "none"]
    if any(f.get("sandbox") is not None for f in figures.values()):
        return off, net, None
    toml = root / "looper.toml"
    if not toml.is_file():
        return off, net, None
    try:
        from looper.config import load_config

        return off, net, load_config(toml).executor.sandbox
    except Exception:  # noqa: BLE001 - an unreadable config is `looper check`'s to report, not the report's
        return off, net, None


def _class_reasons(blocking: Iterable[str]) -> list[str]:
    out = []
    for reason in blocking:
        r = str(reason)
        if r.startswith("recall.") or any(c in r for c in CLASSES):
            out.append(r)
    return out


def _near_miss(e: ExperimentRow, bb: float | None, bb_id: int | None) -> NearMiss | None:
    """A discard that beat the best overall but failed a class gate, else None."""
    reasons = _class_reasons(e.blocking)
    diff = num(e.verdict_diff)
    if diff is None and bb is not None and e.score is not None:
        diff = float(e.score) - bb
    if not reasons or diff is None or diff <= 0:
        return None
    return NearMiss(id=e.id, description=clean(e.description), score=float(e.score or 0.0), best_before=bb,
                    best_before_id=bb_id, diff=diff, class_reasons=tuple(clean(r) for r in reasons))


def _sort(store: Store, experiments: list[ExperimentRow],
          best_before: dict[int, tuple[float | None, int | None]]) -> Sorted:
    """Kept changes (their rationale and diff: one more query), near misses, crashes, the rest."""
    texts = kept_texts(store, [e.id for e in experiments if e.status is Outcome.KEEP and e.kind == "candidate"])
    out = Sorted([], [], [], [], [], [], [])
    crashes: dict[str, list[ExperimentRow]] = {}
    rest = {Outcome.VACUOUS: out.vacuous, Outcome.INCONCLUSIVE: out.inconclusive, Outcome.ERROR: out.errors,
            Outcome.INTERRUPTED: out.interrupted}
    for e in experiments:
        bb, bb_id = best_before[e.id]
        if e.status is Outcome.KEEP and e.kind == "candidate":
            rationale, diff = texts[e.id]
            out.kept.append(KeptChange(
                id=e.id, tag=e.tag, commit=e.commit, description=clean(e.description), rationale=clean(rationale),
                diff=clean(diff), score=float(e.score or 0.0), best_before=bb, best_before_id=bb_id))
        elif e.status is Outcome.DISCARD and e.score is not None:
            near = _near_miss(e, bb, bb_id)
            if near is not None:
                out.near_misses.append(near)
        elif e.status is Outcome.CRASH:
            crashes.setdefault(e.failure_signature or "(no signature)", []).append(e)
        elif e.status in rest:
            rest[e.status].append(e)
    out.crash_groups.extend(
        CrashGroup(signature=clean(sig), ids=tuple(x.id for x in rows),
                   example_reason=clean(next(iter(rows[0].blocking), "")),
                   descriptions=tuple(dict.fromkeys(clean(x.description) for x in rows)))
        for sig, rows in sorted(crashes.items(), key=lambda kv: (-len(kv[1]), kv[1][0].id)))
    return out


def _exclusion_lines(experiments: Iterable[ExperimentRow]) -> list[str]:
    lines: list[str] = []
    for e in experiments:
        if not e.status.is_exclusion:
            continue
        line = core_excl.exclusion_for(e.description or "", e.status, [str(b) for b in e.blocking])
        if line:
            lines.append(f"{line} (#{e.id})")
    return list(core_excl.dedupe(lines))


def _dead_gates(metrics: dict[str, Any], baseline: ExperimentRecord | None, events: list[EventRecord]) -> list[str]:
    """Class gates of the compared baseline that can never fire; else what the daemon journaled."""
    dead: list[str] = []
    if metrics:
        try:
            from looper.core.gate import dead_gates

            dead = list(dead_gates(metrics, _max_class_drop(baseline)))
        except Exception:  # noqa: BLE001 - fall back to what the daemon journaled
            dead = []
    if not dead:
        for ev in reversed(events):
            if ev.kind == "baseline" and isinstance(ev.data, dict) and ev.data.get("dead_gates"):
                return [str(x) for x in ev.data["dead_gates"]]
    return dead


def _time(experiments: list[ExperimentRow]) -> tuple[dict[str, float], dict[str, int]]:
    """Seconds per part of the time, and how many experiments reported each."""
    time: dict[str, float] = {}
    time_ids: dict[str, int] = {}
    for part in TIME_PARTS:
        known = [v for v in (num(e.seconds(part)) for e in experiments) if v is not None]
        time[part] = float(sum(known))
        time_ids[part] = len(known)
    return time, time_ids


def _gpu_summary(experiments: list[ExperimentRow]) -> dict[str, Any]:
    names: dict[str, int] = {}
    peak: tuple[float, int] | None = None
    train_peak: tuple[float, int] | None = None
    utils: list[float] = []
    lost: list[int] = []
    xid: list[int] = []
    ecc: list[int] = []
    for e in experiments:
        g = e.gpu if isinstance(e.gpu, dict) else None
        if g:
            if g.get("name"):
                names[str(g["name"])] = names.get(str(g["name"]), 0) + 1
            p = num(g.get("peak_memory_mb"))
            if p is not None and (peak is None or p > peak[0]):
                peak = (p, e.id)
            u = num(g.get("mean_utilization_pct"))
            if u is not None:
                utils.append(u)
            if g.get("lost"):
                lost.append(e.id)
            if g.get("xid"):
                xid.append(e.id)
            s, f = num(g.get("ecc_uncorrected_start")), num(g.get("ecc_uncorrected_end"))
            if s is not None and f is not None and f > s:
                ecc.append(e.id)
        p = num(e.train_peak_memory_mb)
        if p is not None and (train_peak is None or p > train_peak[0]):
            train_peak = (p, e.id)
    return {
        "names": names, "peak_memory_mb": peak, "train_peak_memory_mb": train_peak,
        "mean_utilization_pct": statistics.fmean(utils) if utils else None, "utilization_samples": len(utils),
        "lost": lost, "xid": xid, "ecc": ecc,
    }


# --------------------------------------------------------------------------- attention


def attention(n: Night, approved: bool) -> list[Attention]:
    """What needs a person, most urgent first: halts, then warnings, then notes."""
    return [*_halts(n), *_warnings(n), *_notes(n, approved)]


def _halts(n: Night) -> list[Attention]:
    out: list[Attention] = []
    halted_ids: set[int] = set()
    for ev in n.events:
        if ev.kind in ("halt", "stuck"):
            what = "HALTED (harness error)" if ev.kind == "halt" else "HALTED (stuck loop)"
            out.append(Attention("halt", f"{what} at {ev.at[:19]}: {clean(ev.message)}", ev.experiment_id))
            if ev.experiment_id is not None:
                halted_ids.add(int(ev.experiment_id))
    for e in n.errors:
        if e.id in halted_ids:
            continue
        reason = "; ".join(clean(b) for b in e.blocking) or "(no reason recorded)"
        out.append(Attention("halt", f"harness error in #{e.id}: {reason}", e.id))
    for ev in n.events:
        if ev.kind == "page_failed":
            out.append(Attention("halt", f"a page was NOT delivered at {ev.at[:19]}: {clean(ev.message)}",
                                 ev.experiment_id))
    return out


def _sandbox_warnings(n: Night) -> list[Attention]:
    out: list[Attention] = []
    if n.sandbox_off:
        out.append(Attention(
            "warn", f'training ran WITHOUT its sandbox ([executor] sandbox = "none") in {len(n.sandbox_off)} '
                    f"experiment(s): {id_list(n.sandbox_off)}; train.py could write the database, the checkout and "
                    "the venv and read the test pages (docs/SECURITY.md)", n.sandbox_off[-1]))
    elif n.sandbox_config == "none":
        out.append(Attention(
            "warn", 'the workspace\'s looper.toml sets [executor] sandbox = "none": training runs WITHOUT its '
                    "sandbox (train.py can write the database, the checkout and the venv and read the test pages; "
                    "docs/SECURITY.md)"))
    if n.network_on:
        out.append(Attention("note", f"train.py could reach the network ([executor] sandbox_network = true) in "
                                     f"{id_list(n.network_on)}", n.network_on[-1]))
    return out


def _cut_short_warning(n: Night) -> list[Attention]:
    """Experiments whose runs the wall clock ended before the tag's step budget (not comparable)."""
    cut = [i for i, f in n.figures.items() if f.get("cut_short")]
    if not cut:
        return []
    return [Attention(
        "warn", f"{len(cut)} experiment(s) trained fewer steps than the tag's step budget (the wall clock cut "
                f"them short: a busy machine, or a slower change): {id_list(cut)}; a loss there is inconclusive, "
                "not a discard, and a keep stands flagged (loop.max_steps, docs/REFERENCE.md)", cut[-1])]


def _warnings(n: Night) -> list[Attention]:
    out: list[Attention] = [*_sandbox_warnings(n), *_cut_short_warning(n)]
    starts = [ev for ev in n.events if ev.kind == "start"]
    if starts:
        after = [ev for ev in n.events if ev.id > starts[-1].id and ev.kind in ("stop", "halt", "stuck")]
        if not after:
            out.append(Attention("warn", f"no stop or halt since the daemon started at {starts[-1].at[:19]}: "
                                         "it is still running, or it died"))
    if n.dead_gates:
        shown = ", ".join(n.dead_gates[:10]) + (f" and {len(n.dead_gates) - 10} more" if len(n.dead_gates) > 10 else "")
        src = f"#{n.baseline_id}" if n.baseline_id is not None else n.baseline_source
        out.append(Attention("warn", f"{len(n.dead_gates)} class gate(s) are dead (baseline {src} recall not above "
                                     f"the drop limit; they can never fire): {shown}", n.baseline_id))
    ranked = sorted(n.near_misses, key=lambda x: -x.diff)
    for nm in ranked[:MAX_ATTENTION]:
        out.append(Attention(
            "warn", f"near miss #{nm.id} beat the best by {nm.diff:+.4f} but failed a class gate: "
                    f"{'; '.join(nm.class_reasons)}", nm.id, nm.command))
    if len(ranked) > MAX_ATTENTION:
        rest = ranked[MAX_ATTENTION:]
        out.append(Attention("warn", f"{len(rest)} more near miss(es): {id_list(x.id for x in rest)}"))
    return out


def _notes(n: Night, approved: bool) -> list[Attention]:
    out: list[Attention] = []
    for e in n.interrupted[:MAX_ATTENTION]:
        reason = "; ".join(clean(b) for b in e.blocking) or "interrupted"
        out.append(Attention("note", f"#{e.id} was interrupted: {reason}", e.id))
    if len(n.interrupted) > MAX_ATTENTION:
        rest = n.interrupted[MAX_ATTENTION:]
        out.append(Attention("note", f"{len(rest)} more interrupted: {id_list(e.id for e in rest)}"))
    if not approved and n.baseline is not None:
        out.append(Attention("note", f"no approved baseline yet: the gates compare against the tag-start baseline "
                                     f"#{n.baseline.id}", n.baseline.id, f"looper baseline approve {n.baseline.id}"))
    return out


# --------------------------------------------------------------------------- derived views


def rare_classes(classes: dict[str, dict[str, Any]]) -> set[str]:
    """Classes with truth whose support is below the median support (of classes with truth)."""
    supports = {c: int(v.get("support") or 0) for c, v in classes.items()}
    present = [s for s in supports.values() if s > 0]
    if not present:
        return set()
    median = statistics.median(present)
    return {c for c, s in supports.items() if 0 < s < median}


def class_rows(n: Night) -> list[dict[str, Any]]:
    """Per class: baseline vs best precision and recall with deltas, rare classes marked."""
    names = [c for c in CLASSES if c in n.baseline_classes or c in n.best_classes]
    names += sorted((set(n.baseline_classes) | set(n.best_classes)) - set(names))
    rare = n.rare_classes
    rows = []
    for c in names:
        b, k = n.baseline_classes.get(c, {}), n.best_classes.get(c, {})
        pb, pk, rb, rk = num(b.get("precision")), num(k.get("precision")), num(b.get("recall")), num(k.get("recall"))
        rows.append({
            "class": c, "support": int(b.get("support") or k.get("support") or 0), "rare": c in rare,
            "p_base": pb, "p_best": pk, "d_precision": None if pb is None or pk is None else pk - pb,
            "r_base": rb, "r_best": rk, "d_recall": None if rb is None or rk is None else rk - rb,
        })
    return rows


def worker_lines(n: Night) -> list[str]:
    """One line per worker: how many experiments, their outcomes, the last one and when."""
    by: dict[str, list[ExperimentRow]] = {}
    for e in n.experiments:
        if e.kind == "candidate":
            by.setdefault(e.worker or "w0", []).append(e)
    lines = []
    for worker, rows in sorted(by.items()):
        counts: dict[str, int] = {}
        for r in rows:
            counts[r.status.value] = counts.get(r.status.value, 0) + 1
        last = rows[-1]
        lines.append(f"{worker}: {len(rows)} experiment(s) ("
                     + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                     + f"); last #{last.id} {last.status.value} since {last.started_at or '?'}")
    return lines


def gpu_line(n: Night) -> str:
    g = n.gpu
    parts = []
    if g["names"]:
        parts.append("GPU " + ", ".join(f"{k} ({v})" for k, v in g["names"].items()))
    if g["peak_memory_mb"]:
        parts.append(f"peak memory {g['peak_memory_mb'][0]:.0f} MB (#{g['peak_memory_mb'][1]})")
    if g["mean_utilization_pct"] is not None:
        parts.append(f"mean utilisation {g['mean_utilization_pct']:.1f}% over {g['utilization_samples']} run(s)")
    if g["train_peak_memory_mb"]:
        parts.append(f"train.py peak memory {g['train_peak_memory_mb'][0]:.0f} MB (#{g['train_peak_memory_mb'][1]})")
    if g["lost"]:
        parts.append("GPU LOST in " + " ".join(f"#{i}" for i in g["lost"]))
    if g["xid"]:
        parts.append("Xid errors in " + " ".join(f"#{i}" for i in g["xid"]))
    if g["ecc"]:
        parts.append("new uncorrected ECC errors in " + " ".join(f"#{i}" for i in g["ecc"]))
    return "  " + ("; ".join(parts) if parts else "no GPU figures recorded")


#: The counts in a class reason of the gate: "10 of 10 found -> 0 of 10".
_COUNTS = re.compile(r"(\d+) of (\d+) found -> (\d+) of (\d+)")


def with_intervals(reason: str) -> str:
    """A class reason of the gate with the 95 % Wilson intervals of its two recalls appended
    (``...; 95% intervals 0.72-1.00 -> 0.00-0.28``); other reasons come back unchanged."""
    m = _COUNTS.search(reason)
    if m is None:
        return reason
    rf, rt, cf, ct = (int(x) for x in m.groups())
    if not (0 <= rf <= rt and 0 <= cf <= ct):
        return reason
    (a, b), (c, d) = _interval(rf, rt), _interval(cf, ct)
    return f"{reason}; 95% intervals {a:.2f}-{b:.2f} -> {c:.2f}-{d:.2f}"


def step_budget_line(n: Night) -> str | None:
    """The tag's step budget in words, when its baseline ran under one (``loop.max_steps``)."""
    verdict = n.baseline.verdict if n.baseline is not None else None
    metrics = (verdict.get("metrics") if isinstance(verdict, dict) else None) or {}
    steps = metrics.get("max_steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0:
        return None
    warm = metrics.get("warmup") if isinstance(metrics.get("warmup"), dict) else None
    how = (f"80 % of the {warm.get('steps')} steps its warm-up run fitted into the wall clock" if warm
           else "set in looper.toml")
    return f"step budget: every run trains {steps} optimizer steps ({how})"


def nothing_kept(n: Night) -> list[str]:
    """Why the window kept no candidate, in numbers; [] when something was kept or nothing judged.

    "no change beat the noise band 0.040 (alpha 0.05): ..." over the judged experiments whose
    noise was measured, and "noise unmeasured: no keep or discard on the score alone" for
    those whose noise was not.
    """
    if n.kept:
        return []
    cands = [e for e in n.experiments if e.kind == "candidate"]
    judged = [n.judgements[e.id] for e in cands if e.id in n.judgements]
    lines: list[str] = []
    measured = [j for j in judged if j.where != "unmeasured"]
    if measured:
        bands = sorted(j.band for j in measured if j.band is not None)
        d = _digits(bands[0])
        band = f"{bands[0]:.{d}f}" if bands[-1] - bands[0] < 0.5 * 10 ** -d else f"{bands[0]:.{d}f} to {bands[-1]:.{d}f}"
        alphas = sorted({j.alpha for j in measured})
        alpha = ", ".join(f"{a:g}" for a in alphas)
        counts = {w: sum(1 for j in measured if j.where == w) for w in ("inside the noise", "below the noise",
                                                                        "beyond the noise")}
        classes = sum(1 for j in measured if j.class_failures)
        close = max((j for j in measured if j.diff is not None), key=lambda j: j.diff or 0.0, default=None)
        parts = [f"{counts['inside the noise']} inside the noise", f"{counts['below the noise']} worse beyond it"]
        if counts["beyond the noise"]:
            parts.append(f"{counts['beyond the noise']} better beyond it but failed a class gate")
        line = (f"no change beat the noise band {band} (alpha {alpha}): of {len(measured)} judged, "
                + ", ".join(parts) + f"; {classes} failed a class gate")
        if close is not None and close.diff is not None and close.band is not None:
            dd = _digits(close.diff, close.band)
            line += f"; closest #{close.id} at {close.diff:+.{dd}f} vs its band {close.band:.{dd}f}"
        lines.append(line)
    unmeasured = [j for j in judged if j.where == "unmeasured"]
    if unmeasured:
        src = f"#{n.baseline.id}" if n.baseline is not None else n.baseline_source
        lines.append(f"{UNMEASURED} ({len(unmeasured)} judged: {id_list(j.id for j in unmeasured)}; the baseline "
                     f"{src} was measured with {n.baseline_seeds} seed(s), at least 2 are needed)")
    if not lines and cands:
        scored = [e for e in cands if e.score is not None]
        if scored:
            lines.append(f"no candidate was kept: {len(cands)} tried, {len(scored)} scored; their verdicts carry "
                         "no noise figures (judged before the statistical gate)")
        else:
            counts: dict[str, int] = {}
            for e in cands:
                counts[e.status.value] = counts.get(e.status.value, 0) + 1
            lines.append(f"no candidate was kept: {len(cands)} tried, none measured a score ("
                         + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")")
    return lines


def seed_bars(n: Night) -> list[SeedBar]:
    """Scored experiments measured with more than one seed: mean +- the band their verdict used.

    A candidate's band is its verdict's noise band (the smallest difference from the best its
    score test calls significant). The baseline has no verdict: its band is the one a
    one-seed candidate would have to beat, from the spread of its own seeds (one-sided t at
    the night's alpha).
    """
    from looper.core import stats

    out: list[SeedBar] = []
    alpha = next((j.alpha for j in n.judgements.values()), DEFAULT_ALPHA)
    for e in n.scored:
        j = n.judgements.get(e.id)
        if j is not None and j.n_candidate > 1 and j.band is not None:
            mean = statistics.fmean(j.candidate_scores)
            out.append(SeedBar(e.id, mean, j.band, j.candidate_scores,
                               f"noise band of its verdict at alpha {j.alpha_look:.3g}"))
            continue
        scores = n.baseline_scores.get(e.id, ())
        if len(scores) > 1:
            sigma = statistics.stdev(scores)
            band = stats.score_band(sigma, len(scores) - 1, 1, len(scores), alpha)
            out.append(SeedBar(e.id, statistics.fmean(scores), band, scores,
                               f"the band a one-seed candidate must beat, alpha {alpha:g} (sigma {sigma:.4f})"))
    return out


def _interval(found: int, total: int) -> tuple[float, float]:
    from looper.core.stats import recall_interval

    return recall_interval(found, total)


def _pooled(row: dict[str, Any], runs: int) -> tuple[int, int] | None:
    """(found, total) instance-runs of a class from its mean recall, support and seed count."""
    recall, support = num(row.get("recall")), num(row.get("support"))
    if recall is None or support is None or support <= 0:
        return None
    total = int(round(support)) * runs
    return min(total, max(0, round(recall * total))), total


def _same_baseline(judged_against: str, shown: str) -> bool:
    """Whether a verdict's ``baseline`` ("tag-start" | "approved:<file>") is the report's baseline
    (``"tag-start #id"`` | ``"approved:<file> (#id)"``): only then are its class counts the ones shown."""
    if judged_against == "tag-start":
        return shown.startswith("tag-start")
    return judged_against.startswith("approved:") and (shown == judged_against or shown.startswith(judged_against + " "))


def class_intervals(n: Night) -> list[dict[str, Any]]:
    """Per class with truth: the baseline's and the best's recall with 95 % Wilson intervals.

    From the best's verdict when it carries the gate's class tests against the baseline the
    report shows (the counts pooled over the seeds it compared), else from the recalls,
    supports and seed counts of the two experiments. ``fails``: the gate failed the class (a discard reason).
    """
    best = n.best
    tests: dict[str, dict[str, Any]] = {}
    metrics = (best.verdict or {}).get("metrics") if best is not None and isinstance(best.verdict, dict) else None
    if _same_baseline(str((metrics or {}).get("baseline") or ""), n.baseline_source):
        for t in (metrics or {}).get("class_tests") or []:
            if isinstance(t, dict) and t.get("against") == "baseline" and isinstance(t.get("class"), str):
                tests[t["class"]] = t
    base_runs = n.reference_seeds
    best_runs = _seeds(best.metrics if best is not None else None)
    rare = n.rare_classes
    rows = []
    for r in class_rows(n):
        c = r["class"]
        t = tests.get(c)
        if t is not None and all(isinstance(t.get(k), int) for k in ("ref_found", "ref_total", "cand_found",
                                                                      "cand_total")):
            base, top, source = (t["ref_found"], t["ref_total"]), (t["cand_found"], t["cand_total"]), "gate"
        else:
            base = _pooled(n.baseline_classes.get(c, {}), base_runs)
            top = _pooled(n.best_classes.get(c, {}), best_runs)
            source = "recall x support x seeds"
        if base is None and top is None:
            continue
        row: dict[str, Any] = {"class": c, "support": r["support"], "rare": c in rare, "source": source,
                               "fails": bool(t and t.get("fails")),
                               "p": num(t.get("p")) if t else None, "test": t.get("test") if t else None}
        for side, counts in (("base", base), ("best", top)):
            if counts is None:
                row.update({f"{side}_found": None, f"{side}_total": None, f"{side}_recall": None,
                            f"{side}_lo": None, f"{side}_hi": None})
                continue
            lo, hi = _interval(*counts)
            row.update({f"{side}_found": counts[0], f"{side}_total": counts[1],
                        f"{side}_recall": counts[0] / counts[1] if counts[1] else None, f"{side}_lo": lo,
                        f"{side}_hi": hi})
        rows.append(row)
    return rows
