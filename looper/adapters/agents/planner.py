"""The planner agent (the default, no LLM): follows program.md's search plan.

It reads the ranked knobs from program.md and the current values from train.py's
hyperparameter block, asks :mod:`looper.core.plan` for the next change, and rewrites the
block (values only; comments and every other byte stay). When the plan is exhausted it
returns ``Proposal(exhausted=True)``: a stop rule, not a crash.
"""

from __future__ import annotations

from looper.adapters.agents.base import AgentContext, HistoryView, Proposal
from looper.core.hyperblock import HyperblockError, read_knobs, rewrite_knobs
from looper.core.plan import Exhausted, PastExperiment, PlanError, next_proposal
from looper.errors import HarnessError
from looper.program import Program, parse_program


def past_experiments(history: HistoryView) -> list[PastExperiment]:
    """The history in the planner's terms."""
    return [
        PastExperiment(changes=dict(e.changes), outcome=e.outcome, score=e.score, excluded=e.excluded,
                       id=e.id, knobs_after=e.knobs, best_before=e.best_before)
        for e in history.experiments
    ]


class PlannerAgent:
    name = "planner"

    def __init__(self, program: Program | None = None) -> None:
        self.program = program

    def _program(self, ctx: AgentContext) -> Program:
        program = parse_program(ctx.program_md) if ctx.program_md.strip() else self.program
        if program is None:
            raise HarnessError("planner: no program.md to read the search plan from")
        if program.problems:
            raise HarnessError("planner: program.md has problems: " + "; ".join(program.problems))
        return program

    def propose(self, ctx: AgentContext) -> Proposal:
        program = self._program(ctx)
        try:
            current = read_knobs(ctx.train_py)
        except HyperblockError as exc:
            raise HarnessError(f"planner: {exc}") from exc
        try:
            result = next_proposal(
                program.knobs, current, past_experiments(ctx.history), list(ctx.history.in_flight),
                phases=sorted(program.phases), baseline_score=ctx.history.baseline_score)
        except PlanError as exc:
            raise HarnessError(f"planner: {exc}") from exc
        if isinstance(result, Exhausted):
            return Proposal(new_source=None, description="search plan exhausted", rationale=result.reason,
                            exhausted=True)
        try:
            new_source = rewrite_knobs(ctx.train_py, {n: new for n, (_old, new) in result.changes.items()})
        except HyperblockError as exc:
            raise HarnessError(f"planner: {exc}") from exc
        return Proposal(new_source=new_source, description=result.description, rationale=result.rationale,
                        knobs=dict(result.changes), phase=result.phase)
