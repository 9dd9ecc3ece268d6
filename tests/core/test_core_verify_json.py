"""scripts/verify_json.py: ruff + the fast tier as one verdict; never a pass that did not run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from looper.core.verdict import Status

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
    assert "pytest: was interrupted (collection errors?)" in verdict["blocking"][0]
