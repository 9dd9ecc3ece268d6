"""What an agent sees: the history from the store turned into plain, aggregate data.

No image, no data path, no page name, no secret: only numbers, descriptions and reasons.
Reasons and signatures may quote run output: the store holds them cleaned of control characters
(:func:`looper.core.verdicts.untrusted.redact`), and the prompt builder redacts again and shows every such
text only inside a fence labelled as untrusted data (:mod:`looper.core.verdicts.untrusted`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from looper.agents.base import AgentContext, ClassScore, ExperimentView, HistoryView
from looper.core.propose import exclusions as core_excl
from looper.core.propose.hyperblock import HyperblockError, knob_changes, read_knobs
from looper.core.propose.search import STRATEGIES
from looper.core.verdicts.verdict import Outcome
from looper.store import ExperimentRecord, Store


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


def _view(r: ExperimentRecord, parent_source: str | None, best_before: float | None) -> ExperimentView:
    raced = any(RACE_REASON in b for b in r.blocking)
    return ExperimentView(
        id=r.id, outcome=r.status.value, score=r.score, description=r.description,
        reason="; ".join(r.blocking)[:300], changes=_safe_changes(parent_source, r.source),
        knobs=_safe_knobs(r.source), best_before=best_before,
        failure_signature=r.failure_signature or "", excluded=False if raced else None)


def build_history(store: Store, tag: str, score_name: str, max_experiments: int = 200,
                  in_flight: tuple[dict[str, Any], ...] = ()) -> HistoryView:
    rows = store.find_experiments(tag=tag)
    source_at: dict[str, str] = {r.commit: r.source for r in rows if r.commit and r.status is Outcome.KEEP}
    views: list[ExperimentView] = []
    exclusions: list[str] = []
    inconclusive: list[str] = []
    signatures: list[str] = []
    baseline_score = None
    best_so_far = None
    for r in rows:
        if r.kind == "baseline":
            if r.status is Outcome.KEEP:
                baseline_score = best_so_far = r.score
            continue
        if r.kind != "candidate" or r.is_open:
            continue
        view = _view(r, source_at.get(r.parent or ""), best_so_far)
        views.append(view)
        line = None if view.excluded is False else core_excl.exclusion_for(r.description, r.status, list(r.blocking))
        if line:
            exclusions.append(line)
        if r.status is Outcome.INCONCLUSIVE:
            inconclusive.append(r.description)
        if r.failure_signature:
            signatures.append(r.failure_signature)
        if r.status is Outcome.KEEP:
            best_so_far = r.score
    best = store.best(tag)
    classes = [ClassScore(name=name, recall=c.get("recall"), precision=c.get("precision"), f1=c.get("f1"),
                          support=int(c.get("support") or 0))
               for name, c in sorted(best.classes.items())] if best else []
    return HistoryView(
        experiments=tuple(views[-max_experiments:]), score_name=score_name,
        best_score=best.score if best else None, best_experiment_id=best.id if best else None,
        baseline_score=baseline_score, baseline_source="tag-start", class_scores=tuple(classes),
        exclusions=tuple(core_excl.dedupe(exclusions)), inconclusive=tuple(dict.fromkeys(inconclusive)),
        failure_signatures=tuple(signatures[-10:]), in_flight=tuple(in_flight))


def build_context(store: Store, tag: str, checkout: Path, train_py: str, program_md: str, cfg: Any,
                  in_flight: tuple[dict[str, Any], ...] = ()) -> AgentContext:
    from looper.agents.prompt import build_prompt

    history = build_history(store, tag, cfg.gate.score, in_flight=in_flight)
    if cfg.agent.kind in STRATEGIES:
        prompt = ""  # the knob-search agents read the history themselves; no prompt to bound
    else:
        prompt = build_prompt(program_md, train_py, history)
    return AgentContext(checkout=Path(checkout), train_py=train_py, program_md=program_md, prompt=prompt,
                        history=history)
