"""Runs side by side (``[loop] seed_jobs``) and their training slots (``[loop] prestart``, issue 46).

:func:`side_by_side` runs the seeds of one look at once, ``seed_jobs`` of them training at a time. A run
holds its slot while it trains, not while it is evaluated: with prestart on, ``seed_jobs`` more runs wait
beside the trainers, each in its own box already started (looper/executors/prestart.py), and the slot a
run frees when its training ends goes at once to the next run in the calls' order, while the run that
freed it is evaluated. A run whose training did not end cleanly keeps its slot until it is judged: a
failure stops the look before the next run takes it. With prestart off, a run takes its slot when it starts and the seeds run as one
call after another would, ``seed_jobs`` at a time.

Nothing is shared between runs: each has its own box and process; only the wait for a box is hidden.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from looper.core.run.slots import prestart
from looper.night.clock import now_iso

T = TypeVar("T")


class NotStarted(Exception):
    """A run whose slot was never given (a run before it was not ok): it never ran and is not recorded."""


class Slots:
    """``n`` training slots, each given to the lowest-numbered call waiting for one (the calls' order)."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._waiting: set[int] = set()
        self._cond = threading.Condition()

    def take(self, index: int, stopped: Callable[[], bool]) -> bool:
        """Block until a slot is call ``index``'s (True) or ``stopped()`` says it never will be (False)."""
        with self._cond:
            self._waiting.add(index)
            try:
                while not stopped():
                    if self._free > 0 and min(self._waiting) == index:
                        self._free -= 1
                        return True
                    self._cond.wait(timeout=0.25)  # a stop is seen within this, a freed slot at once
                return False
            finally:
                self._waiting.discard(index)
                self._cond.notify_all()

    def give(self) -> None:
        with self._cond:
            self._free += 1
            self._cond.notify_all()


class Slot:
    """One call's claim on a training slot: taken once (:meth:`take`), given back once (:meth:`give_back`,
    again a no-op), with the harness's clock when it was taken (the run's start: its wait is not its own)."""

    def __init__(self, slots: Slots, index: int, stopped: Callable[[], bool]) -> None:
        self.slots, self.index, self.stopped = slots, index, stopped
        self.held = False
        self.taken_at: str | None = None

    def take(self) -> bool:
        if self.held:
            return True
        self.held = self.slots.take(self.index, self.stopped)
        self.taken_at = now_iso() if self.held else None
        return self.held

    def give_back(self) -> None:
        if self.held:
            self.held = False
            self.slots.give()


_SLOT: contextvars.ContextVar[Slot | None] = contextvars.ContextVar("looper_slot", default=None)


def current_slot() -> Slot | None:
    """The training slot of the run this thread measures (:func:`side_by_side`); None: one run at a time."""
    return _SLOT.get()


def side_by_side(ctx: Any, calls: Sequence[Callable[[], T]], ok: Callable[[T], bool],
                 keep: Callable[[T], None] = lambda r: None, jobs: int | None = None) -> list[T]:
    """Run ``calls`` (each a :func:`looper.night.measure.measure`) up to ``jobs`` (``[loop] seed_jobs``) training at a time
    and hand each result to ``keep`` (recording it) in the calls' order, whatever order they finish in, so the
    store holds a night's runs in seed order at any ``seed_jobs``. Returns the results up to and including the
    first that is not ``ok``: after it no further call starts, as one after another would have stopped there (a
    call already running beside it finishes and is kept, on record but not returned; a prestarted one still
    waiting for its slot is ended unrecorded, :class:`NotStarted`). One job: one after another, in this thread."""
    out: list[T] = []
    jobs = min(jobs or ctx.cfg.loop.seed_jobs, len(calls))
    if jobs <= 1:
        for call in calls:
            out.append(call())
            keep(out[-1])
            if not ok(out[-1]):
                break
        return out
    stop = threading.Event()
    cancel = ctx.night.cancel
    slots = Slots(jobs)
    ahead = min(jobs, len(calls) - jobs) if prestart(ctx.cfg.loop.prestart, ctx.cfg.executor.require_gpu) else 0  # boxes started beside the trainers

    def one(index: int, call: Callable[[], T]) -> tuple[bool, T | None]:
        if stop.is_set():
            return False, None  # never started: a call before it was not ok
        slot = Slot(slots, index, lambda: stop.is_set() or cancel.is_set())
        token = _SLOT.set(slot)
        try:
            r = call()
        except NotStarted:
            return False, None
        else:
            if not ok(r):
                stop.set()  # before its slot is given back: no run waiting for it starts
            return True, r
        finally:
            slot.give_back()
            _SLOT.reset(token)

    with ThreadPoolExecutor(max_workers=jobs + ahead, thread_name_prefix="looper-seed") as pool:
        futures = [pool.submit(one, i, call) for i, call in enumerate(calls)]
        done = False
        for f in futures:
            ran, r = f.result()  # in the calls' order; a call that raised raises here
            if not ran:
                continue
            keep(r)  # type: ignore[arg-type]
            if not done:
                out.append(r)  # type: ignore[arg-type]
                done = not ok(r)  # type: ignore[arg-type]
    return out
