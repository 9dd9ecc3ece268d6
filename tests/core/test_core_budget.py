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


# ---------------------------------------------------------------- a fixed step budget's fit run
@pytest.mark.parametrize("max_steps, expected", [(1, 1), (9, 9), (10, 10), (26, 10), (50, 10), (55, 11), (169, 33),
                                                 (1000, 200)])
def test_a_fit_run_trains_a_fifth_of_the_step_budget_at_least_10_at_most_all(max_steps, expected):
    assert budget.fit_steps(max_steps) == expected


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "169"])
def test_a_fit_run_needs_a_step_budget(bad):
    with pytest.raises(ValueError, match="at least one step"):
        budget.fit_steps(bad)


# fit run figures -> (status, the tag's wall clock, need); rate = steps / (seconds - startup)
@pytest.mark.parametrize("tj, max_steps, wall, expected", [
    # 10 steps in 5 s after 1 s: 2 steps/s; 14 steps need 1 + 7 = 8 s, x 1.25 = 10
    ({"steps": 10, "seconds": 6.0, "startup_seconds": 1.0}, 14, 10, ("fits", 10, 10)),
    ({"steps": 10, "seconds": 6.0, "startup_seconds": 1.0}, 14, 6, ("raised", 10, 10)),
    ({"steps": 10, "seconds": 6.0, "startup_seconds": 1.0}, 14, 4, ("raised", 10, 10)),  # 10 <= 3 x 4
    ({"steps": 10, "seconds": 6.0, "startup_seconds": 1.0}, 14, 3, ("too slow", 3, 10)),  # 10 > 3 x 3
    ({"steps": 10, "seconds": 6.0, "startup_seconds": 1.0}, 50, 6, ("too slow", 6, 33)),  # 1.25 x 26 = 32.5
    # the time a run keeps back for saving is added whole, not scaled
    ({"steps": 10, "seconds": 6.0, "startup_seconds": 1.0, "overhead_seconds": 8}, 14, 10, ("raised", 18, 18)),
    # the firm's drawings before the label index: 94 s of start-up, 145 steps in 172 s
    ({"steps": 33, "seconds": 112.7, "startup_seconds": 94.0, "overhead_seconds": 8}, 169, 180, ("raised", 246, 246)),
    # ... and after it: 12 s of start-up
    ({"steps": 33, "seconds": 31.0, "startup_seconds": 12.0, "overhead_seconds": 8}, 169, 180, ("fits", 180, 145)),
    ({"steps": 33, "seconds": 31.0, "startup_seconds": 12.0}, 169, 179.5, ("fits", 180, 137)),  # a wall clock rounded up
])
def test_a_fit_run_keeps_raises_or_refuses_the_wall_clock(tj, max_steps, wall, expected):
    got = budget.fit_wall_clock(tj, max_steps, wall)
    assert (got.status, got.seconds, got.need) == expected, got.why
    assert got.as_dict() == {"status": got.status, "seconds": got.seconds, "need": got.need, "why": got.why}


def test_a_fit_run_says_where_its_time_went_and_what_to_change():
    tj = {"steps": 10, "seconds": 6.0, "startup_seconds": 1.0}
    assert budget.fit_wall_clock(tj, 14, 6).why == ("10 steps after 1 s of start-up, 2.00 steps/s: 14 steps need "
                                                    "about 8 s; the wall clock raised from 6 s to 10 s (25 % to spare)")
    assert budget.fit_wall_clock(tj, 14, 10).why.endswith("; 10 s with 25 % to spare fit the 10 s wall clock")
    slow = budget.fit_wall_clock(tj, 50, 6).why
    assert "33 s with 25 % to spare is more than 3 x the 6 s wall clock" in slow
    # to fit 6 s: 80 % of (6 - 1) s at 2 steps/s = 8 steps
    assert slow.endswith("Raise [loop] budget_seconds to at least 33, or lower [loop] max_steps to 8 to fit 6 s, "
                         "and start `looper run` again.")


@pytest.mark.parametrize("tj", [
    None, {}, {"steps": 10, "seconds": 0.1},  # no start-up figure (a train.py of one's own)
    {"steps": 10, "seconds": 1.0, "startup_seconds": 1.0},  # no time after start-up
    {"steps": 0, "seconds": 6.0, "startup_seconds": 1.0}, {"steps": True, "seconds": 6.0, "startup_seconds": 1.0},
    {"steps": 10, "seconds": "6", "startup_seconds": 1.0}, {"steps": 10, "seconds": 6.0, "startup_seconds": -1.0},
    {"steps": 10, "seconds": float("nan"), "startup_seconds": 1.0},
    {"steps": 10, "seconds": 6.0, "startup_seconds": 1.0, "overhead_seconds": None},
])
def test_a_fit_run_that_does_not_say_where_its_time_went_leaves_the_wall_clock(tj):
    got = budget.fit_wall_clock(tj, 14, 6)
    assert (got.status, got.seconds, got.need) == ("unknown", 6, None)
    assert got.why.startswith("the fit run's train.json does not say")
