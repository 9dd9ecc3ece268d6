"""The facts of one report window, gathered from the store: :func:`gather` -> :class:`Night`.

Everything here only reads, through the store's records and queries
(:mod:`looper.store.queries`). Free text is redacted on its way in, so the pages can show
it as it is. The values live in :mod:`looper.report.night`; what the text and the HTML page
derive from them in :mod:`~looper.report.attention` (what needs a person),
:mod:`~looper.report.classes` (class tables and intervals), :mod:`~looper.report.noise`
(why nothing was kept, seed bars) and :mod:`~looper.report.lines` (one-line summaries); the
pages import them from there.

The gate's statistics come from each verdict's metrics (:mod:`looper.core.keep.gate`): the noise
band, the score test and the class tests. A verdict from before them (no ``noise_band`` and no
``noise_measured``) has no :class:`Judgement`: the report then shows what it always showed.
"""

from __future__ import annotations

import bisect
import dataclasses
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from looper.core.keep.score import PAIRED_TEST
from looper.core.propose import exclusions as core_excl
from looper.core.run.phases import Cover, night_cover
from looper.core.scoring.classes import CLASSES
from looper.core.verdicts.verdict import Outcome
from looper.data.manifest import manifest_classes, workspace_data_dir
from looper.report.attention import attention
from looper.report.fmt import clean, num, tag_sigma
from looper.report.night import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_CLASS_DROP,
    DEFAULT_SCORE,
    CrashGroup,
    Judgement,
    KeptChange,
    NearMiss,
    Night,
    Reference,
    Sorted,
)
from looper.report.night import seed_count as _seeds
from looper.store import TIME_PARTS, EventRecord, ExperimentRecord, ExperimentRow, Store
from looper.store.queries import (
    json_fields,
    kept_texts,
    latest_start,
    lean_experiments,
    run_clock,
    running_best,
    tag_baseline,
)

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
    "paired": ("verdict", "$.metrics.paired_test"),
    "used": ("verdict", "$.metrics.score_test_used"),
    "test_alpha": ("verdict", "$.metrics.score_test_alpha"),
    "share": ("verdict", "$.metrics.alpha_share"),
    "cand": ("verdict", "$.metrics.candidate_scores"),
    "best": ("verdict", "$.metrics.best_scores"),
    "simpler": ("verdict", "$.metrics.candidate_simpler"),
    "cut_short": ("verdict", "$.metrics.cut_short"),
    "sandbox": ("config", "$.executor.sandbox"),
    "network": ("config", "$.executor.sandbox_network"),
    "agent_kind": ("config", "$.agent.kind"),
    "agent_sandbox": ("config", "$.agent.sandbox"),
}


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
    order = _class_order(root)
    kinds = _sort(store, experiments, best_before, order)
    time, time_ids = _time(experiments)
    figures = json_fields(store, _FIGURES, tag=start_tag, since=since)
    figures = {e.id: figures.get(e.id, {}) for e in experiments}
    off, net, workspace_sandbox = _sandbox(figures, Path(root))
    night = Night(
        since=since, tag=tag, score_name=score_name, experiments=experiments, events=events, counts=counts,
        baseline=baseline, baseline_source=ref.source, baseline_score=ref.score, baseline_id=ref.id,
        baseline_classes=ref.classes, best=best, best_classes=best_classes,
        **{f.name: getattr(kinds, f.name) for f in dataclasses.fields(Sorted)},
        exclusions=[clean(x) for x in _exclusion_lines(experiments)],
        dead_gates=_dead_gates(ref.metrics, baseline, events), attention=[], time=time, time_ids=time_ids,
        gpu=_gpu_summary(experiments), best_before=best_before,
        running_best=keeps_by_tag.get(tag, []) if tag else [],
        judgements=_judgements(experiments, figures), figures=figures, sandbox_off=off, network_on=net,
        sandbox_config=workspace_sandbox, baseline_seeds=_seeds(baseline.metrics if baseline else None),
        reference_seeds=_seeds(ref.metrics), baseline_scores=_baseline_scores(store, experiments),
        unfinished_baselines=_unfinished_baselines(store, experiments),
        sigma=tag_sigma(store, tag), class_order=order,
        cover=_last_night_cover(store, since, events, start_tag or tag),
    )
    night.attention = attention(night, ref.approved)
    return night


def _last_night_cover(store: Store, since: str | None, events: list[EventRecord], tag: str | None) -> Cover | None:
    """How much of the window's last daemon night some run trained: its runs from its "start" (else the window's
    own start) to its last entry (a later ``looper confirm``'s runs are not the night's)."""
    starts = [i for i, e in enumerate(events) if e.kind == "start"]
    first = starts[-1] + 1 if starts else 0
    begin = events[starts[-1]].at if starts else since
    until = next((e.at for e in events[first:] if e.ends_daemon), None)
    return night_cover(run_clock(store, tag=tag, since=begin, until=until))


def _class_order(root: Path) -> tuple[str, ...]:
    """The data's classes in its manifest's order (the workspace's ``[data] dir``); looper's 26 when it has
    no readable manifest."""
    try:
        return tuple(manifest_classes(workspace_data_dir(root)))
    except ValueError:
        return CLASSES


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
    from looper.workspace.baselines import newest_baseline

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


def _baseline_scores(store: Store, experiments: list[ExperimentRow]) -> dict[int, tuple[float, ...]]:
    """The seed scores of each scored baseline in the window (a few experiments: read whole)."""
    out: dict[int, tuple[float, ...]] = {}
    for e in experiments:
        if e.kind == "baseline" and e.score is not None:
            metrics = store.experiment(e.id).metrics or {}
            out[e.id] = _floats(metrics.get("seed_scores"))
    return out


def _unfinished_baselines(store: Store, experiments: list[ExperimentRow]) -> dict[int, tuple[tuple[int, float], ...]]:
    """Each baseline of the window that has no score (it halted), with the seeds of it that did score."""
    out: dict[int, tuple[tuple[int, float], ...]] = {}
    for e in experiments:
        if e.kind == "baseline" and e.score is None:
            scored = tuple((int(r.seed), float(r.score)) for r in store.run_records(e.id)
                           if r.seed is not None and num(r.score) is not None)
            if scored:
                out[e.id] = scored
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
        # the score test the verdict rests on: the paired t when the gate chose it, else the pooled t
        paired = f.get("paired") if isinstance(f.get("paired"), dict) else {}
        used_paired = bool(paired) and f.get("used") == PAIRED_TEST
        test = paired if used_paired else (f.get("test") if isinstance(f.get("test"), dict) else {})
        cand = _floats(f.get("cand")) or ((float(e.score),) if e.score is not None else ())
        df = num(paired.get("df")) if used_paired else num(f.get("df"))
        look = num(f.get("alpha_look")) or alpha
        test_alpha = num(f.get("test_alpha"))  # the chosen test's threshold: half the look's with two tests
        out[e.id] = Judgement(
            id=e.id, outcome=e.status.value, diff=num(f.get("diff")), band=band,
            measured=bool(f.get("measured")) and band is not None, alpha=alpha,
            alpha_look=test_alpha or look, looks=int(num(f.get("looks")) or 1),
            candidate_scores=cand, n_best=len(_floats(f.get("best"))) or 1,
            df=int(df) if df is not None and df >= 1 else None,
            p_better=num(test.get("p_better")), p_worse=num(test.get("p_worse")), simpler=f.get("simpler") is True,
            class_failures=tuple(r for r in e.blocking if r.startswith("recall.")),
            share=num(f.get("share")), paired_seeds=int(num(paired.get("pairs")) or 0) if used_paired else 0,
            halved=test_alpha is not None and test_alpha < look - 1e-12)
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


def _class_reasons(blocking: Iterable[str], classes: tuple[str, ...]) -> list[str]:
    out = []
    for reason in blocking:
        r = str(reason)
        if r.startswith("recall.") or any(c in r for c in classes):
            out.append(r)
    return out


def _near_miss(e: ExperimentRow, bb: float | None, bb_id: int | None, classes: tuple[str, ...]) -> NearMiss | None:
    """A discard that beat the best overall but failed a class gate, else None."""
    reasons = _class_reasons(e.blocking, classes)
    diff = num(e.verdict_diff)
    if diff is None and bb is not None and e.score is not None:
        diff = float(e.score) - bb
    if not reasons or diff is None or diff <= 0:
        return None
    return NearMiss(id=e.id, description=clean(e.description), score=float(e.score or 0.0), best_before=bb,
                    best_before_id=bb_id, diff=diff, class_reasons=tuple(clean(r) for r in reasons))


def _sort(store: Store, experiments: list[ExperimentRow],
          best_before: dict[int, tuple[float | None, int | None]], classes: tuple[str, ...]) -> Sorted:
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
            near = _near_miss(e, bb, bb_id, classes)
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
            from looper.core.keep.gate import dead_gates

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
