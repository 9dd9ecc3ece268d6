"""The tag's step budget (looper.core.run.budget): the warm-up's steps -> the budget; a run cut short."""

from __future__ import annotations

import pytest

from looper.core.run import budget
from looper.core.run.budget import HEADROOM, cut_short, overran, step_budget


@pytest.mark.parametrize("warmup, expected", [(1, 1), (2, 1), (10, 8), (250, 200), (251, 200), (455, 364)])
def test_the_step_budget_is_the_headroom_share_of_the_warmup_steps_rounded_down(warmup, expected):
    assert HEADROOM == 0.8
    assert step_budget(warmup) == expected


def test_the_step_budget_never_exceeds_what_the_warmup_fitted_and_never_drops_to_zero():
    for steps in range(1, 2000):
        assert 1 <= step_budget(steps) <= steps


@pytest.mark.parametrize("bad", [0, -3, 2.5, "250", True, None])
def test_a_warmup_that_trained_nothing_has_no_step_budget(bad):
    with pytest.raises(ValueError, match="at least one step"):
        step_budget(bad)


@pytest.mark.parametrize("headroom", [0.0, -0.1, 1.5])
def test_a_headroom_outside_0_1_is_refused(headroom):
    with pytest.raises(ValueError, match="headroom"):
        step_budget(100, headroom)


def test_a_run_the_wall_clock_ended_before_its_budget_is_cut_short_and_says_where():
    assert cut_short({"steps": 150, "stopped_by": "time"}, 200) == "stopped by the wall clock at 150 of 200 steps"
    assert cut_short({"steps": 3, "stopped_by": "epochs"}, 8) == "stopped by the epochs at 3 of 8 steps"
    assert cut_short({"steps": 3}, 8) == "stopped by the something other than its step budget at 3 of 8 steps"


@pytest.mark.parametrize("tj, budget", [
    ({"steps": 200, "stopped_by": "steps"}, 200),  # met
    ({"steps": 201, "stopped_by": "steps"}, 200),  # more is not less
    ({"steps": 10, "stopped_by": "time"}, 0),  # no step budget: the wall clock is the budget
    (None, 200), ({"steps": "150"}, 200), ({"steps": True}, 200), ({}, 200),  # nothing to read: train.json's check says so
])
def test_a_run_that_met_its_budget_or_had_none_is_not_cut_short(tj, budget):
    assert cut_short(tj, budget) is None


def test_a_run_that_trained_more_steps_than_its_budget_overran_it():
    assert overran({"steps": 201, "stopped_by": "time"}, 200) == (
        "train.py trained 201 optimizer steps; the tag's step budget is 200 (LOOPER_MAX_STEPS): a run must stop at it")


@pytest.mark.parametrize("tj, budget", [
    ({"steps": 200}, 200), ({"steps": 3}, 200), ({"steps": 900}, 0), (None, 200), ({"steps": "900"}, 200),
    ({"steps": True}, 1), ({}, 5),
])
def test_a_run_within_its_budget_or_without_one_did_not_overrun(tj, budget):
    assert overran(tj, budget) is None


def test_a_float_step_count_is_checked_like_an_int():
    """The training evidence accepts any finite number of steps; the budget checks must read it the same."""
    assert overran({"steps": 400.0}, 291) == (
        "train.py trained 400 optimizer steps; the tag's step budget is 291 (LOOPER_MAX_STEPS): a run must stop at it")
    assert cut_short({"steps": 150.5, "stopped_by": "time"}, 200) == "stopped by the wall clock at 150.5 of 200 steps"
    assert overran({"steps": float("inf")}, 5) is None and cut_short({"steps": float("nan")}, 5) is None


@pytest.mark.parametrize("tail, train_json, words", [
    ("LOOPER_SUMMARY steps=48 epochs=2", {"steps": 26}, "train.json says 26 optimizer steps but the run's log showed steps=48 (LOOPER_SUMMARY)"),
    ("LOOPER_SUMMARY steps=26", {"steps": 26}, None),
    ("LOOPER_SUMMARY steps=26", {"steps": 48}, "says 48"),  # more than it showed: a lie too
    ("LOOPER_EPOCH epoch=1 steps=20 elapsed=3.0\nLOOPER_EPOCH epoch=2 steps=40", {"steps": 45}, None),  # stopped mid-epoch
    ("LOOPER_EPOCH epoch=1 steps=20\nLOOPER_EPOCH epoch=2 steps=40", {"steps": 26}, "steps=40 (LOOPER_EPOCH)"),
    ("LOOPER_EPOCH epoch=2 steps=40\nLOOPER_SUMMARY steps=41", {"steps": 41}, None),  # the summary decides
    ("LOOPER_SUMMARY steps=41\nLOOPER_EPOCH epoch=2 steps=40", {"steps": 41}, None),  # the summary decides
    ("no step lines", {"steps": 26}, None),  # no evidence: nothing compared
    ("LOOPER_SUMMARY steps=26", {"epochs": 1}, None),  # no steps in train.json: evidence judges that
    ("LOOPER_SUMMARY steps=26", None, None),
    ("  LOOPER_SUMMARY steps=99", {"steps": 26}, None),  # only whole lines that start with it
    ("LOOPER_SUMMARY steps=0.5", {"steps": 0.5}, None),  # the same half step: the evidence rules judge it
    ("LOOPER_SUMMARY steps=0.5", {"steps": 3}, "says 3 optimizer steps but the run's log showed steps=0.5"),
    ("LOOPER_SUMMARY steps=26.x", {"steps": 26}, None),  # no number there: nothing compared
])
def test_steps_disagree_with_the_log(tail: str, train_json: dict | None, words: str | None) -> None:
    got = budget.steps_disagree(train_json, budget.log_steps(tail))
    assert (got is None) == (words is None), got
    if words is not None:
        assert words in got


@pytest.mark.parametrize("train_json, need, fits, cache", [
    # a firm's 13,735 tiles loaded into RAM before step 1: 94 of the 180 s gone, 145 of 169 steps trained
    ({"steps": 145, "seconds": 172.0, "startup_seconds": 94.0}, 240, 127, True),
    # a slow machine, start-up small: the rate decides
    ({"steps": 100, "seconds": 170.0, "startup_seconds": 10.0}, 361, 85, False),
    # a run that used all of the wall clock: nothing kept back for saving
    ({"steps": 50, "seconds": 180.0, "startup_seconds": 80.0}, 523, 40, True),
])
def test_a_cut_short_run_says_which_budget_to_raise_and_to_what(train_json, need, fits, cache):
    from looper.core.run.budget import budget_advice

    words = budget_advice(train_json, 169, 180)
    assert words.startswith(f"Raise [loop] budget_seconds to at least {need} (this run: ")
    assert f"or lower [loop] max_steps to {fits} to fit 180 s" in words
    assert ("train.py's CACHE" in words) is cache  # start-up past a quarter of the budget: the tiles loaded first
    rate = train_json["steps"] / (train_json["seconds"] - train_json["startup_seconds"])
    assert fits <= rate * (180 - train_json["startup_seconds"])  # what it proposes fits the wall clock
    assert need >= train_json["startup_seconds"] + 169 / rate  # and what it asks for fits the steps


@pytest.mark.parametrize("train_json", [None, {}, {"steps": 10}, {"steps": 0, "seconds": 9, "startup_seconds": 1},
                                        {"steps": 10, "seconds": 5.0, "startup_seconds": 7.0},
                                        {"steps": 10, "seconds": True, "startup_seconds": 1}])
def test_without_the_runs_figures_the_advice_names_both_keys_and_no_number(train_json):
    from looper.core.run.budget import budget_advice

    assert budget_advice(train_json, 169, 180) == ("Raise [loop] budget_seconds (now 180) or lower [loop] max_steps "
                                                   "(now 169): the run's train.json does not say where its time went.")
