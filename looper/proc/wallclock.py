"""Where the wall clock is enforced: :func:`supervise` runs training and evaluation in a process group of
their own, streams their output line by line to a capped log and a callback, and stops them from outside
at the budget, the log-silence (stall) limit, a ``Limits.check`` or a cancel: SIGTERM to the group, SIGKILL
``kill_after`` seconds later. Called as ``looper.proc.supervise`` (the one subprocess choke point)."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper.proc.runlog import CAPS, CappedLog, LineCutter, close_quietly
from looper.proc.trail import Completed, _kill_group, _merged_env, _trail_add, _trail_remove


@dataclass
class Supervised:
    """What happened to a supervised child (training or evaluation)."""

    exit_code: int | None  # the child's own exit status; None when a signal ended it
    signal: int | None  # the signal that ended it, if any
    timed_out: bool  # looper stopped it at budget + grace
    stalled: bool  # looper stopped it because the log was silent for stall_seconds
    seconds: float
    log_tail: str
    lines: int = 0
    stopped_by: str = ""  # "budget" | "stall" | "cancel" | "limit" | ""
    limit: str = ""  # stopped_by "limit": the words of Limits.check that stopped it
    log_error: str = ""  # writing the run's log failed (a full disk): the log is cut there, the run went on
    held_seconds: float = 0.0  # with a gate: how long the started child waited for it (not in ``seconds``)
    started: bool = True  # False: the gate was not given, the child was told nothing and ended


def emit_lines(lines: list[str], log: Any, tail: deque, on_line: Callable[[str], None] | None) -> None:
    """Each line to the run log, the tail and the live display; a display error never stops a run."""
    for line in lines:
        log.write(line + "\n")
        tail.append(line)
        if on_line:
            try:
                on_line(line)
            except Exception:
                pass
    log.flush()


@dataclass
class Limits:
    budget_seconds: float | None = None  # hard wall clock (budget + grace)
    stall_seconds: float | None = None  # log silence that means hung
    kill_after: float = 10.0  # SIGTERM -> SIGKILL delay
    tail_lines: int = 80
    log_max_bytes: int = field(default_factory=lambda: CAPS["log_max_bytes"])  # the log file on disk
    line_max_bytes: int = field(default_factory=lambda: CAPS["line_max_bytes"])  # one line, cut past it
    # Polled every ``check_every`` seconds while the child runs (a disk quota, looper.executors.limits): words
    # stop it (SIGTERM to its group, as the budget does), None lets it go on.
    check: Callable[[], str | None] | None = None
    check_every: float = 1.0


@dataclass
class _State:
    last_output: float = field(default_factory=time.monotonic)
    tail: deque = field(default_factory=lambda: deque(maxlen=80))
    lines: int = 0
    next_check: float = 0.0
    limit: str = ""


def _pump(proc: subprocess.Popen, state: _State, log: Any, on_line: Callable[[str], None] | None,
          line_max_bytes: int = 16 * 1024) -> None:
    """Read the child's output until it closes: the log, the tail, the line count, signs of life.
    Lines are cut to ``line_max_bytes`` as they arrive (no pattern ever sees a longer one)."""
    try:
        assert proc.stdout is not None
        # Read raw chunks: progress bars use '\r' without '\n' and still count as life.
        cutter = LineCutter(line_max_bytes)
        while True:
            chunk = proc.stdout.read1(65536) if hasattr(proc.stdout, "read1") else proc.stdout.read(4096)
            if not chunk:
                break
            state.last_output = time.monotonic()
            lines = cutter.feed(chunk)
            state.lines += len(lines)
            emit_lines(lines, log, state.tail, on_line)
        lines = cutter.feed(b"", final=True)
        state.lines += len(lines)
        emit_lines(lines, log, state.tail, on_line)
    except (ValueError, OSError):  # the log or pipe was closed under us: the run is over
        pass


def _check(limits: Limits, state: _State, now: float) -> bool:
    """Poll ``limits.check`` when it is due; True when it asked to stop the run (its words kept)."""
    if limits.check is None or now < state.next_check:
        return False
    state.next_check = now + limits.check_every
    state.limit = limits.check() or ""
    return bool(state.limit)


def _enforce(proc: subprocess.Popen, state: _State, limits: Limits, start: float,
             cancel: threading.Event | None) -> str:
    """Wait for the child, enforcing the budget, the stall limit, ``limits.check`` and a cancel from
    outside (SIGTERM to the group, SIGKILL ``kill_after`` later); what stopped it, "" when it ended itself."""
    stopped_by = ""
    term_at: float | None = None
    while proc.poll() is None:
        now = time.monotonic()
        if not stopped_by:
            if limits.budget_seconds is not None and now - start > limits.budget_seconds:
                stopped_by = "budget"
            elif limits.stall_seconds is not None and now - state.last_output > limits.stall_seconds:
                stopped_by = "stall"
            elif cancel is not None and cancel.is_set():
                stopped_by = "cancel"
            elif _check(limits, state, now):
                stopped_by = "limit"
            if stopped_by:
                _kill_group(proc, signal.SIGTERM)
                term_at = now
        elif term_at is not None and now - term_at > limits.kill_after:
            _kill_group(proc, signal.SIGKILL)
            term_at = None
        try:  # the next look in 0.1 s, or at once when the child ends (a fixed sleep cost each run up to 0.1 s
            proc.wait(timeout=0.1)  # after its end)
        except subprocess.TimeoutExpired:
            pass
    return stopped_by


def _finish_reading(proc: subprocess.Popen[bytes], reader: threading.Thread, log: CappedLog,
                    raw_log: Any) -> OSError | None:
    """The reader joined (its pipe closed when a grandchild outside the group still holds it), the log's
    tail written and the file closed; the error that writing the log met, if any."""
    reader.join(timeout=5)
    if reader.is_alive():  # a grandchild outside the group still holds the pipe: stop reading
        try:
            assert proc.stdout is not None
            proc.stdout.close()
        except (OSError, ValueError):
            pass
        reader.join(timeout=1)
    try:
        log.close_tail()
    except (ValueError, RuntimeError):  # a reader still alive: the head stays
        pass
    return log.error or close_quietly(raw_log)


def supervise(
    argv: Sequence[str],
    *,
    cwd: str | Path,
    env: Mapping[str, str] | None,
    log_path: str | Path,
    limits: Limits,
    on_line: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
    on_start: Callable[[int], None] | None = None,
    gate: Callable[[], bool] | None = None,
    launched: Launched | None = None,
    go: bytes = b"",
) -> Supervised:
    """Run a child in its own process group, stream its output, enforce limits from outside.

    ``gate`` (a prestarted run, :mod:`looper.executors.prestart`): the child is started at once with a pipe on
    its standard input, then ``gate()`` is waited for. True: :data:`~looper.executors.prestart.GO` is written,
    and the budget and stall clocks start then (``seconds`` counts from there, ``held_seconds`` the wait).
    False: the pipe is closed unwritten and the child is ended: ``started`` False, no run. ``launched``: a child
    :func:`launch` started earlier (held, a box that waited for its run), supervised from here on; ``go``: the
    line written for it (default :data:`GO`)."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    state = _State(tail=deque(maxlen=limits.tail_lines))
    start = time.monotonic()
    # Not ``with open``: closing flushes, and on a disk the run filled that raises (issue 39); the
    # failure is the run's evidence (Supervised.log_error), never an exception in the daemon.
    raw_log = open(log_path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115
    log = CappedLog(raw_log, limits.log_max_bytes)
    if launched is None:
        try:
            launched = launch(argv, cwd=cwd, env=env, hold=gate is not None)
        except BaseException:
            close_quietly(raw_log)
            raise
    proc, trail = launched.proc, launched.trail
    held, started = 0.0, True
    try:
        if on_start:
            on_start(proc.pid)
        reader = threading.Thread(target=_pump, args=(proc, state, log, on_line, limits.line_max_bytes), daemon=True)
        reader.start()
        if gate is not None:
            started = _hold(proc, gate, go)
            held, start = time.monotonic() - start, time.monotonic()
            state.last_output = start
        stopped_by = _enforce(proc, state, limits, start, cancel) if started else _not_started(proc)
    finally:
        # The leader is gone (or this thread was interrupted); make sure nothing of its group outlives it.
        _kill_group(proc, signal.SIGKILL)
    failed = _finish_reading(proc, reader, log, raw_log)
    _trail_remove(trail)
    rc = proc.returncode
    sig = -rc if rc is not None and rc < 0 else None
    return Supervised(
        exit_code=None if sig else rc,
        signal=sig,
        timed_out=stopped_by == "budget",
        stalled=stopped_by == "stall",
        seconds=time.monotonic() - start,
        log_tail="\n".join(state.tail),
        lines=state.lines,
        stopped_by=stopped_by,
        limit=state.limit if stopped_by == "limit" else "",
        log_error=f"writing {log_path.name} failed: {failed.strerror or failed}" if failed else "",
        held_seconds=held,
        started=started,
    )


GO = b"go\n"  # looper.executors.prestart.GO: the line that lets a prestarted run's train.py run


@dataclass(frozen=True)
class Launched:
    """A child :func:`launch` started: the process and its note in the pid trail."""

    proc: subprocess.Popen
    trail: Path | None


def launch(argv: Sequence[str], *, cwd: str | Path, env: Mapping[str, str] | None, hold: bool = False) -> Launched:
    """Start ``argv`` in a process group of its own, noted in the pid trail (a killed daemon's children are
    reaped from it), its output on one pipe; ``hold``: a pipe on its standard input for the go line."""
    proc = subprocess.Popen(
        list(argv),
        cwd=str(cwd),
        env=_merged_env(env, True),
        stdin=subprocess.PIPE if hold else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return Launched(proc, _trail_add(proc.pid, argv))


def end_launched(launched: Launched) -> None:
    """End a launched child that never ran (its group killed, reaped, its trail note removed)."""
    _kill_group(launched.proc, signal.SIGKILL)
    try:
        launched.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    for f in (launched.proc.stdin, launched.proc.stdout):
        close_quietly(f)
    _trail_remove(launched.trail)


def finish_launched(launched: Launched, timeout: float, max_output: int = 1 << 20) -> Completed:
    """Close a launched child's standard input (its sign to finish) and collect what it printed (the first
    ``max_output`` bytes) until it ends; past ``timeout`` seconds its group is killed (``exit_code`` None)."""
    started = time.monotonic()
    close_quietly(launched.proc.stdin)
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(launched.proc.stdout.read(max_output)), daemon=True)
    reader.start()
    try:
        code: int | None = launched.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(launched.proc, signal.SIGKILL)
        launched.proc.wait()
        code = None
    reader.join(timeout=5)
    close_quietly(launched.proc.stdout)
    _trail_remove(launched.trail)
    text = b"".join(out).decode(errors="replace")
    return Completed(tuple(launched.proc.args), code, text, "", code is None, time.monotonic() - started)


def _hold(proc: subprocess.Popen, gate: Callable[[], bool], go: bytes = b"") -> bool:
    """Wait for ``gate``; given, tell the child ``go`` (:data:`GO` when empty; a child already gone finds out
    itself); not given, close its standard input unwritten. Whether it was given."""
    given = bool(gate())
    stdin = proc.stdin
    assert stdin is not None
    try:
        if given:
            stdin.write(go or GO)
        stdin.close()
    except (BrokenPipeError, OSError, ValueError):  # it ended while it waited: _enforce sees how
        pass
    return given


def _not_started(proc: subprocess.Popen, wait: float = 10.0) -> str:
    """A child whose gate was not given reads end-of-file and leaves; one that does not is ended with its group."""
    try:
        proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        _kill_group(proc, signal.SIGKILL)
        proc.wait()
    return "not started"
