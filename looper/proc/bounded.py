"""A short command whose output and life are bounded (looper.proc.run with ``max_output`` or ``check``): an
untrusted agent that prints gigabytes or fills its folder costs the daemon a bounded amount of memory
and time (issue 48). Threads read stdout and stderr, each kept up to ``max_output`` bytes; past it, or
when ``check`` (polled each second) says so, or at the timeout, the command's process group is stopped
(SIGTERM, SIGKILL 5 s later) and :attr:`looper.proc.Completed.limit` says which limit stopped it."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from looper.proc.trail import Completed, _kill_group, _trail_add, _trail_remove


class _Capped:
    """One output stream read to its end, keeping at most ``limit`` bytes (None: all); ``over`` once past it."""

    def __init__(self, stream: Any, limit: int | None) -> None:
        self.data = bytearray()
        self.over = False
        self.thread = threading.Thread(target=self._read, args=(stream, limit), daemon=True)
        self.thread.start()

    def _read(self, stream: Any, limit: int | None) -> None:
        try:
            while chunk := stream.read1(65536):
                if limit is not None and len(self.data) + len(chunk) > limit:
                    self.data += chunk[: max(0, limit - len(self.data))]
                    self.over = True
                    continue  # drained, never kept: the waiter stops the command
                self.data += chunk
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        return bytes(self.data).decode("utf-8", "replace")


def _feed(stdin: Any, text: str | None) -> None:
    try:
        if text is not None:
            stdin.write(text.encode("utf-8", "replace"))
        stdin.close()
    except (OSError, ValueError):  # the command did not read it all: its business
        pass


def run_bounded(argv: Sequence[str], *, cwd: str | Path | None, env: dict[str, str], timeout: float | None,
                 input_text: str | None, max_output: int | None, check: Callable[[], str | None] | None,
                 on_start: Callable[[int], None] | None) -> Completed:
    """:func:`run` with its capture bounded and ``check`` polled: threads read, this one waits and stops."""
    start = time.monotonic()
    proc = subprocess.Popen(list(argv), cwd=str(cwd) if cwd else None, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    trail = _trail_add(proc.pid, argv)
    out, err = _Capped(proc.stdout, max_output), _Capped(proc.stderr, max_output)
    limit, timed_out, term_at, next_check = "", False, None, 0.0
    try:
        threading.Thread(target=_feed, args=(proc.stdin, input_text), daemon=True).start()
        if on_start:
            on_start(proc.pid)
        while proc.poll() is None:
            now = time.monotonic()
            if term_at is None:
                if timeout is not None and now - start > timeout:
                    timed_out = True
                elif out.over or err.over:
                    limit = f"it printed more than {max_output} bytes on {'stdout' if out.over else 'stderr'}"
                elif check is not None and now >= next_check:
                    next_check = now + 1.0
                    limit = check() or ""
                if timed_out or limit:
                    _kill_group(proc, signal.SIGTERM)
                    term_at = now
            elif now - term_at > 5:
                _kill_group(proc, signal.SIGKILL)
            try:  # the next look in 50 ms, or at once when the command ends (a fixed sleep cost each command
                proc.wait(timeout=0.05)  # up to 50 ms after its end)
            except subprocess.TimeoutExpired:
                pass
    finally:
        _kill_group(proc, signal.SIGKILL)  # nothing of its group outlives it
        _trail_remove(trail)
    for reader in (out, err):
        reader.thread.join(timeout=5)
    return Completed(tuple(argv), None if timed_out else proc.returncode, out.text(), err.text(), timed_out,
                     time.monotonic() - start, limit)
