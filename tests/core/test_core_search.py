"""Search strategies: random and evolve (looper.core.propose.search), and what the planner learns."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from looper.agents import make_agent
from looper.agents.base import AgentContext, ClassScore, ExperimentView, HistoryView
from looper.core.propose.plan import Exhausted, Knob, PastExperiment, PlanProposal, next_proposal
from looper.core.propose.search import evolve_proposal, fitness, random_proposal

KNOBS = (
    Knob("LR0", (0.003, 0.006, 0.024), 1),
    Knob("REPEAT_THRESHOLD", (0.0, 0.2), 2, note="repeat-factor sampling of tiles with rare classes"),
    Knob("BATCH", (4, 16), 3),
    Knob("OPTIMIZER", ("SGD", "AdamW"), 4),
)
CURRENT: dict[str, Any] = {"LR0": 0.012, "REPEAT_THRESHOLD": 0.1, "BATCH": 8, "OPTIMIZER": "AdamW", "IMGSZ": 256}


def drive(strategy, outcomes=lambda values: ("discard", 0.3), n: int = 12, seed: int = 0,
          current: dict[str, Any] | None = None, knobs=KNOBS) -> list[PlanProposal | Exhausted]:
    """Run a strategy as the loop would: each proposal is judged by ``outcomes`` (keeps advance)."""
    cur = dict(current or CURRENT)
    history: list[PastExperiment] = []
    best = 0.5
    out: list[PlanProposal | Exhausted] = []
    for i in range(n):
        p = strategy(knobs, cur, history, seed=seed)
        out.append(p)
        if isinstance(p, Exhausted):
            break
        values = {**cur, **{k: new for k, (_o, new) in p.changes.items()}}
        outcome, score = outcomes(values)
        history.append(PastExperiment(dict(p.changes), outcome, score, id=i + 1, best_before=best,
                                      knobs_after=values))
        if outcome == "keep":
            cur, best = values, score
    return out


def knob_sets(props: list) -> list[tuple]:
    return [tuple(sorted(p.changes.items())) for p in props if isinstance(p, PlanProposal)]


@pytest.mark.parametrize("strategy", [random_proposal, evolve_proposal])
def test_same_seed_same_night_other_seed_other_night(strategy) -> None:
    a, b, c = drive(strategy, seed=1), drive(strategy, seed=1), drive(strategy, seed=2)
    assert knob_sets(a) == knob_sets(b)
    assert knob_sets(a) != knob_sets(c)


@pytest.mark.parametrize("strategy", [random_proposal, evolve_proposal])
def test_never_repeats_a_knob_set_and_never_proposes_nothing(strategy) -> None:
    props = [p for p in drive(strategy, n=20) if isinstance(p, PlanProposal)]
    full = [tuple(sorted({**CURRENT, **{k: v for k, (_o, v) in p.changes.items()}}.items())) for p in props]
    assert len(props) == 20 and len(set(full)) == len(full)
    assert all(p.changes for p in props)
    assert all(old == CURRENT[k] for p in props for k, (old, _new) in p.changes.items())


def test_random_draws_only_ladder_values() -> None:
    for p in drive(random_proposal, n=20):
        for name, (_old, new) in p.changes.items():
            knob = next(k for k in KNOBS if k.name == name)
            assert new in knob.candidates or new == CURRENT[name]


def test_evolve_stays_inside_each_ladders_range_and_type() -> None:
    for p in drive(evolve_proposal, n=30):
        assert isinstance(p, PlanProposal)
        for name, (_old, new) in p.changes.items():
            knob = next(k for k in KNOBS if k.name == name)
            if name == "OPTIMIZER":
                assert new in ("SGD", "AdamW")
                continue
            values = [*knob.candidates, CURRENT[name]]
            assert min(values) <= new <= max(values)
            assert type(new) is type(CURRENT[name])


def test_random_exhausts_a_small_space_with_a_reason() -> None:
    knobs = (Knob("A", (1,), 1), Knob("B", (True,), 2))
    props = drive(random_proposal, n=10, current={"A": 2, "B": False}, knobs=knobs)
    done = props[-1]
    assert isinstance(done, Exhausted) and "random: no new knob set" in done.reason
    assert len(knob_sets(props)) == 3  # (1,F), (2,T), (1,T): every set but the current one


def test_excluded_values_are_never_drawn_again() -> None:
    hist = [PastExperiment({"OPTIMIZER": ("AdamW", "SGD")}, "crash", None, id=1)]
    for seed in range(30):
        for strategy in (random_proposal, evolve_proposal):
            p = strategy(KNOBS, CURRENT, hist, seed=seed)
            assert p.changes.get("OPTIMIZER", ("", "AdamW"))[1] != "SGD"


def test_fitness_is_the_gated_score() -> None:
    assert fitness(PastExperiment({}, "keep", 0.6), 0.5) == 0.6
    assert fitness(PastExperiment({}, "inconclusive", 0.55), 0.5) == 0.55
    # a discard that scored higher (lost on a class gate) never ranks above the best it failed against
    assert fitness(PastExperiment({}, "discard", 0.7), 0.5) == 0.5
    assert fitness(PastExperiment({}, "discard", 0.4), 0.5) == 0.4
    assert fitness(PastExperiment({}, "crash", None), 0.5) == -math.inf
    assert fitness(PastExperiment({}, "error", None), 0.5) is None
    assert fitness(PastExperiment({}, "interrupted", 0.9), 0.5) is None


def test_evolve_breeds_from_the_fitter_parent() -> None:
    """A kept LR0 0.024 (fitness 0.9) vs the baseline (0.5): most mutations start from 0.024."""
    hist = [PastExperiment({"LR0": (0.012, 0.024)}, "keep", 0.9, id=1, best_before=0.5,
                           knobs_after={**CURRENT, "LR0": 0.024})]
    cur = {**CURRENT, "LR0": 0.024}
    near = 0
    for seed in range(40):
        p = evolve_proposal(KNOBS, cur, hist, seed=seed, baseline_score=0.5)
        assert isinstance(p, PlanProposal)
        lr = p.changes.get("LR0", (None, 0.024))[1]
        near += lr >= 0.012
    assert near >= 30, near


def test_evolve_never_breeds_from_a_crash() -> None:
    crashed = {**CURRENT, "BATCH": 16, "LR0": 0.024}
    hist = [PastExperiment({"BATCH": (8, 16), "LR0": (0.012, 0.024)}, "crash", None, id=1, knobs_after=crashed)]
    for seed in range(20):
        p = evolve_proposal(KNOBS, CURRENT, hist, seed=seed, baseline_score=0.5)
        assert "from #1" not in p.rationale and "of #1" not in p.rationale


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n_hist=st.integers(0, 6))
def test_evolve_proposals_are_new_and_valid_for_any_seed(seed: int, n_hist: int) -> None:
    props = drive(evolve_proposal, n=n_hist + 1, seed=seed)
    assert all(isinstance(p, PlanProposal) for p in props)
    assert len(set(knob_sets(props))) == len(props)


# -- the planner learns from the night ---------------------------------------------------------


def test_planner_tries_the_other_direction_after_lower_values_lost() -> None:
    knobs = (Knob("LR0", (0.003, 0.006, 0.008, 0.016, 0.024), 1),)
    cur = {"LR0": 0.012}
    hist = [PastExperiment({"LR0": (0.012, 0.003)}, "discard", 0.3, id=1, best_before=0.5)]
    p = next_proposal(knobs, cur, hist, baseline_score=0.5)
    assert p.description == "LR0 0.012 -> 0.016"
    assert "learned direction: 1 lower value(s) of LR0 lost; higher values first" in p.rationale
    # without the history the ladder order stands
    assert next_proposal(knobs, cur, [], baseline_score=0.5).description == "LR0 0.012 -> 0.003"


def test_planner_keeps_going_the_way_that_won() -> None:
    knobs = (Knob("LR0", (0.003, 0.006, 0.016, 0.024), 1),)
    hist = [PastExperiment({"LR0": (0.012, 0.016)}, "inconclusive", 0.55, id=1, best_before=0.5)]
    p = next_proposal(knobs, {"LR0": 0.012}, hist, baseline_score=0.5)
    # 0.016 may be retried later; the fresh higher value comes before the lower ones
    assert p.description == "LR0 0.012 -> 0.024"


def test_planner_puts_rare_class_knobs_first_while_classes_score_zero() -> None:
    p = next_proposal(KNOBS, CURRENT, [], baseline_score=0.5, weak_classes=["smoke_damper", "humidistat"])
    assert p.description.startswith("REPEAT_THRESHOLD")
    assert "2 class(es) of the best at recall 0 (smoke_damper, humidistat): rare-class knobs first" in p.rationale
    assert next_proposal(KNOBS, CURRENT, [], baseline_score=0.5).description.startswith("LR0")


def test_program_md_marks_rare_class_knobs_by_their_comment() -> None:
    from looper.agents.program import parse_program

    text = (Path(__file__).resolve().parents[2] / "program.md").read_text()
    rare = [k.name for k in parse_program(text).knobs if k.targets_rare_classes]
    assert rare == ["REPEAT_THRESHOLD", "REPEAT_POWER"]


# -- the agents behind the one interface -------------------------------------------------------

PROGRAM = (Path(__file__).resolve().parents[2] / "program.md").read_text()
TRAIN = (Path(__file__).resolve().parents[2] / "train.py").read_text()


@pytest.mark.parametrize("kind", ["planner", "random", "evolve"])
def test_each_strategy_is_an_agent_kind_that_rewrites_only_knob_values(kind: str) -> None:
    from looper.core.propose.hyperblock import read_knobs

    agent = make_agent(SimpleNamespace(kind=kind, seed=3))
    assert agent.name == kind
    history = HistoryView(class_scores=(ClassScore("smoke_damper", 0.0, support=7),),
                          experiments=(ExperimentView(1, "discard", 0.2, changes={"LR0": (0.012, 0.003)}),))
    p = agent.propose(AgentContext(checkout=Path("."), train_py=TRAIN, program_md=PROGRAM, prompt="",
                                   history=history))
    assert not p.exhausted and p.knobs
    before, after = read_knobs(TRAIN), read_knobs(p.new_source)
    assert {k for k in before if before[k] != after[k]} == set(p.knobs)
    assert len(p.new_source.splitlines()) == len(TRAIN.splitlines())


def test_config_accepts_the_strategies_and_their_seed(tmp_path: Path) -> None:
    from looper.config import load_config

    (tmp_path / "looper.toml").write_text('[agent]\nkind = "evolve"\nseed = 7\n')
    cfg = load_config(tmp_path / "looper.toml")
    assert cfg.agent.kind == "evolve" and cfg.agent.seed == 7
