"""Runs side by side ([loop] seed_jobs, issue 25): a child started under ``proc.pinned`` keeps to its cores
and the starting thread gets its own back; ``measure.side_by_side`` runs calls at once, in order, and
stops starting new ones after a result that is not ok; the night's slots come from the config."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from looper import proc
from looper.config import config_from_dict
from looper.context import cpu_slots
from looper.errors import ConfigError, HarnessError
from looper.measure import side_by_side

CORES = sorted(os.sched_getaffinity(0))
SHOW = "import os; print(sorted(os.sched_getaffinity(0)))"


def _affinity_of_child(tmp_path: Path, name: str, cpus: tuple[int, ...]) -> str:
    s = proc.supervise([sys.executable, "-c", SHOW], cwd=tmp_path, env={},
                       log_path=tmp_path / f"{name}.log", limits=proc.Limits(budget_seconds=30, stall_seconds=30),
                       cpus=cpus)
    assert s.exit_code == 0, s.log_tail
    return s.log_tail.strip()


def test_a_child_started_pinned_sees_only_its_cores_and_the_thread_gets_its_own_back(tmp_path):
    before = os.sched_getaffinity(0)
    last = (CORES[-1],)
    assert _affinity_of_child(tmp_path, "one", last) == f"[{last[0]}]"
    assert os.sched_getaffinity(0) == before  # the daemon's thread is not left on one core
    assert _affinity_of_child(tmp_path, "all", ()) == f"{CORES}"  # nothing given: the daemon's own


@pytest.mark.skipif(len(CORES) < 2, reason="needs two cores: each thread pins its child to another")
def test_two_threads_pin_their_children_to_different_cores_at_the_same_time(tmp_path):
    got: dict[int, str] = {}
    barrier = threading.Barrier(2, timeout=10)

    def start(core: int) -> None:
        barrier.wait()  # both threads hold their own mask while both children start
        got[core] = _affinity_of_child(tmp_path, f"c{core}", (core,))

    threads = [threading.Thread(target=start, args=(c,)) for c in CORES[:2]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert got == {c: f"[{c}]" for c in CORES[:2]}


def _ctx(jobs: int) -> SimpleNamespace:
    """side_by_side reads only ``ctx.cfg.loop.seed_jobs``: a real Config under a plain holder."""
    return SimpleNamespace(cfg=config_from_dict({"loop": {"seed_jobs": jobs}}))


def test_side_by_side_runs_up_to_seed_jobs_calls_at_once_and_keeps_their_order():
    barrier = threading.Barrier(2, timeout=5)  # passes only when two calls run at the same time

    def call(i: int):
        def run() -> int:
            if i < 2:
                barrier.wait()
            time.sleep(0.05 * (3 - i))  # later calls finish first: the order is the calls', not the clock's
            return i
        return run

    kept: list[int] = []
    assert side_by_side(_ctx(2), [call(i) for i in range(4)], ok=lambda r: True, keep=kept.append) == [0, 1, 2, 3]
    assert kept == [0, 1, 2, 3]  # recorded in the calls' order, though 1 finished before 0
    barrier = threading.Barrier(2, timeout=0.5)
    with pytest.raises(threading.BrokenBarrierError):  # one job: the first call waits alone, and times out
        side_by_side(_ctx(1), [call(0), call(1)], ok=lambda r: True)


@pytest.mark.parametrize("jobs", [1, 2])
def test_side_by_side_starts_nothing_after_a_result_that_is_not_ok(jobs):
    started: list[int] = []
    lock = threading.Lock()

    one_started = threading.Event()

    def call(i: int):
        def run() -> int:
            with lock:
                started.append(i)
            if i == 1:
                one_started.set()
                time.sleep(0.1)
            elif i == 0 and jobs == 2:
                assert one_started.wait(5)  # call 0 fails only once call 1 runs beside it
            return i
        return run

    kept: list[int] = []
    got = side_by_side(_ctx(jobs), [call(i) for i in range(6)], ok=lambda r: r != 0, keep=kept.append)
    assert got == [0]  # up to and including the first that is not ok
    if jobs == 1:
        assert started == kept == [0]  # nothing after it ran
    else:  # call 1 ran beside call 0 when 0 failed: it finishes and is kept, not returned; the threads
        assert sorted(started) == kept == [0, 1]  # found the stop before call 2


def test_side_by_side_raises_what_a_call_raised():
    def bad() -> int:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        side_by_side(_ctx(2), [lambda: 1, bad], ok=lambda r: True)


def test_the_night_s_slots_split_this_process_s_cores_by_seed_jobs_times_workers():
    cfg = config_from_dict({"loop": {"seed_jobs": 1, "workers": 1}})
    assert cpu_slots(cfg) == [tuple(CORES)]
    too_many = len(CORES) + 1
    cfg = config_from_dict({"loop": {"seed_jobs": too_many, "workers": 1}})
    with pytest.raises(HarnessError, match=f"loop.seed_jobs {too_many} x loop.workers 1: {too_many} runs side by "
                                           f"side need a core each, but this process may use {len(CORES)}"):
        cpu_slots(cfg)


def test_seed_jobs_is_refused_off_the_local_executor_naming_the_key():
    with pytest.raises(ConfigError, match='loop.seed_jobs: runs seeds side by side on this machine.s cores: only with '
                                          'executor.kind = "local" \\(got "ssh", seed_jobs 2\\)'):
        config_from_dict({"loop": {"seed_jobs": 2}, "executor": {"kind": "ssh", "host": "gpu1"}})
    assert config_from_dict({}).loop.seed_jobs == 1
    with pytest.raises(ConfigError, match=r"loop.seed_jobs: must be >= 1 \(got 0\)"):
        config_from_dict({"loop": {"seed_jobs": 0}})
