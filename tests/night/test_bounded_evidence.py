"""Bounded evidence (issue 23, part 4): what a run prints or writes costs the daemon a bounded
amount of disk, memory and time. Fast: small children through the real choke point (looper/proc.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from looper import proc
from looper.night import guard
from looper.proc.runlog import CappedLog, LineCutter


def test_a_long_line_is_cut_as_it_arrives_and_says_so():
    cut = LineCutter(10)
    assert cut.feed(b"0123456789abcdef") == []  # unfinished: held (10 bytes at most)
    assert len(cut.buf) == 10
    assert cut.feed(b"ghij\nshort\rlast") == [
        "0123456789 [looper: 10 more bytes of this line cut ([limits] line_max_bytes = 10)]", "short"]
    assert cut.feed(b"", final=True) == ["last"]
    assert cut.feed(b"\n\n  \n") == []  # blank lines are not output
    assert cut.feed(b"", final=True) == []


def test_a_capped_log_keeps_its_head_and_tail_and_says_what_was_cut(tmp_path: Path):
    path = tmp_path / "train.log"
    with open(path, "w") as f:
        log = CappedLog(f, 100)
        for i in range(100):
            log.write(f"line {i:03d}\n")  # 9 bytes each: 900 bytes in all
        log.flush()
        log.close_tail()
    text = path.read_text()
    assert len(text.encode()) <= 100 + 200  # the cap, plus the one line that says the cut
    assert text.startswith("line 000\nline 001\n")
    assert text.endswith("line 098\nline 099\n")
    assert "bytes (" in text and "lines) of output cut here" in text and "log_max_bytes = 100" in text


def test_a_capped_log_under_its_cap_is_written_whole(tmp_path: Path):
    path = tmp_path / "train.log"
    with open(path, "w") as f:
        log = CappedLog(f, 1000)
        log.write("one\n")
        log.close_tail()
    assert path.read_text() == "one\n"


def _child(code: str, tmp_path: Path, **caps: int) -> tuple[proc.Supervised, Path]:
    log = tmp_path / "run.log"
    s = proc.supervise([sys.executable, "-c", code], cwd=tmp_path, env=None, log_path=log,
                       limits=proc.Limits(budget_seconds=120, stall_seconds=60, **caps))
    return s, log


def test_a_flood_of_output_is_capped_on_disk(tmp_path: Path):
    code = "import sys\nfor i in range(200000): sys.stdout.write(f'flood {i:07d} ' + 'x' * 40 + '\\n')\nprint('END')"
    s, log = _child(code, tmp_path, log_max_bytes=65536)  # about 11 MB printed
    assert s.exit_code == 0
    size = log.stat().st_size
    assert size <= 65536 + 300, size
    text = log.read_text()
    assert text.startswith("flood 0000000 ") and text.rstrip().endswith("END")
    assert "of output cut here" in text
    assert s.lines == 200001


def test_lines_of_megabytes_are_cut_before_any_pattern_sees_them(tmp_path: Path):
    code = "import sys\nline = 'y' * (8 << 20)\nfor _ in range(5): sys.stdout.write(line + '\\n')\nraise RuntimeError('done')"
    t0 = time.monotonic()
    s, log = _child(code, tmp_path, line_max_bytes=1000)
    took = time.monotonic() - t0
    assert s.exit_code == 1
    assert max(len(x) for x in s.log_tail.splitlines()) < 1200
    assert "more bytes of this line cut" in s.log_tail and "RuntimeError: done" in s.log_tail
    assert log.stat().st_size < 20_000
    assert took < 60, took  # linear in the output (the old pump copied each line again per 64 KiB chunk)


def test_read_json_refuses_over_size_and_depth_naming_the_limit(tmp_path: Path):
    big, deep, ok = tmp_path / "big.json", tmp_path / "deep.json", tmp_path / "ok.json"
    big.write_text(json.dumps({"x": "z" * 5000}))
    deep.write_text("[" * 100_000 + "]" * 100_000)
    ok.write_text('{"steps": 3}')
    assert guard.read_json(ok, 1000, 8) == ({"steps": 3}, None)
    assert guard.read_json(tmp_path / "missing.json", 1000, 8) == (None, None)
    value, problem = guard.read_json(big, 1000, 8)
    assert value is None and "over the limit of 1000 bytes ([limits] json_max_bytes)" in problem
    value, problem = guard.read_json(deep, 10**6, 64)
    assert value is None and "nests deeper than 64 levels ([limits] json_max_depth)" in problem
    (tmp_path / "dir.json").mkdir()
    assert guard.read_json(tmp_path / "dir.json", 1000, 8) == (None, "dir.json is not a plain file")


def test_a_run_is_refused_when_the_disk_is_nearly_full_naming_the_folder_and_free_bytes(tmp_path: Path):
    problem = guard.disk_problem(tmp_path, 1 << 62, 1024)
    assert problem is not None and str(tmp_path) in problem and "bytes free" in problem
    assert "[limits] min_free_bytes = 4611686018427387904" in problem
    assert not (tmp_path / guard.RESERVE).exists()  # nothing allocated when there is no room


def test_the_reserve_is_held_and_given_back_when_the_disk_is_nearly_full(tmp_path: Path, monkeypatch):
    assert guard.disk_problem(tmp_path, 0, 65536) is None
    reserve = tmp_path / guard.RESERVE
    assert reserve.stat().st_size == 65536 and reserve.stat().st_blocks * 512 >= 65536  # real blocks
    assert guard.release_reserve(tmp_path, 65536) is False  # plenty of room: kept
    monkeypatch.setattr(guard, "_free", lambda folder: 100)
    assert guard.release_reserve(tmp_path, 65536) is True and not reserve.exists()
    # 70000 free passes a 60000 threshold, but re-making the reserve would leave less than that: not re-made
    monkeypatch.setattr(guard, "_free", lambda folder: 70000)
    assert guard.disk_problem(tmp_path, 60000, 65536) is None and not reserve.exists()  # no room to re-make it
