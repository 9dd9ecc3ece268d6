"""One GPU's trainings (looper.night.gpushare): shares counted, the GPU held whole only once no training holds a
share, and a run asking for it whole goes before shares asked for after it."""

from __future__ import annotations

import threading
import time

from looper.night.gpushare import GpuShare


def never() -> bool:
    return False


def test_shares_count_the_runs_that_trained_beside_each_other():
    gpu = GpuShare()
    a = gpu.share(never)
    b = gpu.share(never)
    gpu.leave(a)
    c = gpu.share(never)
    assert (a.peers, b.peers, c.peers) == (2, 2, 2)
    gpu.leave(b)
    gpu.leave(c)
    assert gpu.share(never).peers == 1  # alone now


def test_the_whole_gpu_waits_for_the_trainings_on_it_and_goes_before_shares_asked_for_after_it():
    gpu, order = GpuShare(), []
    first = gpu.share(never)
    asked = threading.Event()

    def whole() -> None:
        asked.set()
        h = gpu.whole(never)
        order.append("whole")
        time.sleep(0.2)
        order.append("whole ends")
        gpu.leave(h)

    def later() -> None:
        h = gpu.share(never)
        order.append("later share")
        gpu.leave(h)

    t1 = threading.Thread(target=whole)
    t1.start()
    asked.wait()
    time.sleep(0.3)  # the whole is waiting for the first share
    t2 = threading.Thread(target=later)
    t2.start()
    time.sleep(0.3)
    assert order == []  # neither the whole (a share is held) nor a share asked for after it
    order.append("first ends")
    gpu.leave(first)
    t1.join(5)
    t2.join(5)
    assert order == ["first ends", "whole", "whole ends", "later share"]


def test_a_stopped_night_waits_for_nothing():
    gpu = GpuShare()
    gpu.share(never)
    started = time.monotonic()
    h = gpu.whole(lambda: True)
    assert h.whole and time.monotonic() - started < 1


def test_take_is_a_share_or_the_whole():
    gpu = GpuShare()
    a = gpu.take(False, never)
    assert not a.whole
    gpu.leave(a)
    b = gpu.take(True, never)
    assert b.whole
    gpu.leave(b)
