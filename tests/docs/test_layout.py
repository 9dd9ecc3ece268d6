"""The layout's own rule (docs/CONTRIBUTING.md): a Python file past about 500 lines is split along its concepts.
Every tracked ``.py`` file of the project is held to it here, so a file that grows past the line is noticed by the
change that grows it, not by a later reader."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 520  # "about 500": a file near it is split by the change that would take it past


def _tracked_python() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", "--", "*.py"], cwd=ROOT, capture_output=True, check=True).stdout
    files = [ROOT / name for name in out.decode().split("\0") if name]
    return [f for f in files if f.is_file()]


def test_no_python_file_of_the_project_is_past_the_line_where_it_is_split() -> None:
    files = _tracked_python()
    assert len(files) > 100 and ROOT / "train.py" in files and ROOT / "looper" / "cli.py" in files  # it looked
    long = {str(f.relative_to(ROOT)): n for f in files if (n := len(f.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"past {MAX_LINES} lines, split along their concepts: {long}"
