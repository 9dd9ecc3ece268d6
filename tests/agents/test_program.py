from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from looper.agents.program import REQUIRED_SECTIONS, load_program, parse_program, problems_against_train
from looper.core.propose.hyperblock import read_knobs

ROOT = Path(__file__).resolve().parents[2]


def test_the_real_program_md_parses_with_zero_problems() -> None:
    prog = load_program(ROOT / "program.md")
    assert prog.problems == []
    assert isinstance(prog.status_date, dt.date)
    assert set(REQUIRED_SECTIONS) <= set(prog.sections)
    assert sorted(prog.phases) == [1, 2, 3]
    assert prog.knobs[0].rank == 1 and len(prog.knobs) >= 10
    assert [k.rank for k in prog.knobs] == list(range(1, len(prog.knobs) + 1))
    names = {k.name for k in prog.knobs}
    assert {"LR0", "IMGSZ", "MOSAIC"} <= names
    assert "HSV_H" not in names and "DEGREES" not in names  # no colour or rotation augmentation


def test_the_real_program_md_fits_the_real_train_py_when_present() -> None:
    train = ROOT / "train.py"
    if not train.exists():  # written by another engineer; checked once it lands
        return
    prog = load_program(ROOT / "program.md")
    assert problems_against_train(prog, read_knobs(train.read_text())) == []


BROKEN = """# no status line here

## Scope
Only train.py.

## Domain facts
Black and white.

## Search plan
- Phase 1: one at a time
- Phase 3: fine-tune

1. LR0: 0.001, 0.01
2. LR0 0.01
3. lr0: 0.1
5. MOSAIC: 0.0, 0.0.1
6. SCALE: 0.1, fast
7. WIDTH:
8. CLS_GAIN: 0.5, 0.5

## Memory
The database.
"""


def test_a_broken_program_lists_every_problem() -> None:
    prog = parse_program(BROKEN)
    text = "\n".join(prog.problems)
    assert not prog.ok
    assert "first line must be the dated status line" in text
    assert "missing section '## Hardware'" in text
    assert "missing section '## Goal and tie-breakers'" in text
    assert "missing section '## Stop rules'" in text
    assert "Search plan: line 14 '2. LR0 0.01' has no ':'" in text
    assert "knob name 'lr0' is not an UPPER_CASE name" in text
    assert "'0.0.1' is not a number" in text
    assert "mixes value kinds" in text
    assert "knob WIDTH lists no candidate values" in text
    assert "knob CLS_GAIN lists a value twice" in text
    assert "no '- Phase 2: ...' line" in text
    # the good line still parsed
    assert [k.name for k in prog.knobs] == ["LR0"]


def test_bad_status_date_and_rank_order() -> None:
    text = (ROOT / "program.md").read_text()
    text = re.sub(r"Status \(\d{4}-\d\d-\d\d\)", "Status (30.11.2026)", text, count=1)
    text = re.sub(r"^2\. ", "4. ", text, count=1, flags=re.M)
    problems = parse_program(text).problems
    assert any("status date '30.11.2026' is not YYYY-MM-DD" in p for p in problems)
    assert any("rank 4 out of order (expected 2)" in p for p in problems)


def test_values_are_typed_and_comments_stripped() -> None:
    text = (ROOT / "program.md").read_text()
    prog = parse_program(text)
    by = {k.name: k for k in prog.knobs}
    assert by["COS_LR"].candidates == (True, False)
    assert by["OPTIMIZER"].candidates == ("SGD", "AdamW")
    assert by["FLIPLR"].candidates == (0.0,)
    assert all(isinstance(v, int) for v in by["IMGSZ"].candidates)


def test_missing_file_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    prog = load_program(tmp_path / "program.md")
    assert prog.problems and "file not found" in prog.problems[0]


def test_problems_against_train(train_py: str) -> None:
    prog = parse_program((ROOT / "program.md").read_text())
    probs = problems_against_train(prog, read_knobs(train_py))
    assert any("knob SCALE is not in train.py" in p for p in probs)  # the fixture lacks it
    assert not any("LR0" in p for p in probs)
