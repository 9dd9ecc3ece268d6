"""Issue 48 items 2 and 4 below the daemon, with real processes: the quota watch counts what a run holds in
files it deleted (its own folder empty), and ``proc.run`` bounds what it keeps of a command's output and
stops it at a limit, naming it."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from looper import proc
from looper.core.run.limits import Caps
from looper.executors import limits

pytestmark = pytest.mark.e2e  # real processes held open and watched (about 1 s each)
MIB = 1 << 20

HOLDER = """
import os, sys, time

out = sys.argv[1]
files = []
for i in range(6):  # 6 x 4 MiB, each deleted at once and kept open: the folder stays empty
    path = os.path.join(out, f"h{i}")
    f = open(path, "wb")
    os.unlink(path)
    f.write(os.urandom(4 << 20))
    f.flush()
    files.append(f)
print("held", flush=True)
time.sleep(30)
"""


def test_the_watch_counts_deleted_files_the_run_still_holds(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    box = limits.Box(Caps(out_max_bytes=16 * MIB, out_max_files=100), out)
    assert box.quota == 16 * MIB
    done = proc.run([sys.executable, "-c", HOLDER, str(out)], timeout=60, check=box.check, on_start=box.started)
    assert done.limit and "grew past its quota, [limits] out_max_bytes = 16777216" in done.limit, done
    assert "in deleted files it still held open" in done.limit
    assert done.seconds < 20 and list(out.iterdir()) == []  # stopped by the watch, not the timeout


def test_the_watch_finds_the_runs_processes_below_its_first(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {HOLDER!r}, {str(out)!r}])"
    box = limits.Box(Caps(out_max_bytes=16 * MIB, out_max_files=100), out)
    done = proc.run([sys.executable, "-c", child], timeout=60, check=box.check, on_start=box.started)
    assert "deleted files it still held open" in done.limit, done


def test_a_folder_too_deep_for_the_watch_is_its_limit(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    deep = "import os\nos.chdir(os.environ['OUT'])\nfor _ in range(200):\n    os.mkdir('d'); os.chdir('d')\n" \
           "import time; time.sleep(30)\n"
    box = limits.Box(Caps(out_max_bytes=16 * MIB, out_max_files=10_000), out)
    done = proc.run([sys.executable, "-c", deep], env={"OUT": str(out)}, timeout=60, check=box.check)
    assert "levels deep" in done.limit and done.seconds < 20, done


def test_output_past_the_cap_stops_the_command_and_is_not_kept() -> None:
    t0 = time.monotonic()
    done = proc.run([sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"],
                    timeout=60, max_output=1 * MIB)
    assert done.limit == "it printed more than 1048576 bytes on stdout"
    assert len(done.stdout) <= MIB and time.monotonic() - t0 < 20 and not done.timed_out


def test_the_bounded_run_keeps_what_run_does() -> None:
    done = proc.run([sys.executable, "-c", "import sys; print(sys.stdin.read().upper()); "
                     "print('e', file=sys.stderr); sys.exit(3)"], input_text="hi", max_output=MIB)
    assert (done.exit_code, done.stdout, done.stderr, done.limit, done.timed_out) == (3, "HI\n", "e\n", "", False)
    slow = proc.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1, max_output=MIB)
    assert slow.timed_out and slow.exit_code is None and slow.seconds < 10
    env = proc.run([sys.executable, "-c", "import os; print(os.environ.get('A'))"], env={"A": "1"},
                   max_output=MIB)
    assert env.stdout == "1\n" and os.environ.get("A") is None
