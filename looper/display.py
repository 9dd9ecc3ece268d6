"""The live progress display: a rich panel on a terminal, plain lines elsewhere."""

from __future__ import annotations

import sys
import time
from collections import deque
from pathlib import Path
from typing import TextIO


class Display:
    """Plain-line progress: one line per phase change and outcome (logs, systemd, CI)."""

    def __init__(self, stream: TextIO | None = None, log_path: Path | None = None) -> None:
        self.stream = stream or sys.stdout
        self.log = None
        if log_path is not None:  # every line also goes to the daemon's log under .looper/logs/
            log_path.parent.mkdir(parents=True, exist_ok=True)
            self.log = open(log_path, "a", encoding="utf-8")
        self.exp: int | None = None
        self.phase = ""
        self.phase_started = time.monotonic()
        self.budget: float | None = None
        self.best: float | None = None
        self.outcomes: deque[str] = deque(maxlen=8)
        self.last_line = ""

    def _emit(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=self.stream, flush=True)
        self._log(text)

    def _log(self, text: str) -> None:
        if self.log is not None:
            self.log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {text}\n")
            self.log.flush()

    def note(self, text: str) -> None:
        self._emit(text)

    def set_phase(self, exp: int | None, phase: str, budget: float | None = None) -> None:
        self.exp, self.phase, self.budget = exp, phase, budget
        self.phase_started = time.monotonic()
        label = f"#{exp} " if exp is not None else ""
        extra = f" (budget {budget:.0f}s)" if budget else ""
        self._emit(f"{label}{phase}{extra}")

    def log_line(self, line: str) -> None:
        self.last_line = line

    def outcome(self, exp: int, status: str, score: float | None, why: str, best: float | None) -> None:
        self.best = best
        s = "-" if score is None else f"{score:.4f}"
        self.outcomes.append(f"#{exp} {status} {s}")
        b = "-" if best is None else f"{best:.4f}"
        self._emit(f"#{exp} -> {status.upper()} score={s} best={b}" + (f": {why}" if why else ""))

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None


class RichDisplay(Display):
    """A live panel: experiment, phase, elapsed vs budget, best score, last outcomes."""

    def __init__(self, log_path: Path | None = None) -> None:
        super().__init__(log_path=log_path)
        from rich.console import Console
        from rich.live import Live

        self.console = Console()
        self.live = Live(self._render(), console=self.console, refresh_per_second=2, transient=False)
        self.live.start()

    def _render(self):  # noqa: ANN202 - rich renderable
        from rich.panel import Panel
        from rich.table import Table

        t = Table.grid(padding=(0, 2))
        elapsed = time.monotonic() - self.phase_started
        budget = f" / {self.budget:.0f}s" if self.budget else ""
        t.add_row("experiment", "-" if self.exp is None else f"#{self.exp}")
        t.add_row("phase", f"{self.phase}  {elapsed:.0f}s{budget}")
        t.add_row("best", "-" if self.best is None else f"{self.best:.4f}")
        t.add_row("last", "  ".join(self.outcomes) or "-")
        t.add_row("log", self.last_line[-100:])
        return Panel(t, title="looper", expand=False)

    def _emit(self, text: str) -> None:
        self.console.print(f"[{time.strftime('%H:%M:%S')}] {text}", markup=False, highlight=False)
        self._log(text)
        self.live.update(self._render())

    def log_line(self, line: str) -> None:
        super().log_line(line)
        self.live.update(self._render())

    def close(self) -> None:
        self.live.stop()
        super().close()


def make_display(stream: TextIO | None = None, log_path: Path | None = None) -> Display:
    out = stream or sys.stdout
    if out.isatty():
        try:
            return RichDisplay(log_path)
        except Exception:  # a broken terminal never stops the loop
            pass
    return Display(out, log_path)
