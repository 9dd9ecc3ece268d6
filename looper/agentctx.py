"""What an agent sees: the history from the store turned into plain, aggregate data.

No image, no data path, no page name, no secret: only numbers, descriptions and reasons.
The prompt builder redacts again and fences run-log lines as untrusted data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from looper.adapters.agents.base import AgentContext, ClassScore, ExperimentView, HistoryView
from looper.core import exclusions as core_excl
from looper.core.hyperblock import HyperblockError, knob_changes, read_knobs
from looper.core.search import STRATEGIES
from looper.core.verdict import Outcome


def _safe_knobs(source: str) -> dict[str, Any] | None:
    try:
        return read_knobs(source)
    except (HyperblockError, SyntaxError, ValueError):
        return None


def _safe_changes(before: str | None, after: str) -> dict[str, tuple[Any, Any]]:
    if not before:
        return {}
    try:
        return knob_changes(before, after)
    except (HyperblockError, SyntaxError, ValueError):
        return {}


RACE_REASON = "conflicts with kept change"  # raced candidates are handed back, not excluded


def build_history(store: Any, tag: str, score_name: str, max_experiments: int = 200,
                  in_flight: tuple[dict[str, Any], ...] = ()) -> HistoryView:
    rows = store.experiments(tag=tag)
    source_at: dict[str, str] = {r["commit"]: r.get("source") or "" for r in rows
                                 if r.get("commit") and r["status"] == Outcome.KEEP.value}
    views: list[ExperimentView] = []
    exclusions: list[str] = []
    inconclusive: list[str] = []
    signatures: list[str] = []
    baseline_score = None
    best_so_far = None
    for r in rows:
        if r["kind"] == "baseline":
            if r["status"] == Outcome.KEEP.value:
                baseline_score = r.get("score")
                best_so_far = r.get("score")
            continue
        if r["kind"] != "candidate" or r["status"] in (Outcome.PENDING.value, Outcome.RUNNING.value):
            continue
        source = r.get("source") or ""
        blocking = r.get("blocking") or []
        outcome = Outcome(r["status"])
        raced = any(RACE_REASON in b for b in blocking)
        views.append(ExperimentView(
            id=r["id"], outcome=outcome.value, score=r.get("score"), description=r.get("description") or "",
            reason="; ".join(blocking)[:300], changes=_safe_changes(source_at.get(r.get("parent") or ""), source),
            knobs=_safe_knobs(source), best_before=best_so_far,
            failure_signature=r.get("failure_signature") or "", excluded=False if raced else None))
        line = None if raced else core_excl.exclusion_for(r.get("description") or "", outcome, blocking)
        if line:
            exclusions.append(line)
        if outcome is Outcome.INCONCLUSIVE:
            inconclusive.append(r.get("description") or "")
        if r.get("failure_signature"):
            signatures.append(r["failure_signature"])
        if outcome is Outcome.KEEP:
            best_so_far = r.get("score")
    best = store.best_experiment(tag)
    classes: list[ClassScore] = []
    if best:
        for name, c in sorted((best.get("metrics") or {}).get("classes", {}).items()):
            classes.append(ClassScore(name=name, recall=c.get("recall"), precision=c.get("precision"),
                                      f1=c.get("f1"), support=int(c.get("support") or 0)))
    return HistoryView(
        experiments=tuple(views[-max_experiments:]), score_name=score_name,
        best_score=best.get("score") if best else None, best_experiment_id=best["id"] if best else None,
        baseline_score=baseline_score, baseline_source="tag-start", class_scores=tuple(classes),
        exclusions=tuple(core_excl.dedupe(exclusions)), inconclusive=tuple(dict.fromkeys(inconclusive)),
        failure_signatures=tuple(signatures[-10:]), in_flight=tuple(in_flight))


def build_context(store: Any, tag: str, checkout: Path, train_py: str, program_md: str, cfg: Any,
                  in_flight: tuple[dict[str, Any], ...] = ()) -> AgentContext:
    from looper.prompt import build_prompt

    history = build_history(store, tag, cfg.gate.score, in_flight=in_flight)
    if cfg.agent.kind in STRATEGIES:
        prompt = ""  # the knob-search agents read the history themselves; no prompt to bound
    else:
        prompt = build_prompt(program_md, train_py, history)
    return AgentContext(checkout=Path(checkout), train_py=train_py, program_md=program_md, prompt=prompt,
                        history=history)
