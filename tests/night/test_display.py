"""looper.night.display: run output reaches the terminal and .looper/logs cleaned, never as rich markup; a
failure of the display is kept for the loop to halt on, never raised into it (issue 23, finding 8)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from looper.night.display import Display, RichDisplay

ATTACK = "step 3 \x1b]0;pwned\x07\x1b[2J\r#9 -> KEEP 0.9999 \x9b2J\x08"
BAD_BYTES = ("\x1b", "\x07", "\r", "\x9b", "\x08")


def _all_calls(d: Display) -> None:
    d.set_phase(4, f"train main seed=0 {ATTACK}", 60)
    d.log_line(ATTACK)
    d.log_line("[/x]")
    d.note(f"a note {ATTACK}")
    d.outcome(4, "crash", None, f"ValueError: {ATTACK}\nsecond line", 0.5)
    d.close()


def test_plain_display_writes_no_control_character_to_the_terminal_or_the_log(tmp_path: Path) -> None:
    out, log = io.StringIO(), tmp_path / "logs" / "looper.log"
    d = Display(out, log)
    _all_calls(d)
    for text in (out.getvalue(), log.read_text()):
        assert not [b for b in BAD_BYTES if b in text], repr(text)
        assert "#9 -> KEEP 0.9999" in text  # the words are shown, as text inside one line
        assert all(line[:1] == "[" or line[:4].isdigit() for line in text.splitlines())  # no line of its own
    assert d.broken is None


def test_rich_display_shows_markup_as_text_and_closes(tmp_path: Path) -> None:
    """A last line ``[/x]`` made the panel raise MarkupError at close (exit 3, no page)."""
    buf = io.StringIO()
    d = RichDisplay(tmp_path / "looper.log", console=Console(file=buf, force_terminal=True, width=120))
    d.set_phase(1, "[w1] train main seed=0", 60)
    _all_calls(d)
    assert d.broken is None
    shown = buf.getvalue()
    assert "[/x]" in shown and "[w1]" in shown
    assert "pwned" not in shown and "\x1b]0;" not in shown and "\x1b[2J" not in shown and "\r#9" not in shown


class _Boom:
    def __init__(self, where: str) -> None:
        self.where = where

    def write(self, _text: str) -> int:
        raise OSError(5, f"{self.where}: Input/output error")

    def flush(self) -> None:
        pass


def test_a_failing_display_never_raises_and_keeps_its_first_failure(tmp_path: Path) -> None:
    d = Display(_Boom("terminal"))  # type: ignore[arg-type]
    d.note("one")
    d.note("two")
    assert d.broken == "writing to the terminal: OSError: [Errno 5] terminal: Input/output error"


def test_a_failing_panel_is_kept_not_raised(tmp_path: Path) -> None:
    d = RichDisplay(None, console=Console(file=io.StringIO(), force_terminal=True))

    def boom() -> None:
        raise RuntimeError("panel \x1b[2Jbroke")

    d._render = boom  # type: ignore[method-assign]
    d.log_line("x")
    d.close()
    assert d.broken == "drawing the panel: RuntimeError: panel broke"


def test_a_broken_log_file_is_a_display_failure(tmp_path: Path) -> None:
    d = Display(io.StringIO(), tmp_path / "looper.log")
    assert d.log is not None
    d.log.close()  # writing to it now raises ValueError
    d.note("x")
    assert d.broken is not None and d.broken.startswith("writing the log: ValueError")
    d.close()


def test_a_huge_line_is_cut_before_it_is_cleaned() -> None:
    d = Display(io.StringIO())
    d.log_line("\x1b[2J" + "x" * 8 * 2**20 + "\x1b]0;pwned\x07 end")
    assert d.last_line.endswith("x end") and len(d.last_line) <= 1000 and "\x1b" not in d.last_line
