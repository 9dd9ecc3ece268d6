"""Runs side by side ([loop] seed_jobs, issue 25): ``measure.side_by_side`` runs calls at once, records
them in order, and starts no new one after a result that is not ok; each run's threads are its share of
the cores; the key is refused off the local executor."""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

import pytest

from looper.config import config_from_dict
from looper.errors import ConfigError, HarnessError
from looper.night.cores import run_threads
from looper.night.measure import side_by_side

CORES = sorted(os.sched_getaffinity(0))


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


def test_each_run_s_threads_are_its_share_of_this_process_s_cores_by_seed_jobs_times_workers():
    assert run_threads(config_from_dict({"loop": {"seed_jobs": 1, "workers": 2}})) == 0  # one at a time: unset
    assert run_threads(config_from_dict({"loop": {"seed_jobs": 2, "workers": 1}})) == len(CORES) // 2
    too_many = len(CORES) + 1
    cfg = config_from_dict({"loop": {"seed_jobs": too_many, "workers": 1}})
    with pytest.raises(HarnessError, match=f"loop.seed_jobs {too_many} x loop.workers 1: {too_many} runs side by "
                                           f"side need a core each, but this process may use {len(CORES)}"):
        run_threads(cfg)


def test_seed_jobs_is_refused_off_the_local_executor_naming_the_key():
    with pytest.raises(ConfigError, match='loop.seed_jobs: runs seeds side by side on this machine.s cores: only with '
                                          'executor.kind = "local" \\(got "ssh", seed_jobs 2\\)'):
        config_from_dict({"loop": {"seed_jobs": 2}, "executor": {"kind": "ssh", "host": "gpu1"}})
    assert config_from_dict({}).loop.seed_jobs == 1
    with pytest.raises(ConfigError, match=r"loop.seed_jobs: must be >= 1 \(got 0\)"):
        config_from_dict({"loop": {"seed_jobs": 0}})
