"""Runs sharing one GPU's memory, trainings and evaluations (issue 46: sharing may change a run's time, never its result).

On a GPU the runs of a night train side by side (``[loop] seed_jobs`` x ``workers``) with no memory limit of their
own: a run that would fit the GPU alone can run out of its memory beside the others (a candidate that doubles its
batch, on a GPU sized for the runs before it). Each run trains, and is evaluated, holding a share of its GPU (:meth:`GpuShare.share`),
which counts the runs it trained beside; one that ran out of memory beside others trains again holding the GPU
whole (:meth:`GpuShare.whole`: no other training starts on it until it ends, those training finish first), so that
its verdict is the change's, not its neighbours' (looper.core.run.slots.after_failure). A run's CPU memory is its own
share (``[limits]``), so a run on the CPU is not rerun."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Hold:
    """One run's hold on its GPU: ``peers``, the most runs that trained on it at once while it held it (itself
    included); ``whole``: it held the GPU alone."""

    whole: bool = False
    peers: int = 1


class GpuShare:
    """The trainings on one GPU: any number share it, or one holds it whole. A run asking for it whole waits for the
    trainings on it to end and goes before any that asks after it (none waits behind a stream of shares)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shares: list[Hold] = []
        self._whole = False
        self._wanted = 0

    def share(self, stopped: Callable[[], bool]) -> Hold:
        """A share of the GPU, once no run holds it whole or waits to (``stopped()``: at once, the night ends)."""
        with self._cond:
            while (self._whole or self._wanted) and not stopped():
                self._cond.wait(timeout=0.25)
            hold = Hold()
            self._shares.append(hold)
            for h in self._shares:
                h.peers = max(h.peers, len(self._shares))
            return hold

    def whole(self, stopped: Callable[[], bool]) -> Hold:
        """The GPU whole, once no training holds a share of it or it whole (``stopped()``: at once)."""
        with self._cond:
            self._wanted += 1
            try:
                while (self._shares or self._whole) and not stopped():
                    self._cond.wait(timeout=0.25)
            finally:
                self._wanted -= 1
            self._whole = True
            return Hold(whole=True)

    def take(self, whole: bool, stopped: Callable[[], bool]) -> Hold:
        """The GPU whole (a run again alone) or a share of it."""
        return self.whole(stopped) if whole else self.share(stopped)

    def leave(self, hold: Hold) -> None:
        with self._cond:
            if hold.whole:
                self._whole = False
            elif hold in self._shares:
                self._shares.remove(hold)
            self._cond.notify_all()
