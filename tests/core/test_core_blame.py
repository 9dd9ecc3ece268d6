"""Whose fault (looper.core.fault.blame): a candidate's failure halts as a harness error only when a
canary fails too; an evaluation far longer than the best's is the candidate's crash."""

from __future__ import annotations

import pytest

from looper.core.fault.blame import decide, eval_time_limit, needs_canary
from looper.core.verdicts.verdict import Outcome

CANARY = "the last kept train.py"


@pytest.mark.parametrize("outcome, is_candidate, expected", [
    (Outcome.ERROR, True, True),  # a candidate's would-be halt: prove it first
    (Outcome.ERROR, False, False),  # the baseline's own failure: no canary exists yet
    (Outcome.CRASH, True, False),  # already the candidate's: nothing to prove
    (Outcome.VACUOUS, True, False),
    (Outcome.INTERRUPTED, True, False),
])
def test_which_failures_need_a_canary(outcome, is_candidate, expected):
    assert needs_canary(outcome, is_candidate) is expected


@pytest.mark.parametrize("outcome, canary_failed, expected", [
    (Outcome.ERROR, False, Outcome.CRASH),  # the harness works: the change broke its own run
    (Outcome.ERROR, True, Outcome.ERROR),  # the known-good run fails too: the harness broke
    (Outcome.ERROR, None, Outcome.ERROR),  # no canary could run: the classifier's answer stands
    (Outcome.CRASH, True, Outcome.CRASH),  # decide never turns a crash into anything else
    (Outcome.CRASH, False, Outcome.CRASH),
    (Outcome.CRASH, None, Outcome.CRASH),
])
def test_the_canary_decides_a_would_be_harness_error(outcome, canary_failed, expected):
    assert decide(outcome, "harness error: the GPU failed", canary_failed, CANARY).outcome is expected


def test_a_proven_crash_keeps_what_was_seen_and_names_the_canary():
    b = decide(Outcome.ERROR, "harness error: the disk is full (OSError: [Errno 28] No space left)", False, CANARY)
    assert b.outcome is Outcome.CRASH
    assert "harness error:" not in b.reason  # the prefix is gone: it is not a harness error
    assert "the disk is full (OSError: [Errno 28] No space left)" in b.reason
    assert "the last kept train.py (canary) ran cleanly" in b.reason


def test_a_reason_without_the_prefix_is_quoted_whole():
    b = decide(Outcome.ERROR, "evaluation hung: evaluating", False, "the best's weights")
    assert "(evaluation hung: evaluating)" in b.reason and "the best's weights (canary) ran cleanly" in b.reason


def test_a_proven_error_says_the_canary_failed_too():
    b = decide(Outcome.ERROR, "harness error: NVML failed", True, CANARY)
    assert b.reason.startswith("harness error: NVML failed; ") and "failed too" in b.reason


def test_unproven_outcomes_keep_their_reason_unchanged():
    assert decide(Outcome.ERROR, "why", None, CANARY).reason == "why"
    assert decide(Outcome.CRASH, "why", False, CANARY).reason == "why"


@pytest.mark.parametrize("best, factor, floor, expected", [
    (10.0, 5.0, 60.0, 110.0),  # 5 x 10 s + 60 s
    (0.5, 5.0, 3.0, 5.5),
    (2.0, 1.0, 1.0, 3.0),
    (None, 5.0, 60.0, None),  # the best's evaluation time is unknown: no such limit
    (0.0, 5.0, 60.0, None),  # nothing measured
    (-1.0, 5.0, 60.0, None),
])
def test_the_evaluation_time_limit_is_a_factor_of_the_best_plus_a_floor(best, factor, floor, expected):
    assert eval_time_limit(best, factor, floor) == expected
