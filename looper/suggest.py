"""`looper suggest`: what the planner would run next, from the history alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from looper.errors import UsageError
from looper.store import Store


def suggest(root: Path, cfg: Any, store: Store) -> dict[str, Any]:
    from looper.adapters.agents.planner import PlannerAgent
    from looper.agentctx import build_context
    from looper.program import parse_program

    program_path = Path(root) / "program.md"
    if not program_path.is_file():
        raise UsageError(f"{program_path} is missing")
    program_md = program_path.read_text()
    program = parse_program(program_md)
    if program.problems:
        raise UsageError("program.md: " + "; ".join(program.problems))
    tag = cfg.loop.tag
    best = store.best(tag)
    source = (best.source if best else "") or (Path(root) / "train.py").read_text()
    ctx = build_context(store, tag, Path(root), source, program_md, cfg)
    proposal = PlannerAgent(program).propose(ctx)
    base = {"tag": tag, "best_experiment": best.id if best else None, "best_score": best.score if best else None,
            "experiments_seen": len(ctx.history.experiments), "exclusions": list(ctx.history.exclusions)}
    if proposal.exhausted:
        text = f"The search plan is exhausted for tag {tag}: {proposal.rationale}"
        return {**base, "exhausted": True, "reason": proposal.rationale, "text": text}
    changes = {k: {"from": v[0], "to": v[1]} for k, v in proposal.knobs.items()}
    text = (f"Next (phase {proposal.phase}): {proposal.description}\n"
            f"Why: {proposal.rationale}\n"
            f"From: best #{base['best_experiment']} ({tag}), score {base['best_score']}; "
            f"{len(base['exclusions'])} exclusion(s) avoided")
    return {**base, "exhausted": False, "phase": proposal.phase, "description": proposal.description,
            "rationale": proposal.rationale, "changes": changes, "text": text}
