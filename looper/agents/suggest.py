"""`looper suggest`: what the planner would run next, from the history alone, and one line for
each knob-search strategy (planner, random, evolve)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from looper.errors import UsageError
from looper.report.fmt import shown, tag_sigma
from looper.store import Store


def suggest(root: Path, cfg: Any, store: Store) -> dict[str, Any]:
    from looper.agents.planner import PlannerAgent
    from looper.agents.program import parse_program
    from looper.agents.view import build_context

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
    strategies = _strategies(program, ctx, int(getattr(cfg.agent, "seed", 0) or 0))
    lines = "\n".join(f"  {name}: {line}" for name, line in strategies.items())
    base = {"tag": tag, "best_experiment": best.id if best else None, "best_score": best.score if best else None,
            "experiments_seen": len(ctx.history.experiments), "exclusions": list(ctx.history.exclusions)}
    if proposal.exhausted:
        text = f"The search plan is exhausted for tag {tag}: {proposal.rationale}\nEach strategy:\n{lines}"
        return {**base, "exhausted": True, "reason": proposal.rationale, "text": text, "strategies": strategies}
    changes = {k: {"from": v[0], "to": v[1]} for k, v in proposal.knobs.items()}
    text = (f"Next (phase {proposal.phase}): {proposal.description}\n"
            f"Why: {proposal.rationale}\n"
            f"From: best #{base['best_experiment']} ({tag}), score {shown(base['best_score'], tag_sigma(store, tag))}; "
            f"{len(base['exclusions'])} exclusion(s) avoided\n"
            f"Each strategy ([agent] kind):\n{lines}")
    return {**base, "exhausted": False, "phase": proposal.phase, "description": proposal.description,
            "rationale": proposal.rationale, "changes": changes, "text": text, "strategies": strategies}


def _strategies(program: Any, ctx: Any, seed: int) -> dict[str, str]:
    """One line per knob-search strategy: what it would run next and why."""
    from looper.agents.planner import EvolveAgent, PlannerAgent, RandomAgent

    out: dict[str, str] = {}
    for cls in (PlannerAgent, RandomAgent, EvolveAgent):
        p = cls(program, seed=seed).propose(ctx)
        out[cls.name] = (f"nothing left (why: {_cut(p.rationale, 200)})" if p.exhausted
                         else f"{_cut(p.description, 120)}  (why: {_cut(p.rationale, 160)})")
    return out


def _cut(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."
