"""What one experiment looks like in a tracking system: params, metrics, tags, artifacts (no I/O
beyond reading the store and the run folder's MATCHES.json; nothing here talks to a server)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper.core.propose import hyperblock
from looper.core.verdicts.verdict import Outcome

KEY = "looper.experiment_id"  # the stable key: one tracked run per experiment of a tag
RUN_KEY = "looper.run_id"  # one nested run per recorded run (seed) of it
HEADLINE = ("weighted_f1", "macro_f1", "map50")
PER_CLASS = ("precision", "recall", "f1", "ap50")
# outcomes a tracking system shows as FINISHED; the rest (crash, error, vacuous, interrupted...) FAILED
FINISHED = (Outcome.KEEP, Outcome.DISCARD, Outcome.INCONCLUSIVE)


@dataclass(frozen=True)
class Tracked:
    """One experiment or one of its runs, as a tracking system records it."""

    name: str
    tags: dict[str, str]
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)  # file name -> text (str) or JSON (dict)
    status: str = "FINISHED"
    start_ms: int = 0
    end_ms: int | None = None


def millis(iso: str | None) -> int | None:
    from datetime import datetime

    return int(datetime.fromisoformat(iso).timestamp() * 1000) if iso else None


def metrics_of(m: dict[str, Any] | None) -> dict[str, float]:
    """weighted F1, macro F1, mAP50 and per class precision, recall, F1, AP50 (finite numbers only)."""
    out: dict[str, float] = {}
    if not isinstance(m, dict):
        return out

    def put(key: str, v: Any) -> None:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[key] = float(v)

    for k in HEADLINE:
        put(k, m.get(k))
    for name, row in (m.get("classes") or {}).items():
        for k in PER_CLASS:
            put(f"{k}/{name}", (row or {}).get(k))
    return out


def knob_params(source: str, baseline_source: str | None) -> dict[str, str]:
    """The knob values that differ from the baseline's (the baseline itself: all its knobs)."""
    try:
        if baseline_source is None or baseline_source == source:
            return {k: str(v) for k, v in hyperblock.read_knobs(source).items()}
        return {k: str(new) for k, (_, new) in hyperblock.knob_changes(baseline_source, source).items()}
    except Exception:  # noqa: BLE001 - a source without a readable block has no knobs to show
        return {}


def p_value(vm: dict[str, Any]) -> float | None:
    """The one-sided p-value of the score test that decided (the paired or the pooled one)."""
    used = vm.get("score_test_used")
    tests = [t for t in (vm.get("paired_test"), vm.get("score_test")) if isinstance(t, dict)]
    for t in tests:
        if t.get("test") == used and isinstance(t.get("p_better"), (int, float)):
            return float(t["p_better"])
    return None


def experiment_tags(exp: Any, vm: dict[str, Any]) -> dict[str, str]:
    reason = "; ".join(exp.blocking) or str(vm.get("summary") or "")
    tags = {KEY: str(exp.id), "looper.tag": exp.tag, "looper.kind": exp.kind, "looper.status": exp.status.value,
            "looper.reason": reason[:4000], "looper.description": (exp.description or "")[:4000],
            "looper.test": str(vm.get("score_test_used") or ""), "mlflow.runName": run_name(exp)}
    p, band = p_value(vm), vm.get("noise_band")
    tags["looper.p_value"] = "" if p is None else f"{p:.6g}"
    tags["looper.band"] = "" if not isinstance(band, (int, float)) else f"{band:.6g}"
    if exp.commit:
        tags["looper.commit"] = tags["mlflow.source.git.commit"] = exp.commit
    return tags


def run_name(exp: Any) -> str:
    return f"#{exp.id} {exp.kind if exp.kind == 'baseline' else (exp.description or exp.kind)}"[:250]


def confusion(root: Path, tag: str, exp_id: int) -> dict[str, Any] | None:
    """The page-level confusion matrix of the experiment's first run's MATCHES.json (None: none left)."""
    from looper.core.scoring import matches as core_matches
    from looper.report.pictures import matches_of

    obj, _, _ = matches_of(root, tag, exp_id)
    if obj is None:
        return None
    classes = [c for c in obj.get("classes") or [] if isinstance(c, str)]
    return core_matches.confusion([obj], float(obj.get("iou") or 0.5), classes).as_json()


def experiment_run(store: Any, root: Path, exp: Any) -> Tracked:
    """The tracked run of one settled experiment."""
    vm = (exp.verdict or {}).get("metrics") or {} if isinstance(exp.verdict, dict) else {}
    bases = store.find_experiments(tag=exp.tag, kind="baseline", status=Outcome.KEEP)
    base = bases[0] if bases else None
    artifacts: dict[str, Any] = {"verdict.json": exp.verdict or {"status": exp.status.value, "blocking": exp.blocking}}
    if exp.diff:
        artifacts["diff.patch"] = exp.diff
    matrix = confusion(root, exp.tag, exp.id)
    if matrix is not None:
        artifacts["confusion.json"] = matrix
    return Tracked(run_name(exp), experiment_tags(exp, vm),
                   knob_params(exp.source, None if base is None or base.id == exp.id else base.source)
                   if exp.source else {},
                   metrics_of(exp.metrics), artifacts, "FINISHED" if exp.status in FINISHED else "FAILED",
                   millis(exp.started_at) or 0, millis(exp.finished_at))


def seed_runs(store: Any, exp: Any) -> list[Tracked]:
    """Its recorded runs (one per seed and role), nested under it."""
    out = []
    for r in store.run_records(exp.id):
        tags = {RUN_KEY: str(r.id), KEY: str(exp.id), "looper.tag": exp.tag, "looper.role": r.role,
                "looper.seed": "" if r.seed is None else str(r.seed), "mlflow.runName": f"#{exp.id} {r.role} seed {r.seed}"}
        if r.weights_sha256:
            tags["looper.weights_sha256"] = r.weights_sha256
        out.append(Tracked(tags["mlflow.runName"], tags, {}, metrics_of(r.metrics), {},
                           "FINISHED" if r.metrics else "FAILED", millis(r.started_at) or 0, millis(r.finished_at)))
    return out


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=1, sort_keys=True, default=str)
