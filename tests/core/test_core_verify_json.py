"""scripts/verify_json.py: ruff + the fast tier as one verdict; never a pass that did not run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from looper.core.verdicts.verdict import Status

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("verify_json", ROOT / "scripts" / "verify_json.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vj = _load()


def junit(tests: int, failures: int = 0, errors: int = 0, skipped: int = 0, suites: int = 1) -> str:
    one = f'<testsuite name="pytest" tests="{tests}" failures="{failures}" errors="{errors}" skipped="{skipped}"/>'
    return f"<testsuites>{one * suites}</testsuites>"


@pytest.mark.parametrize(
    ("code", "timed_out", "stdout", "status", "reason"),
    [
        (0, False, "[]", Status.PASS, None),
        (1, False, json.dumps([{"code": "F401"}] * 3), Status.FAIL, "ruff: 3 problems"),
        (1, False, json.dumps([{"code": "F401"}]), Status.FAIL, "ruff: 1 problem"),
        (2, False, "", Status.ERROR, "ruff: could not run (exit code 2)"),
        (None, True, "", Status.ERROR, "ruff: did not finish"),
        (0, False, "not json", Status.ERROR, "ruff: unreadable output"),
        (0, False, "{}", Status.ERROR, "ruff: output is not a list"),
        (0, False, json.dumps([{"code": "E1"}]), Status.ERROR, "contradicts its 1 reported problems"),
        (1, False, "[]", Status.ERROR, "ruff: exit code 1 contradicts its 0 reported problems"),
    ],
)
def test_ruff_verdict(code: int | None, timed_out: bool, stdout: str, status: Status, reason: str | None) -> None:
    v = vj.ruff_verdict(code, timed_out, stdout)
    assert v.status is status
    assert (reason is None and v.blocking == []) or any(reason in b for b in v.blocking)


@pytest.mark.parametrize(
    ("code", "timed_out", "report", "status", "reason"),
    [
        (0, False, junit(120), Status.PASS, None),
        (0, False, junit(10, skipped=2, suites=2), Status.PASS, None),
        (1, False, junit(120, failures=2), Status.FAIL, "pytest: 2 failed"),
        (1, False, junit(120, errors=1), Status.ERROR, "pytest: 1 error (tests could not run)"),
        (1, False, junit(120, failures=1, errors=2), Status.ERROR, "pytest: 2 errors"),
        (1, False, junit(120), Status.ERROR, "pytest: exit code 1 but no test failed"),
        (0, False, junit(120, failures=1), Status.ERROR, "exit code 0 contradicts 1 failed"),
        (5, False, None, Status.ERROR, "pytest: collected no test"),
        (0, False, junit(0), Status.ERROR, "pytest: no test ran (0 skipped)"),
        (0, False, junit(3, skipped=3), Status.ERROR, "pytest: no test ran (3 skipped)"),
        (2, False, junit(5, errors=2), Status.ERROR, "was interrupted (collection errors?) (exit code 2; 2 errors)"),
        (3, False, None, Status.ERROR, "hit an internal error"),
        (4, False, None, Status.ERROR, "was called wrongly"),
        (-11, False, None, Status.ERROR, "pytest: crashed (exit code -11)"),
        (None, True, None, Status.ERROR, f"pytest: did not finish within {vj.DEADLINE_S:.0f} s"),
        (0, False, None, Status.ERROR, "pytest: wrote no junit report during this run"),
        (0, False, "<testsuites", Status.ERROR, "pytest: unreadable junit report"),
        (0, False, "<nothing/>", Status.ERROR, "no <testsuite>"),
    ],
)
def test_pytest_verdict(code: int | None, timed_out: bool, report: str | None, status: Status,
                        reason: str | None) -> None:
    v = vj.pytest_verdict(code, timed_out, report)
    assert v.status is status, v
    assert (reason is None and v.blocking == []) or any(reason in b for b in v.blocking), v.blocking


def test_pass_counts() -> None:
    v = vj.pytest_verdict(0, False, junit(10, skipped=2))
    assert v.metrics == {"tests": 10, "failures": 0, "errors": 0, "skipped": 2, "passed": 8}


# -- the script end to end on tiny throwaway repositories (2-3 s each) ---------------------------
# One run stays in the fast tier (the one that must not pass); the rest are in the e2e tier.


def _repo(tmp: Path, test_body: str | None, lint_problem: bool = False) -> Path:
    for d in ("looper", "tests", "scripts"):
        (tmp / d).mkdir()
    (tmp / "ruff.toml").write_text('[lint]\nselect = ["F"]\n')
    (tmp / "looper" / "m.py").write_text("import os\n" if lint_problem else "X = 1\n")
    if test_body is not None:
        (tmp / "tests" / "test_x.py").write_text(test_body)
    return tmp


def _run(root: Path) -> tuple[int, dict, str]:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "verify_json.py"), "--root", str(root)],
                          capture_output=True, text=True, timeout=60)
    last = done.stdout.strip().splitlines()[-1]
    return done.returncode, json.loads(last), done.stdout


def test_script_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # in-process main() (the tools still run as child processes): one interpreter start cheaper
    body = "def test_ok():\n    assert True\n\n\ndef test_bad():\n    x = 1\n    assert x == 2\n"
    code = vj.main(["--root", str(_repo(tmp_path, body, lint_problem=True))])
    stdout = capsys.readouterr().out
    verdict = json.loads(stdout.strip().splitlines()[-1])
    assert (code, verdict["status"]) == (1, "fail")
    assert verdict["blocking"] == ["ruff: 1 problem", "pytest: 1 failed"]
    assert verdict["metrics"]["tests"] == 2 and verdict["metrics"]["passed"] == 1
    assert len(stdout.strip().splitlines()) == 1  # the verdict is the only stdout line
    # the clock plugin ran in a checkout without this project's conftest (-p pytest_clock)
    assert 0 < verdict["metrics"]["collect_seconds"] <= verdict["metrics"]["pytest_seconds"]


@pytest.mark.e2e
def test_script_pass(tmp_path: Path) -> None:
    code, verdict, _ = _run(_repo(tmp_path, "def test_ok():\n    x = 2\n    assert x == 2\n"))
    assert (code, verdict["status"]) == (0, "pass"), verdict
    assert verdict["metrics"]["tests"] == 1 and verdict["metrics"]["ruff_problems"] == 0


@pytest.mark.e2e
def test_script_error_when_no_test_ran(tmp_path: Path) -> None:
    code, verdict, _ = _run(_repo(tmp_path, None))
    assert (code, verdict["status"]) == (2, "error")
    assert verdict["blocking"] == ["pytest: collected no test"]


@pytest.mark.e2e
def test_script_error_when_a_test_file_cannot_import(tmp_path: Path) -> None:
    body = "import not_a_real_module_xyz\n\n\ndef test_ok():\n    assert not_a_real_module_xyz\n"
    code, verdict, _ = _run(_repo(tmp_path, body))
    assert (code, verdict["status"]) == (2, "error")
    # on pytest-xdist's workers a file that cannot import is one error of the run (exit 1), not an interruption
    assert verdict["blocking"] == ["pytest: 1 error (tests could not run)"]


@pytest.mark.e2e
def test_script_stopped_at_its_deadline_names_the_running_and_the_slowest_tests(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    body = ("import time\n\n\ndef test_a_quick_one():\n    time.sleep(0.3)\n\n\n"
            "def test_z_never_ends():\n    time.sleep(60)\n")
    monkeypatch.setattr(vj, "DEADLINE_S", 15.0)  # room for a slow start on a busy machine
    code = vj.main(["--root", str(_repo(tmp_path, body))])
    captured = capsys.readouterr()
    verdict = json.loads(captured.out.strip().splitlines()[-1])
    assert (code, verdict["status"]) == (2, "error")
    stopped = [b for b in verdict["blocking"] if "stopped after" in b]
    assert stopped == [stopped[0]] and "stopped after 1 of 2 tests (collection" in stopped[0]
    assert "during tests/test_x.py::test_z_never_ends" in stopped[0]
    assert "tests/test_x.py::test_a_quick_one" in stopped[0]
    assert verdict["metrics"]["running_when_stopped"] == "tests/test_x.py::test_z_never_ends"
    assert [x.split(" s ")[1] for x in verdict["metrics"]["slowest"]] == ["tests/test_x.py::test_a_quick_one"]
    assert float(verdict["metrics"]["slowest"][0].split(" s ")[0]) >= 0.3
    assert "slowest tests" in captured.err and "test_a_quick_one" in captured.err


# -- the fast tier's clock (scripts/pytest_clock.py) and what the verdict says of it --------------


def _events(*evs: dict) -> str:
    return "\n".join(json.dumps(e) for e in evs)


def test_clock_reads_a_finished_run() -> None:
    clock = vj.pytest_clock.summarise(_events(
        {"event": "collected", "tests": 2, "at": 1.5},
        {"event": "start", "test": "t::a", "at": 1.6}, {"event": "done", "test": "t::a", "seconds": 0.4, "at": 2.0},
        {"event": "start", "test": "t::b", "at": 2.0}, {"event": "done", "test": "t::b", "seconds": 3.0, "at": 5.0},
        {"event": "finished", "at": 5.2}))
    assert (clock.collect_s, clock.collected, clock.running, clock.finished_at) == (1.5, 2, None, 5.2)
    assert clock.durations == {"t::a": 0.4, "t::b": 3.0}
    assert vj.pytest_clock.clock_line(clock, fast=True) == (
        "fast tier: 5.2 s (collection 1.5 s, 2 tests 3.4 s), within its 30 s budget")
    assert vj.pytest_clock.clock_line(clock, fast=False) == "this run: 5.2 s (collection 1.5 s, 2 tests 3.4 s)"
    assert "OVER its 4 s budget" in vj.pytest_clock.clock_line(clock, fast=True, budget_s=4)


@pytest.mark.parametrize(("markexpr", "covered", "paths", "fast"), [
    ("not e2e", False, ["/r/tests"], True),                # make test-fast, make verify-json (testpaths)
    ("not  e2e", False, ["tests"], True),
    ("not e2e", False, ["/r"], True),
    ("not e2e", True, ["/r/tests/core"], False),           # make test's coverage step: not the tier
    ("not e2e", True, ["/r/tests"], False),                # coverage tracing slows every test
    ("not e2e", False, ["/r/tests/core"], False),          # a part of the tier
    ("not e2e", False, ["tests/core/test_core_gate.py"], False),
    ("", False, ["/r/tests"], False),                      # every tier
    ("e2e", False, ["/r/tests"], False),
])
def test_only_the_whole_fast_tier_untraced_is_held_to_its_budget(markexpr: str, covered: bool, paths: list[str],
                                                                   fast: bool) -> None:
    assert vj.pytest_clock.is_fast_tier(markexpr, covered, paths, "/r") is fast


def test_clock_of_a_killed_run_keeps_what_finished_and_names_the_running_test() -> None:
    text = _events({"event": "collected", "tests": 3, "at": 1.0},
                   {"event": "start", "test": "t::a", "at": 1.0}, {"event": "done", "test": "t::a", "seconds": 2.0, "at": 3.0},
                   {"event": "start", "test": "t::b", "at": 3.0}) + '\n{"event": "do'  # torn by the kill
    clock = vj.pytest_clock.summarise(text)
    assert (clock.running, clock.finished_at, clock.last_at, clock.durations) == ("t::b", None, 3.0, {"t::a": 2.0})
    assert vj.pytest_clock.summarise("").collect_s is None
    assert vj.pytest_clock.summarise('[1]\n{"event": "done", "test": "x"}').durations == {}  # malformed: ignored


def test_clock_of_a_killed_run_on_two_workers_names_both_running_tests() -> None:
    """Under pytest-xdist two tests run at once: one finishing leaves the other running (before, the last started
    was the only one named, and its neighbour finishing first made the clock say nothing ran)."""
    text = _events({"event": "collected", "tests": 3, "at": 1.0},
                   {"event": "start", "test": "t::a", "at": 1.0}, {"event": "start", "test": "t::b", "at": 1.1},
                   {"event": "start", "test": "t::c", "at": 1.2}, {"event": "done", "test": "t::b", "seconds": 0.5, "at": 1.6})
    assert vj.pytest_clock.summarise(text).running == "t::a, t::c"


def test_slowest_is_slowest_first_with_ties_by_name_and_cut_at_n() -> None:
    d = {"t::c": 1.0, "t::a": 2.5, "t::b": 1.0, "t::d": 0.01}
    assert vj.pytest_clock.slowest(d, 3) == ["2.50 s t::a", "1.00 s t::b", "1.00 s t::c"]
    assert vj.pytest_clock.slowest({}) == []


def _clock(running: str | None = None, collected: bool = True) -> object:
    evs: list[dict] = [{"event": "collected", "tests": 12, "at": 2.0}] if collected else []
    evs += [{"event": "done", "test": f"t::{i}", "seconds": float(i), "at": 3.0} for i in range(1, 12)]
    if running:
        evs.append({"event": "start", "test": running, "at": 40.0})
    return vj.pytest_clock.summarise(_events(*evs))


def test_within_budget_the_verdict_carries_only_the_durations() -> None:
    v = vj.with_clock(vj.Verdict.passed(metrics={"tests": 12}), _clock(), timed_out=False, seconds=12.345)
    assert v.status is Status.PASS and v.metrics == {"tests": 12, "pytest_seconds": 12.35, "collect_seconds": 2.0}
    assert vj.with_clock(vj.Verdict.passed(), None, False, 3.0).metrics == {"pytest_seconds": 3.0}


def test_over_budget_still_passes_and_names_the_ten_slowest() -> None:
    v = vj.with_clock(vj.Verdict.passed(), _clock(), timed_out=False, seconds=31.0)
    assert v.status is Status.PASS and v.blocking == []
    assert v.metrics["fast_budget_seconds"] == 30.0 and "running_when_stopped" not in v.metrics
    assert v.metrics["slowest"] == [f"{i:.2f} s t::{i}" for i in range(11, 1, -1)]


def test_stopped_at_the_deadline_names_the_running_and_slowest_tests_in_its_reason() -> None:
    timed = vj.pytest_verdict(None, True, None, 47.0)
    v = vj.with_clock(timed, _clock(running="t::stuck"), timed_out=True, seconds=47.0)
    assert v.status is Status.ERROR and v.blocking[0] == "pytest: did not finish within 47 s"
    assert v.blocking[1] == ("pytest: stopped after 11 of 12 tests (collection 2.0 s), during t::stuck; "
                             "slowest: 11.00 s t::11, 10.00 s t::10, 9.00 s t::9")
    assert v.metrics["running_when_stopped"] == "t::stuck" and len(v.metrics["slowest"]) == 10
    ended = vj.with_clock(timed, vj.pytest_clock.summarise(_events(
        {"event": "collected", "tests": 1, "at": 2.0}, {"event": "start", "test": "t::1", "at": 2.0},
        {"event": "done", "test": "t::1", "seconds": 40.0, "at": 42.0}, {"event": "finished", "at": 42.5})),
        timed_out=True, seconds=47.0)
    assert ended.blocking[1] == ("pytest: all 1 tests finished (collection 2.0 s, the session 42.5 s) but pytest "
                                 "had not exited; slowest: 40.00 s t::1")
    early = vj.with_clock(timed, _clock(collected=False), timed_out=True, seconds=47.0)
    assert early.blocking[1] == "pytest: stopped while collecting (3 s in)" and "collect_seconds" not in early.metrics
