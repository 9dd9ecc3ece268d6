"""`make verify-json`: lint and the fast test tier, answered as ONE verdict object.

Runs ``ruff check looper tests scripts`` and ``pytest -m "not e2e"`` (with a junit report
that is deleted before the run, so an old report is never read), then prints one verdict
as a single JSON line, the last line of stdout. Human-readable details go to stderr.

- pass: ruff found nothing and pytest ran at least one test with none failed;
- fail: the tools ran and found problems ("ruff: 3 problems", "pytest: 2 failed");
- error: a tool could not run, crashed, timed out, contradicted itself, or pytest
  collected or ran no test (collection errors included: a test layer that cannot run).

Exit code 0 / 1 / 2 for pass / fail / error. The whole run stays under 55 s: ruff gets
at most 15 s and pytest what is left of 47 s (a late child gets 5 s more to stop).

The fast tier's clock (issue 26): pytest runs with scripts/pytest_clock.py (``-p pytest_clock``),
which writes each test's duration as it finishes. The verdict's metrics always carry
``pytest_seconds`` and ``collect_seconds``; a run over the fast tier's 30 s budget, or one stopped
at the deadline, also carries ``slowest`` (the ten slowest tests that finished, "1.23 s test id")
and, when stopped, ``running_when_stopped``; a stopped run names them in its blocking reason too,
so the next person sees what to move to the end-to-end tier.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RUFF_PATHS = ("looper", "tests", "scripts")
DEADLINE_S = 47.0  # + up to 5 s for proc.run to stop a late pytest: stays under 55 s
RUFF_TIMEOUT_S = 15.0
EXIT_FOR_STATUS = {"pass": 0, "fail": 1, "error": 2}

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))
import pytest_clock  # noqa: E402 - standard library only: cannot break with the package

try:  # the verdict type comes from the package; if the package is broken, say so in JSON
    sys.path.insert(0, str(ROOT))
    from looper.core.verdicts.verdict import Verdict
    from looper.proc import Completed, run
except Exception as exc:  # pragma: no cover - exercised only when the package is broken
    print(json.dumps({"status": "error", "blocking": [f"verify: cannot import looper ({exc!r})"],
                      "metrics": {}, "confidence": 1.0}))
    sys.exit(2)


# -- pure judges (tested in tests/core/test_verify_json.py) ------------------------------------


def ruff_verdict(exit_code: int | None, timed_out: bool, stdout: str) -> Verdict:
    """ruff's answer: 0 and no diagnostics -> pass; 1 with diagnostics -> fail; else error."""
    if timed_out:
        return Verdict.errored(f"ruff: did not finish within {RUFF_TIMEOUT_S:g} s")
    if exit_code not in (0, 1):
        return Verdict.errored(f"ruff: could not run (exit code {exit_code})")
    try:
        problems = json.loads(stdout or "")
    except json.JSONDecodeError:
        return Verdict.errored(f"ruff: unreadable output (exit code {exit_code})")
    if not isinstance(problems, list):
        return Verdict.errored("ruff: output is not a list of problems")
    n = len(problems)
    facts = {"ruff_problems": n}
    if exit_code == 0 and n == 0:
        return Verdict.passed(metrics=facts)
    if exit_code == 1 and n > 0:
        return Verdict.failed(f"ruff: {n} problem{'s' if n != 1 else ''}", metrics=facts)
    return Verdict.errored(f"ruff: exit code {exit_code} contradicts its {n} reported problems",
                           metrics=facts)


def parse_junit(text: str) -> dict[str, int]:
    """Counts from a pytest junit report: tests, failures, errors, skipped (summed over suites)."""
    root = ET.fromstring(text)
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if not suites:
        raise ValueError("no <testsuite> in the junit report")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, "0"))
    return counts


def pytest_verdict(exit_code: int | None, timed_out: bool, junit_text: str | None,
                   timeout_s: float = DEADLINE_S) -> Verdict:
    """pytest's answer from its exit code and the junit report it wrote during this run."""
    if timed_out:
        return Verdict.errored(f"pytest: did not finish within {timeout_s:.0f} s")
    if exit_code == 5:
        return Verdict.errored("pytest: collected no test")
    counts: dict[str, int] | None = None
    if junit_text is not None:
        try:
            counts = parse_junit(junit_text)
        except (ET.ParseError, ValueError) as exc:
            return Verdict.errored(f"pytest: unreadable junit report ({exc})")
    facts: dict[str, Any] = dict(counts or {})
    if counts is not None:
        facts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    if exit_code in (2, 3, 4):
        what = {2: "was interrupted (collection errors?)", 3: "hit an internal error",
                4: "was called wrongly"}[exit_code]
        extra = f"; {counts['errors']} errors" if counts and counts["errors"] else ""
        return Verdict.errored(f"pytest: {what} (exit code {exit_code}{extra})", metrics=facts)
    if exit_code not in (0, 1):
        return Verdict.errored(f"pytest: crashed (exit code {exit_code})", metrics=facts)
    if counts is None:
        return Verdict.errored("pytest: wrote no junit report during this run", metrics=facts)
    ran = counts["tests"] - counts["skipped"]
    if ran <= 0:
        return Verdict.errored(f"pytest: no test ran ({counts['skipped']} skipped)", metrics=facts)
    failed, errors = counts["failures"], counts["errors"]
    if exit_code == 0:
        if failed or errors:
            return Verdict.errored(
                f"pytest: exit code 0 contradicts {failed} failed and {errors} errors", metrics=facts)
        return Verdict.passed(metrics=facts)
    if errors:
        reasons = [f"pytest: {errors} error{'s' if errors != 1 else ''} (tests could not run)"]
        if failed:
            reasons.append(f"pytest: {failed} failed")
        return Verdict.errored(*reasons, metrics=facts)
    if failed:
        return Verdict.failed(f"pytest: {failed} failed", metrics=facts)
    return Verdict.errored("pytest: exit code 1 but no test failed", metrics=facts)


def with_clock(verdict: Verdict, clock: pytest_clock.Clock | None, timed_out: bool, seconds: float,
               budget_s: float = pytest_clock.FAST_BUDGET_S, show: int = pytest_clock.SHOW_SLOWEST) -> Verdict:
    """pytest's verdict with the fast tier's clock: its duration always; over the budget or stopped
    at the deadline, its slowest finished tests (and a stopped run names them in its reason)."""
    facts: dict[str, Any] = {"pytest_seconds": round(seconds, 2)}
    if clock is None:
        return verdict.with_metrics(**facts)
    if clock.collect_s is not None:
        facts["collect_seconds"] = round(clock.collect_s, 2)
    if not (timed_out or seconds > budget_s):
        return verdict.with_metrics(**facts)
    facts["fast_budget_seconds"] = budget_s
    facts["slowest"] = pytest_clock.slowest(clock.durations, show)
    if not timed_out:
        return verdict.with_metrics(**facts)
    facts["running_when_stopped"] = clock.running
    total_s = pytest_clock.total_s(clock)
    if clock.collect_s is None:
        why = f"pytest: stopped while collecting ({clock.last_at:.0f} s in)"
    else:
        done = len(clock.durations)
        if done == clock.collected and not clock.running:
            why = (f"pytest: all {done} tests finished (collection {clock.collect_s:.1f} s, the session "
                   f"{total_s:.1f} s) but pytest had not exited")
        else:
            why = f"pytest: stopped after {done} of {clock.collected} tests (collection {clock.collect_s:.1f} s)"
        if clock.running:
            why += f", during {clock.running}"
        if facts["slowest"]:
            why += "; slowest: " + ", ".join(facts["slowest"][:3])
    return Verdict.errored(*verdict.blocking, why, metrics={**verdict.metrics, **facts})


# -- running the tools ---------------------------------------------------------------------------


def _run_ruff(root: Path) -> tuple[Verdict, Completed | None]:
    argv = [sys.executable, "-m", "ruff", "check", *RUFF_PATHS, "--output-format", "json"]
    try:
        done = run(argv, cwd=root, timeout=RUFF_TIMEOUT_S)
    except OSError as exc:
        return Verdict.errored(f"ruff: could not start ({exc})"), None
    return ruff_verdict(done.exit_code, done.timed_out, done.stdout), done


def _run_pytest(root: Path, timeout_s: float) -> tuple[Verdict, Completed | None]:
    with tempfile.TemporaryDirectory(prefix="looper-verify-") as tmp:
        junit, times = Path(tmp) / "junit.xml", Path(tmp) / "times.jsonl"
        junit.unlink(missing_ok=True)  # a report not written by this run does not exist
        argv = [sys.executable, "-m", "pytest", "-m", "not e2e", "-q", "-p", "no:cacheprovider",
                "-p", "pytest_clock", f"--junitxml={junit}", "-n", str(pytest_clock.FAST_WORKERS), "--dist", "loadfile"]
        path = os.pathsep.join(p for p in (str(SCRIPTS), os.environ.get("PYTHONPATH", "")) if p)
        # bytecode caches are written (git-ignored __pycache__, even where PYTHONDONTWRITEBYTECODE is
        # set): recompiling and re-rewriting ~300 files cost about 3 s of every run (issue 26)
        env = {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPATH": path, pytest_clock.TIMES_ENV: str(times)}
        start = time.monotonic()
        try:
            done = run(argv, cwd=root, timeout=timeout_s, env=env)
        except OSError as exc:
            return Verdict.errored(f"pytest: could not start ({exc})"), None
        seconds = time.monotonic() - start
        text = junit.read_text(encoding="utf-8", errors="replace") if junit.exists() else None
        clock = pytest_clock.summarise(times.read_text(encoding="utf-8", errors="replace")) if times.exists() else None
    verdict = pytest_verdict(done.exit_code, done.timed_out, text, timeout_s)
    return with_clock(verdict, clock, done.timed_out, seconds), done


def _explain(name: str, verdict: Verdict, done: Completed | None) -> None:
    if verdict.ok or done is None:
        return
    if name == "ruff":
        try:
            for p in json.loads(done.stdout)[:20]:
                loc = p.get("location") or {}
                print(f"ruff: {p.get('filename')}:{loc.get('row')}:{loc.get('column')}: "
                      f"{p.get('code')} {p.get('message')}", file=sys.stderr)
        except (json.JSONDecodeError, TypeError, AttributeError):
            print(done.stdout[-3000:] + done.stderr[-3000:], file=sys.stderr)
    else:
        print((done.stdout + done.stderr)[-4000:], file=sys.stderr)


def _explain_clock(verdict: Verdict) -> None:
    if verdict.metrics.get("slowest"):
        print(f"pytest: {verdict.metrics.get('pytest_seconds')} s against the fast tier's "
              f"{verdict.metrics.get('fast_budget_seconds'):g} s budget; slowest tests (move what trains "
              "or imports torch to the e2e tier, tests/tiers.py):", file=sys.stderr)
        for line in verdict.metrics["slowest"]:
            print(f"  {line}", file=sys.stderr)


def verify(root: Path) -> Verdict:
    start = time.monotonic()
    ruff, ruff_done = _run_ruff(root)
    _explain("ruff", ruff, ruff_done)
    left = max(5.0, DEADLINE_S - (time.monotonic() - start))
    tests, tests_done = _run_pytest(root, left)
    _explain("pytest", tests, tests_done)
    _explain_clock(tests)
    metrics = {**ruff.metrics, **tests.metrics, "seconds": round(time.monotonic() - start, 2)}
    return Verdict.combine({"ruff": ruff, "pytest": tests}, metrics=metrics)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Lint and fast tests, answered as one verdict.")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository to verify")
    args = parser.parse_args(argv)
    try:
        verdict = verify(args.root.resolve())
    except Exception as exc:  # a crash of the verifier itself is an error, never a pass
        verdict = Verdict.errored(f"verify: crashed ({exc.__class__.__name__}: {exc})")
    sys.stderr.flush()
    print(json.dumps(verdict.to_json_dict(), separators=(",", ":")), flush=True)
    return EXIT_FOR_STATUS[verdict.status.value]


if __name__ == "__main__":
    sys.exit(main())
