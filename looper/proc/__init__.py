"""The one subprocess choke point: every child process looper starts goes through here.

Two shapes:

- :func:`run` for short commands (git helpers, agents, ssh probes): captured output,
  a wall-clock timeout, the whole process group killed on timeout.
- :func:`supervise` for training and evaluation: output streamed line by line to a log
  file and a callback, the budget and the log-silence (stall) limit enforced from
  outside: SIGTERM to the process group at the limit, SIGKILL ``kill_after`` seconds later.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper.proc.runlog import CAPS, CappedLog, LineCutter, capped_log, close_quietly, set_output_caps

__all__ = ["CappedLog", "LineCutter", "capped_log", "set_output_caps"]  # bounded run output (looper.proc.runlog)

# The pid trail: while a daemon runs, every child's process group is noted as
# ``<trail>/<pgid>.pid`` until it ends, so a restart after ``kill -9`` can end what the dead
# daemon left behind (training runs, agents, ssh clients). Each note records the leader's
# start time (from /proc), the boot it started in and its command line (the first words and a
# hash of all): a restart ends a group only when its leader is still that same process (same
# boot, same start time), so a stale note (a pid reused by an unrelated process) or a note in
# another format never gets anything killed.
_TRAIL: Path | None = None
TRAIL_FORMAT = "looper-pid/1"


def set_trail(folder: Path | None) -> None:
    global _TRAIL
    _TRAIL = Path(folder) if folder else None
    if _TRAIL:
        _TRAIL.mkdir(parents=True, exist_ok=True)


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_identity(pid: int) -> dict[str, str] | None:
    """The leader's start time (clock ticks after boot), boot id and command-line hash; None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    args = cmdline.rstrip(b"\0")
    return {"start": fields[19], "boot": _boot_id(), "cmd_sha256": hashlib.sha256(args).hexdigest()}


def _argv_sha(argv: Sequence[str]) -> str:
    return hashlib.sha256("\0".join(str(a) for a in argv).encode("utf-8", "surrogateescape")).hexdigest()


def _trail_add(pid: int, argv: Sequence[str]) -> Path | None:
    if _TRAIL is None:
        return None
    p = _TRAIL / f"{pid}.pid"
    ident = process_identity(pid) or {}
    record = {"format": TRAIL_FORMAT, "pgid": pid, "start": ident.get("start", ""), "boot": _boot_id(),
              "cmd_sha256": _argv_sha(argv), "cmd": " ".join(str(a) for a in argv[:4])[:300],
              "daemon": os.getpid()}
    try:
        p.write_text(json.dumps(record) + "\n")
    except OSError:
        return None
    return p


def _trail_remove(p: Path | None) -> None:
    if p is not None:
        p.unlink(missing_ok=True)


def _trail_check(p: Path) -> tuple[int | None, str]:
    """(the group to end, words): None when the note is not ours or its leader is another process."""
    try:
        pid = int(p.stem)
        record = json.loads(p.read_text(errors="replace"))
    except (ValueError, OSError):
        return None, f"ignored {p.name}: not a pid note looper wrote"
    if not isinstance(record, dict) or record.get("format") != TRAIL_FORMAT or record.get("pgid") != pid:
        return None, f"ignored {p.name}: not a pid note looper wrote"
    now = process_identity(pid)
    if now is None:
        return None, ""  # already gone: nothing to say
    what = str(record.get("cmd", ""))[:300]
    if not record.get("start") or (now["start"], now["boot"]) != (record.get("start"), record.get("boot")):
        return None, (f"left process {pid} alone: it is not the one a previous daemon started "
                      f"(its start time differs from {p.name}: {what})")
    try:
        if os.getpgid(pid) != pid:
            return None, f"left process {pid} alone: it no longer leads its process group ({what})"
    except ProcessLookupError:
        return None, ""
    return pid, what


def reap_trail(folder: Path) -> list[str]:
    """End the process groups a dead daemon left in its trail; one line for each ended or left alone."""
    ended = []
    folder = Path(folder)
    if not folder.is_dir():
        return ended
    for p in sorted(folder.glob("*.pid")):
        pgid, what = _trail_check(p)
        if pgid is not None and kill_group(pgid):
            ended.append(f"ended a process a previous daemon left behind: group {pgid} ({what})")
        elif what:
            ended.append(what)
        p.unlink(missing_ok=True)
    return ended


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    exit_code: int | None  # None: killed on timeout before it exited by itself
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def _merged_env(env: Mapping[str, str] | None, inherit: bool) -> dict[str, str]:
    base = dict(os.environ) if inherit else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if env:
        base.update({k: str(v) for k, v in env.items()})
    return base


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run(
    argv: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    inherit_env: bool = True,
    timeout: float | None = None,
    input_text: str | None = None,
) -> Completed:
    """Run a short command to completion and capture its output."""
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


def group_gone(pgid: int, within: float = 5.0, poll: float = 0.05) -> bool:
    """Wait up to ``within`` seconds for a process group to have no member left; True once it has none."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(poll)
    return False


def kill_group(pgid: int, wait: float = 5.0) -> bool:
    """TERM then KILL a process group; True when something was there to end."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    if group_gone(pgid, wait, poll=0.1):
        return True
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


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
        time.sleep(0.1)
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
) -> Supervised:
    """Run a child in its own process group, stream its output, enforce limits from outside."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    state = _State(tail=deque(maxlen=limits.tail_lines))
    start = time.monotonic()
    # Not ``with open``: closing flushes, and on a disk the run filled that raises (issue 39); the
    # failure is the run's evidence (Supervised.log_error), never an exception in the daemon.
    raw_log = open(log_path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115
    log = CappedLog(raw_log, limits.log_max_bytes)
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=str(cwd),
            env=_merged_env(env, True),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except BaseException:
        close_quietly(raw_log)
        raise
    trail = _trail_add(proc.pid, argv)
    try:
        if on_start:
            on_start(proc.pid)
        reader = threading.Thread(target=_pump, args=(proc, state, log, on_line, limits.line_max_bytes), daemon=True)
        reader.start()
        stopped_by = _enforce(proc, state, limits, start, cancel)
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
    )
