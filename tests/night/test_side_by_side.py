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
from looper.night.slots import NotStarted, Slot, Slots, current_slot, side_by_side

CORES = sorted(os.sched_getaffinity(0))


def _ctx(jobs: int, prestart: str = "off") -> SimpleNamespace:
    """side_by_side reads ``ctx.cfg`` ([loop] seed_jobs, prestart) and ``ctx.night.cancel``: a real Config and
    a real Event under plain holders."""
    return SimpleNamespace(cfg=config_from_dict({"loop": {"seed_jobs": jobs, "prestart": prestart}}),
                           night=SimpleNamespace(cancel=threading.Event()))


class Runs:
    """Calls shaped as measure() is with a training slot: wait for the slot (a prestarted box would be up),
    train holding it, give it back, then evaluate; each phase counted as it happens."""

    def __init__(self, train_s: float = 0.05, eval_s: float = 0.05) -> None:
        self.lock = threading.Lock()
        self.training = self.busy = self.most_training = self.most_busy = 0
        self.order: list[int] = []
        self.train_s, self.eval_s = train_s, eval_s

    def _count(self, training: int, busy: int) -> None:
        with self.lock:
            self.training += training
            self.busy += busy
            self.most_training = max(self.most_training, self.training)
            self.most_busy = max(self.most_busy, self.busy)

    def call(self, i: int, fails: bool = False, train_s: float | None = None, until_stopped: bool = False):
        """``until_stopped``: train until the look is stopped (a run before this one was not ok), not for a time."""
        def run() -> int:
            slot = current_slot()
            assert slot is not None  # side by side: every call measures in a slot
            if not slot.take():
                raise NotStarted(str(i))
            with self.lock:
                self.order.append(i)
            self._count(1, 1)
            if until_stopped:
                deadline = time.monotonic() + 5
                while not slot.stopped() and time.monotonic() < deadline:
                    time.sleep(0.005)
                assert slot.stopped(), f"run {i}: the look was never stopped"
            else:
                time.sleep(self.train_s if train_s is None else train_s)
            self._count(-1, 0)
            if not fails:  # trained cleanly: the next run trains while this one is evaluated; a failure keeps
                slot.give_back()  # its slot until it is judged (side_by_side gives it back after the stop)
            time.sleep(self.eval_s)
            self._count(0, -1)
            return -1 if fails else i
        return run


@pytest.mark.parametrize("prestart", ["off", "on"])
def test_at_most_seed_jobs_runs_train_at_once_and_with_prestart_evaluation_overlaps_the_next_training(prestart):
    runs = Runs()
    got = side_by_side(_ctx(2, prestart), [runs.call(i) for i in range(8)], ok=lambda r: r >= 0)
    assert got == list(range(8))
    assert runs.most_training == 2  # never more than seed_jobs in training, prestarted or not
    assert runs.order == list(range(8))  # slots are given in the calls' order
    if prestart == "off":
        assert runs.most_busy == 2  # a run holds its thread through its evaluation: nothing overlaps
    else:
        assert runs.most_busy >= 3  # a run evaluated while the next two train


def test_a_prestarted_run_still_waiting_when_one_before_it_fails_never_starts_and_is_not_kept():
    runs = Runs(train_s=0.5, eval_s=0.0)
    kept: list[int] = []
    calls = [runs.call(0, fails=True, train_s=0.05), runs.call(1, until_stopped=True),  # 0 fails while 1 trains
             *(runs.call(i) for i in range(2, 6))]
    got = side_by_side(_ctx(2, "on"), calls, ok=lambda r: r >= 0, keep=kept.append)
    assert got == [-1]  # up to and including the one that failed
    assert runs.order == [0, 1]  # 1 trained beside 0; 2 and 3 waited in their boxes and were told nothing
    assert kept == [-1, 1]


def test_a_stopped_night_gives_no_slot_to_a_waiting_run():
    ctx = _ctx(1, "on")
    slots = Slots(1)
    first = Slot(slots, 0, ctx.night.cancel.is_set)
    assert first.take() and first.take()  # taken once; asked again, still its own
    waiting = Slot(slots, 1, ctx.night.cancel.is_set)
    threading.Timer(0.1, ctx.night.cancel.set).start()
    t0 = time.monotonic()
    assert not waiting.take() and waiting.taken_at is None  # it waited for the stop (seen within 0.25 s)
    assert 0.09 < time.monotonic() - t0 < 3
    first.give_back()
    first.give_back()  # given back once: a second time changes nothing
    assert Slot(slots, 2, lambda: False).take()
    assert not Slot(slots, 3, lambda: True).take()  # one slot, already taken, and the night stopped


def test_prestart_is_a_choice_of_on_off_or_auto_named_when_wrong():
    assert config_from_dict({}).loop.prestart == "auto"
    with pytest.raises(ConfigError, match="loop.prestart"):
        config_from_dict({"loop": {"prestart": "yes"}})


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
    barrier = threading.Barrier(2, timeout=0.1)  # the second call starts only after the first has returned
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
    assert run_threads(config_from_dict({"loop": {"seed_jobs": 1, "workers": 1}})) == 0  # one at a time: unset
    assert run_threads(config_from_dict({"loop": {"seed_jobs": 2, "workers": 1}})) == len(CORES) // 2
    # two workers' runs train at once here too (each on every core, they took 2.7 x as long each)
    assert run_threads(config_from_dict({"loop": {"seed_jobs": 1, "workers": 2}})) == len(CORES) // 2
    remote = {"kind": "ssh", "host": "gpu-box", "remote_dir": "looper"}  # the host's cores: not this machine's
    assert run_threads(config_from_dict({"loop": {"workers": 2}, "executor": remote})) == 0
    too_many = len(CORES) + 1
    cfg = config_from_dict({"loop": {"seed_jobs": too_many, "workers": 1}})
    with pytest.raises(HarnessError, match=f"loop.seed_jobs {too_many} x loop.workers 1: {too_many} runs side by "
                                           f"side need a core each, but this process may use {len(CORES)}"):
        run_threads(cfg)


def test_seed_jobs_is_refused_on_slurm_naming_the_key():
    with pytest.raises(ConfigError, match='loop.seed_jobs: runs seeds side by side on one machine.s cores: only with '
                                          'executor.kind = "local" or "ssh" \\(got "slurm", seed_jobs 2: each SLURM '
                                          'job is an allocation of its own'):
        config_from_dict({"loop": {"seed_jobs": 2}, "executor": {"kind": "slurm"}})
    remote = config_from_dict({"loop": {"seed_jobs": 2, "workers": 2}, "executor": {"kind": "ssh", "host": "gpu1"}})
    assert remote.loop.seed_jobs == 2  # an ssh host's GPU takes a look's seeds side by side
    from looper.executors.limits import sharing

    assert sharing(remote) == 4 and run_threads(remote) == 0  # the host shares its own memory and cores by 4
    assert config_from_dict({}).loop.seed_jobs == 1
    with pytest.raises(ConfigError, match=r"loop.seed_jobs: must be >= 1 \(got 0\)"):
        config_from_dict({"loop": {"seed_jobs": 0}})
