"""The knob-search agents (no LLM): ``planner`` (the default), ``random`` and ``evolve``.

The planner follows program.md's search plan (:mod:`looper.core.propose.plan`); ``random`` and
``evolve`` are the strategies of :mod:`looper.core.propose.search`, compared against each other and
against Ultralytics' ``model.tune()`` in bench/bench_search.py.

Each reads the ranked knobs from program.md and the current values from train.py's
hyperparameter block, asks its strategy for the next change, and rewrites the
block (values only; comments and every other byte stay). When the plan is exhausted it
returns ``Proposal(exhausted=True)``: a stop rule, not a crash.
"""

from __future__ import annotations

from looper.agents.base import AgentContext, HistoryView, Proposal
from looper.agents.program import Program, parse_program
from looper.core.propose.hyperblock import HyperblockError, read_knobs, rewrite_knobs
from looper.core.propose.plan import Exhausted, PastExperiment, PlanError, PlanProposal, next_proposal
from looper.core.propose.search import evolve_proposal, random_proposal
from looper.errors import HarnessError


def past_experiments(history: HistoryView) -> list[PastExperiment]:
    """The history in the planner's terms."""
    return [
        PastExperiment(changes=dict(e.changes), outcome=e.outcome, score=e.score, excluded=e.excluded,
                       id=e.id, knobs_after=e.knobs, best_before=e.best_before)
        for e in history.experiments
    ]


def weak_classes(history: HistoryView) -> list[str]:
    """Classes of the current best with test instances that it finds none of."""
    return [c.name for c in history.class_scores if c.support > 0 and not c.recall]


class KnobSearchAgent:
    """An agent that changes values in train.py's hyperparameter block by a search strategy.

    Subclasses name the strategy and implement :meth:`next_change`; reading program.md,
    reading and rewriting the block, and the errors are shared.
    """

    name = "planner"

    def __init__(self, program: Program | None = None, seed: int = 0) -> None:
        self.program = program
        self.seed = seed

    def _program(self, ctx: AgentContext) -> Program:
        program = parse_program(ctx.program_md) if ctx.program_md.strip() else self.program
        if program is None:
            raise HarnessError(f"{self.name}: no program.md to read the search plan from")
        if program.problems:
            raise HarnessError(f"{self.name}: program.md has problems: " + "; ".join(program.problems))
        return program

    def next_change(self, program: Program, current: dict, ctx: AgentContext) -> PlanProposal | Exhausted:
        raise NotImplementedError

    def propose(self, ctx: AgentContext) -> Proposal:
        program = self._program(ctx)
        try:
            current = read_knobs(ctx.train_py)
        except HyperblockError as exc:
            raise HarnessError(f"{self.name}: {exc}") from exc
        try:
            result = self.next_change(program, current, ctx)
        except PlanError as exc:
            raise HarnessError(f"{self.name}: {exc}") from exc
        if isinstance(result, Exhausted):
            return Proposal(new_source=None, description="search plan exhausted", rationale=result.reason,
                            exhausted=True)
        try:
            new_source = rewrite_knobs(ctx.train_py, {n: new for n, (_old, new) in result.changes.items()})
        except HyperblockError as exc:
            raise HarnessError(f"{self.name}: {exc}") from exc
        return Proposal(new_source=new_source, description=result.description, rationale=result.rationale,
                        knobs=dict(result.changes), phase=result.phase)


class PlannerAgent(KnobSearchAgent):
    """program.md's phased plan, learning the direction of knobs and the weak classes of the night."""

    name = "planner"

    def next_change(self, program: Program, current: dict, ctx: AgentContext) -> PlanProposal | Exhausted:
        return next_proposal(
            program.knobs, current, past_experiments(ctx.history), list(ctx.history.in_flight),
            phases=sorted(program.phases), baseline_score=ctx.history.baseline_score,
            weak_classes=weak_classes(ctx.history))


class RandomAgent(KnobSearchAgent):
    """Every ranked knob drawn uniformly from its ladder (seeded): the control arm."""

    name = "random"

    def next_change(self, program: Program, current: dict, ctx: AgentContext) -> PlanProposal | Exhausted:
        return random_proposal(program.knobs, current, past_experiments(ctx.history),
                               list(ctx.history.in_flight), seed=self.seed)


class EvolveAgent(KnobSearchAgent):
    """Ultralytics' Tuner mutation over the ranked knobs, with the gated score as fitness."""

    name = "evolve"

    def next_change(self, program: Program, current: dict, ctx: AgentContext) -> PlanProposal | Exhausted:
        return evolve_proposal(program.knobs, current, past_experiments(ctx.history),
                               list(ctx.history.in_flight), seed=self.seed,
                               baseline_score=ctx.history.baseline_score)
