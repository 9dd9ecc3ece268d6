"""Reading a check's result: stale, unreadable, contradicted or off-schema results are errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from looper.core.verdicts.result import last_json_line, read_check_output, read_check_result
from looper.core.verdicts.verdict import Status, Verdict

PASS = json.dumps({"status": "pass", "blocking": [], "metrics": {"tests": 3}, "confidence": 1.0})
FAIL = json.dumps({"status": "fail", "blocking": ["x dropped"], "metrics": {}, "confidence": 1.0})
ERROR = json.dumps({"status": "error", "blocking": ["gpu gone"], "metrics": {}, "confidence": 1.0})


def doc(**over: object) -> str:
    base: dict[str, object] = {"status": "pass", "blocking": [], "metrics": {}, "confidence": 1.0}
    base.update(over)
    return json.dumps(base)


@pytest.mark.parametrize(
    ("text", "exit_code", "written", "status", "reason"),
    [
        # the seeds' cases
        (PASS, 0, False, Status.ERROR, "wrote no result during this run (an old file is not a result)"),
        (PASS, 1, True, Status.ERROR, "said pass but exited with exit code 1 (a contradiction"),
        (PASS, None, True, Status.ERROR, "said pass but exited with no exit status"),
        (PASS, -9, True, Status.ERROR, "exit code -9"),
        (None, 0, True, Status.ERROR, "wrote an empty result"),
        ("", 0, True, Status.ERROR, "wrote an empty result"),
        ("   \n", 0, True, Status.ERROR, "wrote an empty result"),
        ('{"status": "pass"', 0, True, Status.ERROR, "not readable JSON (JSONDecodeError"),
        ("[1, 2]", 0, True, Status.ERROR, "is a JSON list, not a verdict object"),
        ('"pass"', 0, True, Status.ERROR, "is a JSON str, not a verdict object"),
        (doc(status="ok"), 0, True, Status.ERROR, 'has status "ok", not pass, fail or error'),
        (doc(status=["pass"]), 0, True, Status.ERROR, "not pass, fail or error"),
        (json.dumps({"blocking": []}), 0, True, Status.ERROR, "has status null"),
        (json.dumps({"status": "pass"}), 0, True, Status.ERROR,
         "fails the verdict schema: missing blocking, metrics, confidence"),
        (doc(blocking=["but"]), 0, True, Status.ERROR, "fails the verdict schema"),
        (doc(status="fail", blocking=[]), 1, True, Status.ERROR, "must say why"),
        (doc(status="fail", blocking=[3]), 1, True, Status.ERROR, "blocking.0"),
        (doc(confidence="1"), 0, True, Status.ERROR, "confidence"),
        (doc(confidence=2), 0, True, Status.ERROR, "confidence"),
        (doc(extra=1), 0, True, Status.ERROR, "extra"),
        (doc(metrics=[]), 0, True, Status.ERROR, "metrics"),
        # the child's word stands when it is not a pass
        (FAIL, 1, True, Status.FAIL, "x dropped"),
        (FAIL, 0, True, Status.FAIL, "x dropped"),
        (ERROR, 0, True, Status.ERROR, "gpu gone"),
        (ERROR, 2, True, Status.ERROR, "gpu gone"),
        (PASS, 0, True, Status.PASS, None),
    ],
)
def test_read_check_result(text: str | None, exit_code: int | None, written: bool, status: Status,
                           reason: str | None) -> None:
    v = read_check_result(text, exit_code, written, check="evaluate.py")
    assert v.status is status
    if reason is None:
        assert v.blocking == [] and v.metrics == {"tests": 3}
    else:
        assert any(reason in b for b in v.blocking), v.blocking
    if status is Status.ERROR and text not in (ERROR,):
        assert v.metrics == {"check": "evaluate.py", "exit_code": exit_code}
        assert "evaluate.py" in v.blocking[0]


def test_many_schema_problems_are_summarised() -> None:
    text = doc(status="fail", blocking=[1, 2, 3, 4, 5])
    v = read_check_result(text, 1, True)
    assert v.status is Status.ERROR and "(and 2 more)" in v.blocking[0]


def test_long_garbage_is_shortened() -> None:
    v = read_check_result(json.dumps({"status": "x" * 500, "blocking": [], "metrics": {}, "confidence": 1}),
                          0, True)
    assert v.status is Status.ERROR and len(v.blocking[0]) < 250 and "..." in v.blocking[0]


@settings(max_examples=50, deadline=None)
@given(text=st.one_of(st.none(), st.text(max_size=60), st.sampled_from([PASS, FAIL, ERROR])),
       exit_code=st.one_of(st.none(), st.integers(-15, 300)), written=st.booleans())
def test_pass_only_from_a_fresh_clean_pass(text: str | None, exit_code: int | None, written: bool) -> None:
    v = read_check_result(text, exit_code, written)
    if v.status is Status.PASS:
        assert written and exit_code == 0 and text is not None
        assert json.loads(text)["status"] == "pass"


@settings(max_examples=50, deadline=None)
@given(exit_code=st.one_of(st.none(), st.integers(-15, 300)), written=st.booleans())
def test_an_error_never_becomes_pass_or_fail(exit_code: int | None, written: bool) -> None:
    assert read_check_result(ERROR, exit_code, written).status is Status.ERROR


@settings(max_examples=50, deadline=None)
@given(verdict=st.builds(
    lambda s, r, c: Verdict(status=s, blocking=[] if s is Status.PASS else r, confidence=c),
    st.sampled_from(list(Status)), st.lists(st.text(min_size=1), min_size=1, max_size=3),
    st.floats(0, 1)))
def test_round_trip_of_any_valid_verdict(verdict: Verdict) -> None:
    text = json.dumps(verdict.to_json_dict())
    assert read_check_result(text, 0, True) == verdict


@pytest.mark.parametrize(
    ("output", "line"),
    [
        (None, None),
        ("", None),
        ("\n  \n", None),
        ("collecting...\n" + PASS + "\n\n", PASS),
        (PASS + "\nmore text after the verdict\n", None),
        ("  " + PASS + "  ", PASS),
    ],
)
def test_last_json_line(output: str | None, line: str | None) -> None:
    assert last_json_line(output) == line


def test_read_check_output() -> None:
    assert read_check_output("log\n" + PASS, 0, check="looper verify").ok
    v = read_check_output("log\n" + PASS, 1, check="looper verify")
    assert v.status is Status.ERROR and "looper verify said pass" in v.blocking[0]
    v = read_check_output("Traceback ...\nBoom", 2, check="looper verify")
    assert v.status is Status.ERROR
    assert v.blocking == ["looper verify printed no verdict object as its last line"]
