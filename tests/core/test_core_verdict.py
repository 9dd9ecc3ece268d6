"""Verdict invariants, combining, and the Outcome enum's behaviour."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from looper.core.verdicts.verdict import Outcome, Status, Verdict

reasons = st.lists(st.text(min_size=1, max_size=20), max_size=4)


@settings(max_examples=50, deadline=None)
@given(status=st.sampled_from(list(Status)), blocking=reasons)
def test_blocking_is_empty_exactly_on_pass(status: Status, blocking: list[str]) -> None:
    try:
        v = Verdict(status=status, blocking=blocking)
    except ValidationError:
        assert (status is Status.PASS) == bool(blocking)
    else:
        assert (v.status is Status.PASS) == (not v.blocking)


@pytest.mark.parametrize(
    ("status", "blocking", "message"),
    [
        (Status.PASS, ["why"], "passing verdict carries no blocking"),
        (Status.FAIL, [], "fail verdict must say why"),
        (Status.ERROR, [], "error verdict must say why"),
    ],
)
def test_invalid_verdicts_say_why(status: Status, blocking: list[str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Verdict(status=status, blocking=blocking)


def test_confidence_is_bounded() -> None:
    with pytest.raises(ValidationError):
        Verdict(status=Status.PASS, confidence=1.5)
    assert Verdict.passed(confidence=0.5).confidence == 0.5


def test_constructors_and_json() -> None:
    v = Verdict.failed("a", "b", metrics={"x": 1})
    assert v.to_json_dict() == {"status": "fail", "blocking": ["a", "b"], "metrics": {"x": 1},
                                "confidence": 1.0}
    assert not v.ok and Verdict.passed().ok
    assert Verdict.errored("e").status is Status.ERROR


def test_with_metrics_merges_and_keeps_the_rest() -> None:
    v = Verdict.failed("r", metrics={"a": 1}).with_metrics(b=2, a=3)
    assert v.metrics == {"a": 3, "b": 2} and v.blocking == ["r"] and v.status is Status.FAIL


@pytest.mark.parametrize(
    ("parts", "expected", "blocking"),
    [
        ({"a": Verdict.passed(), "b": Verdict.passed(confidence=0.7)}, Status.PASS, []),
        ({"a": Verdict.passed(), "b": Verdict.failed("b broke")}, Status.FAIL, ["b broke"]),
        ({"a": Verdict.errored("a gone"), "b": Verdict.failed("b broke")}, Status.ERROR,
         ["a gone", "b broke"]),
        ({}, Status.ERROR, ["nothing was checked (no parts to combine)"]),
    ],
)
def test_combine_worst_status_wins(parts: dict[str, Verdict], expected: Status, blocking: list[str]) -> None:
    v = Verdict.combine(parts, metrics={"n": 1})
    assert v.status is expected and v.blocking == blocking
    assert v.metrics["n"] == 1
    for name, part in parts.items():
        assert v.metrics[name] == part.status.value
    if expected is Status.PASS:
        assert v.confidence == 0.7


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(list(Status)), min_size=1, max_size=5))
def test_combine_error_never_becomes_pass_or_fail(statuses: list[Status]) -> None:
    parts = {f"p{i}": (Verdict.passed() if s is Status.PASS else Verdict(status=s, blocking=[f"r{i}"]))
             for i, s in enumerate(statuses)}
    v = Verdict.combine(parts)
    if Status.ERROR in statuses:
        assert v.status is Status.ERROR
    elif Status.FAIL in statuses:
        assert v.status is Status.FAIL
    else:
        assert v.status is Status.PASS


def test_outcome_values_are_the_contract_statuses() -> None:
    assert Outcome.values() == ["pending", "running", "keep", "discard", "crash", "vacuous",
                                "inconclusive", "error", "interrupted"]


@pytest.mark.parametrize(
    ("outcome", "terminal", "result", "advances", "resets", "exclusion", "halts"),
    [
        (Outcome.PENDING, False, False, False, False, False, False),
        (Outcome.RUNNING, False, False, False, False, False, False),
        (Outcome.KEEP, True, True, True, False, False, False),
        (Outcome.DISCARD, True, True, False, True, True, False),
        (Outcome.CRASH, True, False, False, True, True, False),
        (Outcome.VACUOUS, True, False, False, True, False, False),
        (Outcome.INCONCLUSIVE, True, True, False, True, False, False),
        (Outcome.ERROR, True, False, False, False, False, True),
        (Outcome.INTERRUPTED, True, False, False, True, False, False),
    ],
)
def test_outcome_behaviour(outcome: Outcome, terminal: bool, result: bool, advances: bool,
                           resets: bool, exclusion: bool, halts: bool) -> None:
    assert outcome.is_terminal is terminal
    assert outcome.counts_as_result is result and outcome.has_score is result
    assert outcome.advances_branch is advances
    assert outcome.resets_checkout is resets
    assert outcome.is_exclusion is exclusion
    assert outcome.halts_loop is halts


def test_outcome_parse() -> None:
    assert Outcome.parse("keep") is Outcome.KEEP
    with pytest.raises(ValueError, match="unknown experiment status 'kept'; allowed: pending"):
        Outcome.parse("kept")
