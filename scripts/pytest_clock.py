"""pytest plugin: the fast tier's clock (issue 26).

The fast tier (``python -m pytest -q -m "not e2e"``: ``make test-fast``, ``make verify-json``)
has a budget of :data:`FAST_BUDGET_S` seconds on an idle 2-core machine. This plugin keeps it
visible:

- every run ends with one line: how long collection and the tests took, and for the fast tier
  its budget; a fast tier over its budget also prints its slowest tests (what to move to the
  end-to-end tier, see tests/tiers.py);
- with ``LOOPER_TEST_TIMES=<file>`` it writes one JSON line per event as it happens (flushed at
  once), so a run killed at a deadline still leaves the tests that finished and the one that was
  running: ``{"event": "collected", "tests": n, "at": s}``, ``{"event": "start", "test": id,
  "at": s}``, ``{"event": "done", "test": id, "seconds": d, "at": s}``, ``{"event": "finished",
  "at": s}`` (``at``: seconds since the session started; ``seconds``: setup + call + teardown).

tests/conftest.py registers it for every run; scripts/verify_json.py loads it with
``-p pytest_clock`` (it verifies any checkout, one without that conftest too) and reads the
file with :func:`summarise`. Under pytest-xdist (the fast tier runs on :data:`FAST_WORKERS`) the
controller's clock hears every worker's tests. The pure part (:func:`summarise`,
:func:`slowest`, :func:`clock_line`) is tested in tests/core/test_core_verify_json.py.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

FAST_BUDGET_S = 30.0  # the fast tier on an idle 2-core machine (verify_json's hard deadline is 47 s)
FAST_MARKEXPR = "not e2e"
FAST_WORKERS = 2  # pytest-xdist workers of the fast tier (make test-fast, make verify-json): the budget's two cores
TIMES_ENV = "LOOPER_TEST_TIMES"
SHOW_SLOWEST = 10


# -- pure: the events file and what it says ---------------------------------------------------


@dataclass
class Clock:
    """What a (possibly killed) run's events say."""

    collect_s: float | None = None  # session start -> collection finished
    collected: int | None = None
    durations: dict[str, float] = field(default_factory=dict)  # test id -> setup + call + teardown
    running: str | None = None  # started, never done: the test(s) running when the run stopped
    last_at: float = 0.0  # the last moment the file speaks of
    finished_at: float | None = None  # None: the run never reached its end


def summarise(text: str) -> Clock:
    """The clock from an events file; a torn last line (the writer killed mid-line) is ignored."""
    clock = Clock()
    started: dict[str, None] = {}  # started, not done, in order
    for line in text.splitlines():
        try:
            ev: Any = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(ev, dict):
            continue
        kind, at = ev.get("event"), ev.get("at")
        if isinstance(at, (int, float)):
            clock.last_at = max(clock.last_at, float(at))
        if kind == "collected":
            clock.collect_s = float(at) if isinstance(at, (int, float)) else None
            clock.collected = ev.get("tests") if isinstance(ev.get("tests"), int) else None
        elif kind == "start" and isinstance(ev.get("test"), str):
            started[ev["test"]] = None
        elif kind == "done" and isinstance(ev.get("test"), str) and isinstance(ev.get("seconds"), (int, float)):
            clock.durations[ev["test"]] = float(ev["seconds"])
            started.pop(ev["test"], None)
        elif kind == "finished":
            clock.finished_at = float(at) if isinstance(at, (int, float)) else clock.last_at
            started.clear()
    clock.running = ", ".join(started) or None  # under pytest-xdist, one a worker
    return clock


def slowest(durations: dict[str, float], n: int = SHOW_SLOWEST) -> list[str]:
    """The ``n`` slowest tests as ``"1.23 s tests/x.py::test_y"``, slowest first (ties by name)."""
    ranked = sorted(durations.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return [f"{seconds:.2f} s {test}" for test, seconds in ranked]


def total_s(clock: Clock) -> float:
    """The run's length as far as the file knows (to its end, or to its last event if killed)."""
    return clock.finished_at if clock.finished_at is not None else clock.last_at


def over_budget(clock: Clock, budget_s: float = FAST_BUDGET_S) -> bool:
    return total_s(clock) > budget_s


def is_fast_tier(markexpr: str, covered: bool, paths: list[str], rootdir: str) -> bool:
    """Whether a run is the fast tier its budget is for: every ``not e2e`` test (no narrower path than the
    tests folder) and no coverage tracing. ``make test``'s first step (tests/core alone, under coverage, in one
    process) selects with the same marker but is not the tier: its clock line states its length without the
    budget, where it had read "fast tier: ... OVER its 30 s budget" on every CI run."""
    root = rootdir.rstrip("/")
    whole = all(p.rstrip("/") in (root, f"{root}/tests", "tests", ".") for p in paths)
    return " ".join(markexpr.split()) == FAST_MARKEXPR and not covered and whole


def clock_line(clock: Clock, fast: bool, budget_s: float = FAST_BUDGET_S) -> str:
    """The one line a run ends with: its phases and, for the fast tier, its budget."""
    total = total_s(clock)
    collect = clock.collect_s if clock.collect_s is not None else 0.0
    tests = sum(clock.durations.values())
    what = "fast tier" if fast else "this run"
    line = (f"{what}: {total:.1f} s (collection {collect:.1f} s, {len(clock.durations)} tests "
            f"{tests:.1f} s)")
    if not fast:
        return line
    if over_budget(clock, budget_s):
        return f"{line}: OVER its {budget_s:g} s budget; slowest tests below (move what trains or imports torch to e2e)"
    return f"{line}, within its {budget_s:g} s budget"


# -- the plugin --------------------------------------------------------------------------------

PLUGIN_NAME = "looper_clock"


class ClockPlugin:
    """One run's clock (an instance per run, so a pytest run inside a test keeps its own)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.events: list[str] = []
        self.out: Any = None
        self.partial: dict[str, float] = {}
        self.collected = False  # "collected" said (on xdist's controller, by the first worker to collect)

    def emit(self, **ev: Any) -> None:
        ev["at"] = round(time.monotonic() - self.t0, 4)
        line = json.dumps(ev)
        self.events.append(line)
        if self.out is not None:
            self.out.write(line + "\n")
            self.out.flush()

    def pytest_sessionstart(self, session: Any) -> None:
        self.t0 = time.monotonic()
        path = os.environ.get(TIMES_ENV)
        self.out = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115 - open for the session

    def pytest_collection_finish(self, session: Any) -> None:
        self.collected = True
        self.emit(event="collected", tests=len(session.items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """On pytest-xdist's controller (no collection of its own): when the first worker has collected."""
        if not self.collected:
            self.collected = True
            self.emit(event="collected", tests=len(ids))

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.partial[nodeid] = 0.0
        self.emit(event="start", test=nodeid)

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.partial[report.nodeid] = self.partial.get(report.nodeid, 0.0) + float(report.duration)
        if report.when == "teardown":
            self.emit(event="done", test=report.nodeid, seconds=round(self.partial.pop(report.nodeid), 4))

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: Any) -> None:
        self.emit(event="finished")
        clock = summarise("\n".join(self.events))
        fast = is_fast_tier(str(config.option.markexpr or ""), bool(getattr(config.option, "cov_source", None)),
                            [str(a) for a in config.args], str(config.rootpath))
        over = fast and over_budget(clock)
        terminalreporter.write_line(clock_line(clock, fast), yellow=over, bold=over)
        if over:
            for entry in slowest(clock.durations):
                terminalreporter.write_line(f"  {entry}", yellow=True)

    def pytest_unconfigure(self, config: Any) -> None:
        if self.out is not None:
            self.out.close()
            self.out = None


def register(config: Any) -> None:
    """Register one clock for this run unless it already has one; under pytest-xdist on the controller only,
    which hears every worker's tests (a worker's own clock would write the file twice over)."""
    if not hasattr(config, "workerinput") and not config.pluginmanager.has_plugin(PLUGIN_NAME):
        config.pluginmanager.register(ClockPlugin(), PLUGIN_NAME)


def pytest_configure(config: Any) -> None:  # when loaded as ``-p pytest_clock``
    register(config)
