"""The planner agent: program.md + train.py's block + history -> rewritten train.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from looper.agents import make_agent
from looper.agents.base import AgentContext, ExperimentView, HistoryView
from looper.agents.planner import PlannerAgent
from looper.core.propose.hyperblock import read_knobs
from looper.errors import HarnessError

PROGRAM = """Status (2026-11-30): test plan.

## Scope
Only train.py.
## Domain facts
Black and white.
## Hardware
CPU.
## Goal and tie-breakers
weighted_f1.
## Search plan
- Phase 1: one at a time
- Phase 2: combine winners
- Phase 3: fine-tune
1. LR0: 0.005, 0.02
2. COS_LR: True
## Memory
db.
## Stop rules
error.
"""


def ctx(train_py: str, history: HistoryView, program: str = PROGRAM) -> AgentContext:
    return AgentContext(checkout=Path("."), train_py=train_py, program_md=program, prompt="", history=history)


def test_planner_walks_the_plan_to_a_clean_stop(train_py: str) -> None:
    agent = PlannerAgent()
    source = train_py
    exps: list[ExperimentView] = []
    descriptions = []
    for i in range(1, 30):
        p = agent.propose(ctx(source, HistoryView(experiments=tuple(exps), baseline_score=0.5)))
        if p.exhausted:
            assert p.new_source is None and "exhausted" in p.rationale
            break
        assert p.new_source is not None and p.knobs
        descriptions.append(p.description)
        # the rewrite changed exactly the proposed knobs
        before, after = read_knobs(source), read_knobs(p.new_source)
        assert {k for k in after if after[k] != before[k]} == set(p.knobs)
        keep = p.description == "COS_LR False -> True"
        exps.append(ExperimentView(id=i, outcome="keep" if keep else "discard", score=0.6 if keep else 0.4,
                                   description=p.description, changes=dict(p.knobs)))
        if keep:
            source = p.new_source
    else:
        pytest.fail("the planner never said it was exhausted")
    assert descriptions[:3] == ["LR0 0.01 -> 0.005", "LR0 0.01 -> 0.02", "COS_LR False -> True"]
    assert len(descriptions) == len(set(descriptions))


def test_ranked_knob_missing_from_train_py_is_a_harness_error(train_py: str) -> None:
    program = PROGRAM.replace("2. COS_LR: True", "2. DROPOUT: 0.1")
    with pytest.raises(HarnessError, match="DROPOUT"):
        PlannerAgent().propose(ctx(train_py, HistoryView(), program))


def test_broken_program_is_a_harness_error(train_py: str) -> None:
    with pytest.raises(HarnessError, match="program.md has problems"):
        PlannerAgent().propose(ctx(train_py, HistoryView(), PROGRAM.replace("## Memory", "## Memry")))


def test_train_py_without_block_is_a_harness_error() -> None:
    with pytest.raises(HarnessError, match="no hyperparameter block"):
        PlannerAgent().propose(ctx("print('hi')\n", HistoryView()))


def test_in_flight_from_history_is_avoided(train_py: str) -> None:
    p = PlannerAgent().propose(ctx(train_py, HistoryView(in_flight=({"LR0": 0.005},))))
    assert p.description == "LR0 0.01 -> 0.02"


def test_registry_default_is_the_planner() -> None:
    class Cfg:
        kind = "planner"

    assert isinstance(make_agent(Cfg()), PlannerAgent)
