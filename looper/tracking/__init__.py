"""Tracking: the night also written where people keep their other runs (MLflow, ``[tracking]``).

Tracking never decides anything. :func:`on_settled` is the one call the experiment loop makes, after
an experiment's outcome is recorded: the write runs in a thread the loop waits for at most ``[tracking]
timeout_seconds``; a server that is down, slow or refusing is one journal note (a warning) and the
experiment stays queued for the next settle; never a halt. :func:`export_database` writes a whole
database after the fact (``looper export --mlflow``), idempotently.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from looper.core.verdicts.verdict import Outcome


class Sink(Protocol):
    """Where experiments are written (MLflow's client behind :class:`looper.tracking.mlflow_sink.MlflowSink`)."""

    def write(self, store: Any, exp_id: int) -> bool: ...


@dataclass(frozen=True)
class Synced:
    created: int
    unchanged: int


class Tracker:
    """Writes settled experiments to a sink in a background thread, waiting at most ``timeout`` s."""

    def __init__(self, make_sink: Any, timeout: float) -> None:
        self.make_sink = make_sink  # built in the thread: importing MLflow is slow, a bad URI raises there
        self.timeout = timeout
        self.sink: Sink | None = None
        self.pending: list[int] = []
        self.error: str | None = None
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def warm(self) -> None:
        """Open the sink in the background now (importing MLflow and creating its database take seconds)."""
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._drain, args=(None,), name="looper-tracking", daemon=True)
                self.thread.start()

    def settled(self, store: Any, exp_id: int) -> str | None:
        """Queue ``exp_id`` and write the queue; a warning (None: written) within about ``timeout`` s."""
        deadline = time.monotonic() + self.timeout
        with self.lock:
            self.pending.append(exp_id)
        if self.thread is not None and self.thread.is_alive():  # a write still under way: wait for it (bounded)
            self.thread.join(self.timeout)
            if self.thread.is_alive():
                return f"the previous write is still running; #{exp_id} is queued ({len(self.pending)} waiting)"
        self.thread = threading.Thread(target=self._drain, args=(store,), name="looper-tracking", daemon=True)
        self.thread.start()
        self.thread.join(max(0.1, deadline - time.monotonic()))
        with self.lock:
            if self.thread.is_alive():
                return (f"no answer within {self.timeout:g} s; {len(self.pending)} experiment(s) queued for the "
                        "next settle")
            if self.error:
                return f"{self.error}; {len(self.pending)} experiment(s) queued for the next settle"
        return None

    def _drain(self, store: Any) -> None:
        with self.lock:
            self.error = None
        try:
            if self.sink is None:
                self.sink = self.make_sink()
            while store is not None:
                with self.lock:
                    if not self.pending:
                        return
                    exp_id = self.pending[0]
                self.sink.write(store, exp_id)
                with self.lock:
                    self.pending.remove(exp_id)
        except Exception as exc:  # noqa: BLE001 - tracking never halts the night: a warning, a retry later
            with self.lock:
                self.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"


_TRACKERS: dict[tuple[str, str], Tracker] = {}


def warm(cfg: Any, root: Path) -> None:
    """At the daemon's start: open the tracking sink in the background (never raises)."""
    try:
        tracker = tracker_for(cfg, root)
        if tracker is not None:
            tracker.warm()
    except Exception:  # noqa: BLE001 - tracking never stops the night; the first settle will say what is wrong
        pass


def tracker_for(cfg: Any, root: Path) -> Tracker | None:
    """The daemon's tracker of ``[tracking]`` (None: off)."""
    t = getattr(cfg, "tracking", None)
    if t is None or not t.mlflow_uri:
        return None
    key = (str(root), t.mlflow_uri)
    if key not in _TRACKERS:
        def make() -> Sink:
            from looper.tracking.mlflow_sink import MlflowSink

            return MlflowSink(t.mlflow_uri, root, t.mlflow_experiment, t.timeout_seconds)

        _TRACKERS[key] = Tracker(make, float(t.timeout_seconds))
    return _TRACKERS[key]


def on_settled(ctx: Any, exp_id: int | None) -> None:
    """The loop's hook: write the settled experiment; a problem is a journal note, never more."""
    if exp_id is None:
        return
    try:
        tracker = tracker_for(ctx.cfg, ctx.root)
        if tracker is None:
            return
        started = time.monotonic()
        best = ctx.store.best(ctx.tag.name)  # the best may have gained runs since it settled (seeds a candidate needed)
        if best is not None and best.id != exp_id:
            with tracker.lock:
                if best.id not in tracker.pending:
                    tracker.pending.append(best.id)
        warning = tracker.settled(ctx.store, exp_id)
        if warning:
            ctx.journal.event("note", f"tracking: MLflow at {ctx.cfg.tracking.mlflow_uri}: {warning} (tracking decides "
                              "nothing; the night goes on)", exp_id,
                      {"tracking": "mlflow", "seconds": round(time.monotonic() - started, 3)})
    except Exception as exc:  # noqa: BLE001 - never a halt
        try:
            ctx.journal.event("note", f"tracking failed: {type(exc).__name__}: {exc}", exp_id, {"tracking": "mlflow"})
        except Exception:  # noqa: BLE001
            pass


def export_database(store: Any, uri: str, root: Path, experiment_name: str = "",
                    timeout: float = 30.0) -> Synced:
    """Every settled experiment of ``store`` to MLflow at ``uri``; those already there are left alone."""
    from looper.tracking.mlflow_sink import MlflowSink

    sink = MlflowSink(uri, root, experiment_name, timeout)
    created = unchanged = 0
    for exp in store.find_experiments():
        if exp.status in (Outcome.RUNNING,) or not exp.status.is_terminal:
            continue
        if sink.write(store, exp.id):
            created += 1
        else:
            unchanged += 1
    return Synced(created, unchanged)
