"""Bounded run output: a run's log on disk and every line it prints cost the daemon a
bounded amount of disk, memory and time, however much train.py prints.

- :class:`LineCutter` splits a byte stream into lines and cuts each to ``line_max_bytes`` as it
  arrives, before any display, log or pattern sees it (no regex over an 8 MiB line);
- :class:`CappedLog` keeps a run log under ``log_max_bytes``: its head as it comes, then only the
  latest lines, written at the end after one line that says what was cut (a 2 GB print cannot
  fill the disk).

The caps come from ``[limits]`` (set once by the daemon: :func:`set_output_caps`);
:class:`looper.proc.Limits` starts from them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CAPS = {"log_max_bytes": 64 * 1024 * 1024, "line_max_bytes": 16 * 1024}


def set_output_caps(log_max_bytes: int, line_max_bytes: int) -> None:
    """The caps every later :class:`looper.proc.Limits` starts from."""
    CAPS.update(log_max_bytes=int(log_max_bytes), line_max_bytes=int(line_max_bytes))


class LineCutter:
    """A byte stream -> lines, each cut to ``max_bytes`` (the cut said at its end) as it arrives:
    memory and work stay linear in the output, however long a line is. A carriage return ends a line too."""

    def __init__(self, max_bytes: int) -> None:
        self.max = max(1, int(max_bytes))
        self.buf = bytearray()
        self.cut = 0

    def _add(self, part: bytes) -> None:
        room = self.max - len(self.buf)
        if room > 0:
            self.buf += part[:room]
        self.cut += max(0, len(part) - max(room, 0))

    def _take(self) -> str:
        text = bytes(self.buf).decode("utf-8", "replace")
        if self.cut:
            text += f" [looper: {self.cut} more bytes of this line cut ([limits] line_max_bytes = {self.max})]"
        self.buf.clear()
        self.cut = 0
        return text

    def feed(self, chunk: bytes, final: bool = False) -> list[str]:
        """The non-blank lines ``chunk`` completes (with ``final``, the unfinished rest too)."""
        parts = chunk.replace(b"\r", b"\n").split(b"\n")
        rest = parts.pop()
        lines = []
        for part in parts:
            self._add(part)
            lines.append(self._take())
        self._add(rest)
        if final and (self.buf or self.cut):
            lines.append(self._take())
        return [ln for ln in lines if ln.strip()]


class CappedLog:
    """A run log on disk kept under ``max_bytes``: its head is written as it comes; past half the
    cap only the latest lines (the other half) are kept in memory, written with one line that says
    what was cut when the run ends (:meth:`close_tail`)."""

    def __init__(self, log: Any, max_bytes: int) -> None:
        self.log = log
        self.error: OSError | None = None  # the first write that failed (a full disk): later ones are dropped
        self.max = max(2, int(max_bytes))
        self.head_left = self.max // 2
        self.tail: deque[str] = deque()
        self.tail_bytes = 0
        self.cut_bytes = 0
        self.cut_lines = 0

    def write(self, text: str) -> None:
        n = len(text.encode("utf-8", "replace"))
        if not self.tail and n <= self.head_left:
            self.head_left -= n
            self._put(lambda: self.log.write(text))
            return
        self.head_left = 0
        self.tail.append(text)
        self.tail_bytes += n
        while self.tail and self.tail_bytes > self.max // 2:
            old = self.tail.popleft()
            self.tail_bytes -= len(old.encode("utf-8", "replace"))
            self.cut_bytes += len(old.encode("utf-8", "replace"))
            self.cut_lines += 1

    def _put(self, write: Any) -> None:
        """One write to the file; a failure (ENOSPC: the disk is full) is kept in :attr:`error` and every
        later write is dropped, so the run's output is still drained and the run still ends (issue 39)."""
        if self.error is not None:
            return
        try:
            write()
        except OSError as exc:
            self.error = exc

    def flush(self) -> None:
        self._put(self.log.flush)

    def close_tail(self) -> None:
        if self.cut_lines:
            note = (f"[looper: {self.cut_bytes} bytes ({self.cut_lines} lines) of output cut here: the log "
                    f"keeps its head and its tail within [limits] log_max_bytes = {self.max}]\n")
            self._put(lambda: self.log.write(note))
        tail = list(self.tail)
        self._put(lambda: self.log.writelines(tail))
        self.tail.clear()
        self._put(self.log.flush)


def close_quietly(f: Any) -> OSError | None:
    """Close a log file whose last buffered bytes may not fit on a full disk: the error, never raised (None: nothing)."""
    if f is None:
        return None
    try:
        f.close()
    except OSError as exc:
        return exc
    return None


@contextmanager
def capped_log(path: str | Path, max_bytes: int | None = None) -> Iterator[CappedLog]:
    """A run log opened for appending, capped as :class:`CappedLog`; its kept tail is written at exit."""
    raw = open(path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed below, quietly)
    log = CappedLog(raw, max_bytes or CAPS["log_max_bytes"])
    try:
        yield log
    finally:
        try:
            log.close_tail()
        except (ValueError, RuntimeError):  # a reader still alive: the head already written stays
            pass
        close_quietly(raw)
