"""The one subprocess choke point: every child process looper starts goes through here.

Two shapes:

- :func:`run` for short commands (git helpers, agents, ssh probes): captured output,
  a wall-clock timeout, the whole process group killed on timeout.
- :func:`supervise` for training and evaluation (:mod:`looper.proc.wallclock`, where the wall clock is
  enforced): output streamed line by line to a log file and a callback, the budget and the log-silence
  (stall) limit enforced from outside: SIGTERM to the process group at the limit, SIGKILL ``kill_after``
  seconds later.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from looper.proc.runlog import CappedLog, LineCutter, capped_log, set_output_caps
from looper.proc.trail import (  # noqa: F401 (the choke point's names: proc.set_trail, proc.reap_trail, ...)
    TRAIL_FORMAT,
    Completed,
    _kill_group,
    _merged_env,
    _trail_add,
    _trail_remove,
    group_gone,
    kill_group,
    process_identity,
    reap_trail,
    set_trail,
)
from looper.proc.wallclock import (
    Launched,
    Limits,
    Supervised,
    emit_lines,
    end_launched,
    finish_launched,
    launch,
    supervise,
)

__all__ = ["CappedLog", "LineCutter", "Launched", "Limits", "Supervised", "capped_log", "emit_lines",  # the choke
           "end_launched", "finish_launched", "launch", "set_output_caps", "supervise"]  # point's names: bounded run output (runlog),
# the wall clock and a child started ahead of its run (wallclock)


def run(
    argv: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    inherit_env: bool = True,
    timeout: float | None = None,
    input_text: str | None = None,
    max_output: int | None = None,
    check: Callable[[], str | None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> Completed:
    """Run a short command to completion and capture its output. With ``max_output`` (bytes, each of stdout
    and stderr) or ``check`` (polled each second: words stop it), the capture is bounded and a command past
    either is stopped like a timeout, the words in :attr:`Completed.limit` (an untrusted agent: issue 48)."""
    if max_output is not None or check is not None or on_start is not None:
        from looper.proc.bounded import run_bounded

        return run_bounded(argv, cwd=cwd, env=_merged_env(env, inherit_env), timeout=timeout,
                            input_text=input_text, max_output=max_output, check=check, on_start=on_start)
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=str(cwd) if cwd else None,
        env=_merged_env(env, inherit_env),
        stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    trail = _trail_add(proc.pid, argv)
    timed_out = False
    try:
        out, err = proc.communicate(input=input_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            _kill_group(proc, signal.SIGKILL)
            out, err = proc.communicate()
    finally:
        if proc.poll() is None:  # interrupted (a signal in this thread): never orphan the child
            _kill_group(proc, signal.SIGKILL)
        _trail_remove(trail)
    code = proc.returncode
    return Completed(tuple(argv), None if timed_out else code, out or "", err or "", timed_out,
                     time.monotonic() - start)
