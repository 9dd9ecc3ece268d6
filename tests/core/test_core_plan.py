"""The search-plan planner on seeded histories."""

from __future__ import annotations

from typing import Any

import pytest

from looper.core.propose.plan import Exhausted, Knob, PastExperiment, PlanError, PlanProposal, next_proposal

KNOBS = (Knob("LR0", (0.005, 0.01, 0.02), 1), Knob("MOSAIC", (0.0, 1.0), 2))
CURRENT = {"LR0": 0.01, "MOSAIC": 1.0, "IMGSZ": 640}


def run_plan(outcomes: dict[tuple, tuple[str, float | None]], current: dict[str, Any] | None = None,
             knobs=KNOBS, limit: int = 60, **kw) -> tuple[list[PlanProposal], Exhausted]:
    """Drive the planner as the loop would: each proposal gets an outcome from the table
    (keyed by its sorted change items, default discard), keeps advance ``current``."""
    cur = dict(current or CURRENT)
    history: list[PastExperiment] = []
    proposals: list[PlanProposal] = []
    best = 0.5
    for i in range(limit):
        p = next_proposal(knobs, cur, history, baseline_score=0.5, **kw)
        if isinstance(p, Exhausted):
            return proposals, p
        proposals.append(p)
        key = tuple(sorted((n, new) for n, (_o, new) in p.changes.items()))
        outcome, score = outcomes.get(key, ("discard", 0.4))
        history.append(PastExperiment(dict(p.changes), outcome, score, id=i + 1, best_before=best))
        if outcome == "keep":
            cur.update({n: new for n, (_o, new) in p.changes.items()})
            best = score
    raise AssertionError(f"planner did not stop within {limit} proposals")


def test_phase_one_goes_in_ranked_order_skipping_the_current_value() -> None:
    props, done = run_plan({})
    firsts = [(p.phase, p.description) for p in props]
    assert firsts[:3] == [(1, "LR0 0.01 -> 0.005"), (1, "LR0 0.01 -> 0.02"), (1, "MOSAIC 1.0 -> 0.0")]
    assert "exhausted" in done.reason


def test_no_repeats_and_exclusions_honoured() -> None:
    props, _ = run_plan({})
    sets = [tuple(sorted((n, new) for n, (_o, new) in p.changes.items())) for p in props]
    # everything was discarded: no knob set twice, never back to an excluded value
    assert len(sets) == len(set(sets))
    # phase 3 steps that land on an excluded value (0.005 / 0.02 / 0.0) are never proposed
    values = [new for p in props for (_o, new) in p.changes.values()]
    assert values.count(0.005) == 1 and values.count(0.02) == 1 and values.count(0.0) == 1


def test_all_discarded_means_phase_two_is_empty_and_phase_three_steps() -> None:
    props, done = run_plan({})
    phases = [p.phase for p in props]
    assert 2 not in phases
    assert phases == sorted(phases)
    p3 = [p.description for p in props if p.phase == 3]
    assert "LR0 0.01 -> 0.008" in p3 and "LR0 0.01 -> 0.0125" in p3
    assert not any("MOSAIC 1.0 -> 1.25" in d for d in p3)  # probabilities stay in [0, 1]
    assert "phase 2 has no untried combination of 0 winner(s)" in done.reason


def test_keep_moves_the_base_and_phase_two_combines_only_winners() -> None:
    outcomes = {
        (("LR0", 0.005),): ("keep", 0.6),
        (("MOSAIC", 0.0),): ("inconclusive", 0.61),  # beat the best, held back by noise
    }
    props, _ = run_plan(outcomes)
    # after the keep, phase 1 continues relative to the new best (LR0 = 0.005)
    assert props[1].description == "LR0 0.005 -> 0.02"
    p2 = [p for p in props if p.phase == 2]
    # phase 1 already retried the inconclusive MOSAIC once; the only winners are LR0 0.005 (kept,
    # already in the best) and MOSAIC 0.0: their combination on today's base was already run
    for p in p2:
        assert set(p.changes) <= {"LR0", "MOSAIC"}
        for name, (_old, new) in p.changes.items():
            assert (name, new) in {("LR0", 0.005), ("MOSAIC", 0.0)}


def test_phase_two_pairs_two_noise_winners() -> None:
    knobs = (Knob("LR0", (0.02,), 1), Knob("MOSAIC", (0.0,), 2), Knob("CLS_GAIN", (1.0,), 3))
    cur = {"LR0": 0.01, "MOSAIC": 1.0, "CLS_GAIN": 0.5}
    history = [
        PastExperiment({"LR0": (0.01, 0.02)}, "inconclusive", 0.55, id=1, best_before=0.5),
        PastExperiment({"MOSAIC": (1.0, 0.0)}, "inconclusive", 0.52, id=2, best_before=0.5),
        PastExperiment({"CLS_GAIN": (0.5, 1.0)}, "inconclusive", 0.45, id=3, best_before=0.5),  # lost
        PastExperiment({"LR0": (0.01, 0.02)}, "inconclusive", 0.55, id=4, best_before=0.5),
        PastExperiment({"MOSAIC": (1.0, 0.0)}, "inconclusive", 0.52, id=5, best_before=0.5),
        PastExperiment({"CLS_GAIN": (0.5, 1.0)}, "discard", 0.45, id=6, best_before=0.5),
    ]
    p = next_proposal(knobs, cur, history, phases=(1, 2))
    assert isinstance(p, PlanProposal) and p.phase == 2
    assert p.changes == {"LR0": (0.01, 0.02), "MOSAIC": (1.0, 0.0)}
    assert "#1" in p.rationale and "#2" in p.rationale  # names the winners it combines
    assert "#6" not in p.rationale  # an exclusion on another knob is not noise in the rationale


def test_inconclusive_is_retried_once_only() -> None:
    knobs = (Knob("LR0", (0.02,), 1),)
    cur = {"LR0": 0.01}
    h1 = [PastExperiment({"LR0": (0.01, 0.02)}, "inconclusive", 0.49, id=1, best_before=0.5)]
    p = next_proposal(knobs, cur, h1, phases=(1,))
    assert isinstance(p, PlanProposal) and p.retry and "retry of inconclusive #1" in p.rationale
    h2 = h1 + [PastExperiment({"LR0": (0.01, 0.02)}, "inconclusive", 0.49, id=2, best_before=0.5)]
    assert isinstance(next_proposal(knobs, cur, h2, phases=(1,)), Exhausted)


def test_error_and_interrupted_do_not_count_as_measured() -> None:
    knobs = (Knob("LR0", (0.02,), 1),)
    h = [PastExperiment({"LR0": (0.01, 0.02)}, "error", None, id=1),
         PastExperiment({"LR0": (0.01, 0.02)}, "interrupted", None, id=2)]
    p = next_proposal(knobs, {"LR0": 0.01}, h, phases=(1,))
    assert isinstance(p, PlanProposal) and not p.retry


def test_in_flight_sets_are_avoided_for_parallel_workers() -> None:
    first = next_proposal(KNOBS, CURRENT, [])
    assert isinstance(first, PlanProposal)
    second = next_proposal(KNOBS, CURRENT, [], in_flight=[{"LR0": 0.005}])
    assert isinstance(second, PlanProposal)
    assert second.changes != first.changes and second.changes == {"LR0": (0.01, 0.02)}


def test_same_knob_set_reached_another_way_is_not_repeated() -> None:
    # LR0 0.02 was measured (discarded) on today's base through a different description
    knobs = (Knob("LR0", (0.02,), 1),)
    h = [PastExperiment({}, "discard", 0.3, id=1, knobs_after={"LR0": 0.02}, excluded=False)]
    result = next_proposal(knobs, {"LR0": 0.01}, h, phases=(1,))
    assert isinstance(result, Exhausted)


def test_exhausted_is_a_clean_result_with_reason() -> None:
    result = next_proposal((Knob("COS_LR", (False,), 1),), {"COS_LR": False}, [])
    assert isinstance(result, Exhausted)
    assert "phase 1 tried all 0 candidate changes" in result.reason


def test_missing_knob_and_bad_candidate_are_plan_errors() -> None:
    with pytest.raises(PlanError, match="DROPOUT"):
        next_proposal((Knob("DROPOUT", (0.1,), 1),), {"LR0": 0.01}, [])
    with pytest.raises(PlanError, match="IMGSZ"):
        next_proposal((Knob("IMGSZ", ("big",), 1),), {"IMGSZ": 640}, [])


def test_integer_knobs_step_on_their_grid() -> None:
    knobs = (Knob("IMGSZ", (320, 480, 800), 1),)
    h = [PastExperiment({"IMGSZ": (640, v)}, "discard", 0.3, id=i) for i, v in enumerate((320, 480, 800), 1)]
    p = next_proposal(knobs, {"IMGSZ": 640}, h)
    assert isinstance(p, PlanProposal) and p.phase == 3
    assert p.changes == {"IMGSZ": (640, 512)}  # 640 * 0.8 on the 32-px grid (gcd of the ladder)


def test_exclusion_blocks_the_same_move_on_a_new_base_and_is_named() -> None:
    knobs = (Knob("LR0", (0.02,), 1), Knob("MOSAIC", (0.0,), 2))
    history = [
        PastExperiment({"LR0": (0.01, 0.02)}, "crash", None, id=1),
        PastExperiment({"MOSAIC": (1.0, 0.0)}, "keep", 0.6, id=2),
    ]
    # the base changed (MOSAIC kept), but LR0 -> 0.02 crashed: not proposed again in any phase
    cur = {"LR0": 0.01, "MOSAIC": 0.0}
    seen = []
    for i in range(3, 20):
        p = next_proposal(knobs, cur, history)
        if isinstance(p, Exhausted):
            break
        seen.append(p)
        history.append(PastExperiment(dict(p.changes), "discard", 0.5, id=i))
    assert seen and all(p.changes.get("LR0", (None, None))[1] != 0.02 for p in seen)
    lr_moves = [p for p in seen if "LR0" in p.changes]
    assert lr_moves and "#1 (LR0 0.01 -> 0.02)" in lr_moves[0].rationale
