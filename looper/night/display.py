"""The live progress display: a rich panel on a terminal, plain lines elsewhere.

Run output is untrusted: every line shown or logged is cleaned first (control characters and
terminal escape sequences removed, one line: :func:`looper.core.verdicts.untrusted.one_line`), and the
rich panel shows it as ``Text``, never parsed as markup (a line ``[/x]`` is just text).

The display never raises into the loop: its first failure is kept in :attr:`Display.broken`,
the display carries on as plain lines where it can, and the loop halts the night on it as an
internal error, with a page (:meth:`looper.night.loop.Loop.claim`, :meth:`looper.night.loop.Loop.run`).
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from looper.core.verdicts.untrusted import one_line


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
        self.broken: str | None = None  # the display's first failure: the loop halts on it

    def _guard(self, what: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run one part of the display; its failure is remembered, never raised into the loop."""
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - any failure of the display is the loop's to report
            if self.broken is None:
                self.broken = f"{what}: {type(exc).__name__}: {one_line(str(exc), 300)}"

    def _emit(self, text: str) -> None:
        text = one_line(text)
        self._guard("writing to the terminal", self._print, f"[{time.strftime('%H:%M:%S')}] {text}")
        self._guard("writing the log", self._log, text)

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def _log(self, text: str) -> None:
        if self.log is not None:
            self.log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {one_line(text)}\n")
            self.log.flush()

    def note(self, text: str) -> None:
        self._emit(text)

    def set_phase(self, exp: int | None, phase: str, budget: float | None = None) -> None:
        self.exp, self.phase, self.budget = exp, one_line(phase), budget
        self.phase_started = time.monotonic()
        label = f"#{exp} " if exp is not None else ""
        extra = f" (budget {budget:.0f}s)" if budget else ""
        self._emit(f"{label}{phase}{extra}")

    def log_line(self, line: str) -> None:
        self.last_line = one_line(line[-1000:])  # the panel shows the end of it; a huge line costs nothing

    def outcome(self, exp: int, status: str, score: float | None, why: str, best: float | None) -> None:
        self.best = best
        s = "-" if score is None else f"{score:.4f}"
        self.outcomes.append(f"#{exp} {status} {s}")
        b = "-" if best is None else f"{best:.4f}"
        self._emit(f"#{exp} -> {status.upper()} score={s} best={b}" + (f": {why}" if why else ""))

    def finish(self) -> None:
        """The live part's last render (nothing for plain lines); notes still print after it."""

    def close(self) -> None:
        self.finish()
        if self.log is not None:
            log, self.log = self.log, None
            self._guard("closing the log", log.close)


class RichDisplay(Display):
    """A live panel: experiment, phase, elapsed vs budget, best score, last outcomes."""

    def __init__(self, log_path: Path | None = None, console: Any = None) -> None:
        super().__init__(log_path=log_path)
        from rich.console import Console
        from rich.live import Live

        self.console = console or Console()
        self.live: Any = Live(self._render(), console=self.console, refresh_per_second=2, transient=False)
        self.live.start()

    def _render(self):  # noqa: ANN202 - rich renderable
        from rich.panel import Panel
        from rich.table import Table
        from rich.text import Text

        t = Table.grid(padding=(0, 2))
        elapsed = time.monotonic() - self.phase_started
        budget = f" / {self.budget:.0f}s" if self.budget else ""
        # every cell is Text: run output (the log line) and labels like "[w1]" are never parsed as markup
        t.add_row("experiment", Text("-" if self.exp is None else f"#{self.exp}"))
        t.add_row("phase", Text(f"{self.phase}  {elapsed:.0f}s{budget}"))
        t.add_row("best", Text("-" if self.best is None else f"{self.best:.4f}"))
        t.add_row("last", Text("  ".join(self.outcomes) or "-"))
        t.add_row("log", Text(self.last_line[-100:]))
        return Panel(t, title="looper", expand=False)

    def _print(self, line: str) -> None:
        from rich.text import Text

        self.console.print(Text(line), markup=False, highlight=False)

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._render())

    def _emit(self, text: str) -> None:
        super()._emit(text)
        self._guard("drawing the panel", self._refresh)

    def log_line(self, line: str) -> None:
        super().log_line(line)
        self._guard("drawing the panel", self._refresh)

    def finish(self) -> None:
        live, self.live = self.live, None
        if live is not None:
            self._guard("closing the panel", live.stop)


def make_display(stream: TextIO | None = None, log_path: Path | None = None) -> Display:
    out = stream or sys.stdout
    if out.isatty():
        try:
            return RichDisplay(log_path)
        except Exception:  # a broken terminal never stops the loop
            pass
    return Display(out, log_path)
