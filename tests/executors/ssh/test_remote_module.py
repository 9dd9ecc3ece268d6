"""``python -m looper.remote``, the ssh executor's host side, run here without ssh.

Each command runs in a temporary remote_dir layout (the working directory is its checkout/),
as the executor runs it on the host: real processes, real process groups, real files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from looper import remote
from looper.proc import group_gone
from looper.workspace.hashes import tree_hash

pytestmark = pytest.mark.e2e  # the end-to-end tier: real processes and process groups


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "checkout").mkdir()
    monkeypatch.chdir(tmp_path / "checkout")
    return tmp_path


def _answer(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_root_creates_runs_and_names_the_physical_path(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert remote.main(["root"]) == 0
    assert _answer(capsys) == {"root": str(root.resolve())} and (root / "runs").is_dir()


def test_run_streams_lines_and_records_pid_and_status(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = root / "runs" / "r1"
    code = remote.main(["run", str(run), "--env=FIXTURE_WORD=hello", "--kill-after=1", "--", sys.executable,
                        "-c", "import os; print(os.environ['FIXTURE_WORD']); print('pg', os.getpgid(0)); "
                        "raise SystemExit(3)"])
    out = capsys.readouterr().out.splitlines()
    assert code == 3 and out[0] == "hello"
    assert (run / "status").read_text().strip() == "3"
    assert int((run / "run.pid").read_text()) == int(out[1].split()[1])  # the child's own process group
    assert "hello" in (run / "run.log").read_text()


def test_run_reports_a_signal_death_as_128_plus_n(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = root / "runs" / "r2"
    code = remote.main(["run", str(run), "--", sys.executable, "-c",
                        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert code == 128 + signal.SIGKILL and (run / "status").read_text().strip() == "137"


def test_end_kills_a_group_that_ignores_sigterm(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = root / "runs" / "r3"
    run.mkdir(parents=True)
    child = subprocess.Popen([sys.executable, "-c", "import signal, time\nsignal.signal(signal.SIGTERM, "
                              "signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(600)"],
                             start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "up"
        (run / "run.pid").write_text(str(child.pid))
        assert remote.main(["end", str(run), "--kill-after", "0.5"]) == 0
        assert _answer(capsys) == {"what": "KILLED", "status": "", "gpu": None,
                                   "out": {"bytes": 0, "entries": 0, "sparse": []}}  # no out/ yet: nothing to fetch
        child.wait(timeout=10)
        assert group_gone(child.pid) and not (run / "run.pid").exists()
        assert remote.main(["end", str(run), "--kill-after", "0.5"]) == 0  # nothing twice
        assert _answer(capsys)["what"] == "GONE"
    finally:
        if child.poll() is None:
            child.kill()


def test_run_dir_prunes_old_runs_but_never_a_live_one(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = root / "runs"
    for i in range(8):
        (runs / f"old{i}").mkdir(parents=True)
    (runs / "old0" / "run.pid").write_text("1")  # the oldest, but live: kept
    (runs / "old7" / "w.pt").write_text("w")
    for i in range(8):
        os.utime(runs / f"old{i}", (1000 + i, 1000 + i))
    assert remote.main(["run-dir", str(runs / "new"), "--keep", "3", "--cached", str(runs / "old7" / "w.pt")]) == 0
    assert _answer(capsys) == {"cached": True}
    assert sorted(p.name for p in runs.iterdir()) == ["new", "old0", "old6", "old7"]
    assert (runs / "new" / "out").is_dir()


def test_run_dir_never_prunes_a_folder_changed_in_the_last_minutes(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The runs side by side make their folders at once: one made a moment ago (its run not started yet: no
    run.pid) or ended a moment ago (its out/ not fetched yet) is not an old run, however many are newer."""
    runs = root / "runs"
    for i in range(6):
        (runs / f"r{i}").mkdir(parents=True)
        os.utime(runs / f"r{i}", (time.time() - 60 + i,) * 2)  # a minute ago and since, none with a run.pid
    (runs / "stale").mkdir()
    os.utime(runs / "stale", (time.time() - remote.FRESH_SECONDS - 5,) * 2)
    assert remote.main(["run-dir", str(runs / "new"), "--keep", "2"]) == 0
    assert sorted(p.name for p in runs.iterdir()) == ["new", *(f"r{i}" for i in range(6))]  # the stale one went


def test_a_run_folder_another_prune_took_meanwhile_is_older_than_every_other(root: Path) -> None:
    """Runs side by side prune at once: a folder listed, then removed by the other prune before its time is read,
    sorts last and is pruned (nothing to remove), never an error that would end `check` (a halt)."""
    (root / "runs" / "here").mkdir(parents=True)
    assert remote._mtime(root / "runs" / "here") > remote._mtime(root / "runs" / "gone") == float("-inf")


def test_check_copies_the_run_s_own_code_and_hashes_the_copies(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A training's train.py and fixed files, copied into RUN/code as they are checked: the next run's sync (another
    candidate's train.py) changes checkout/, never a run's own copy; the hashes are the copies'."""
    co = root / "checkout"
    (co / "train.py").write_text("print('A')\n")
    (co / "evaluate.py").write_text("print('E')\n")
    run = root / "runs" / "r1"
    assert remote.main(["check", "train.py", "evaluate.py", "--run", str(run), "--code=train.py",
                        "--code=evaluate.py"]) == 0
    got = _answer(capsys)["sha256"]
    (co / "train.py").write_text("print('B')\n")  # the next candidate's
    assert (run / "code" / "train.py").read_text() == "print('A')\n"
    import hashlib

    assert got == {"train.py": hashlib.sha256(b"print('A')\n").hexdigest(),
                   "evaluate.py": hashlib.sha256(b"print('E')\n").hexdigest()}


def test_data_missing_dirty_prepared_and_failed(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prepare = root / "checkout" / "prepare.py"
    prepare.write_text("import argparse, json, pathlib, sys\n"
                       "ap = argparse.ArgumentParser(); ap.add_argument('--out'); ap.add_argument('--scale')\n"
                       "ap.add_argument('--seed'); a = ap.parse_args()\n"
                       "if a.scale == 'bad': print('no such scale', file=sys.stderr); raise SystemExit(2)\n"
                       "out = pathlib.Path(a.out); out.mkdir(parents=True)\n"
                       "(out / 'x.txt').write_text(a.seed)\n"
                       "(out / 'manifest.json').write_text(json.dumps({'scale': a.scale}))\n")
    data = root / "data"
    assert remote.main(["data", str(data)]) == 0 and _answer(capsys) == {"state": "missing"}
    assert remote.main(["data", str(data), "--prepare", "prepare.py", "--scale", "bad", "--seed", "1"]) == 0
    failed = _answer(capsys)
    assert failed["state"] == "prepare failed" and failed["exit"] == 2 and "no such scale" in failed["tail"]
    assert remote.main(["data", str(data), "--prepare", "prepare.py", "--scale", "tiny", "--seed", "1"]) == 0
    digest, files = tree_hash(data)
    assert _answer(capsys) == {"state": "present", "hash": digest, "files": files}
    (root / "half").mkdir()
    (root / "half" / "x").write_text("x")
    assert remote.main(["data", str(root / "half"), "--prepare", "prepare.py"]) == 0
    assert _answer(capsys) == {"state": "dirty"}


def test_reap_ends_live_runs_of_this_checkout_only(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    ours = subprocess.Popen(sleeper, cwd=root / "checkout", start_new_session=True)
    other = subprocess.Popen(sleeper, cwd=elsewhere, start_new_session=True)  # a recycled id, say
    (root / "runs" / "d" / "code").mkdir(parents=True)
    own = subprocess.Popen(sleeper, cwd=root / "runs" / "d" / "code", start_new_session=True)
    try:
        for name, p in (("a", ours), ("b", other)):
            (root / "runs" / name).mkdir(parents=True)
            (root / "runs" / name / "run.pid").write_text(str(p.pid))
        (root / "runs" / "c").mkdir()
        (root / "runs" / "c" / "run.pid").write_text("not a number")
        (root / "runs" / "d" / "run.pid").write_text(str(own.pid))  # a training works in its own copy of the code
        assert remote.main(["reap", "--kill-after", "0.5"]) == 0
        assert _answer(capsys) == {"ended": [[ours.pid, "a"], [own.pid, "d"]]}
        ours.wait(timeout=10)
        own.wait(timeout=10)
        assert other.poll() is None  # another checkout's process is never touched
        assert not list((root / "runs").glob("*/run.pid"))
    finally:
        for p in (ours, other, own):
            if p.poll() is None:
                p.kill()


@pytest.mark.parametrize("asked, words", [
    ("{not json", "LOOPER_LIMITS is not JSON"),
    ('{"memory_max_bytes": "1G"}', "LOOPER_LIMITS: memory_max_bytes must be a whole number at least 0, got '1G'"),
    ('{"memory_max_bytes": 1024, "memory_limit": 5}', "LOOPER_LIMITS: unknown key(s) 'memory_limit'"),
])
def test_run_refuses_a_limits_request_it_cannot_read_and_runs_nothing(root: Path, capsys: pytest.CaptureFixture[str],
                                                                       asked: str, words: str) -> None:
    """Before, an unreadable LOOPER_LIMITS gave a run with no limits, and a bad value dropped that one limit:
    silently fewer limits than the daemon asked. Now nothing runs; ``refused`` says why and ``end`` hands it on."""
    run = root / "runs" / "refused"
    marker = root / "ran"
    code = remote.main(["run", str(run), f"--env=LOOPER_LIMITS={asked}", "--", sys.executable, "-c",
                        f"open({str(marker)!r}, 'w')"])
    assert code == remote.REFUSED_CODE == 70 and not marker.exists() and not (run / "run.pid").exists()
    assert (run / "status").read_text().strip() == "70"
    assert (run / "refused").read_text().startswith(f"looper.remote run refused the run: {words}")
    capsys.readouterr()

    def no_wait(seconds: float) -> None:
        raise AssertionError(f"end waited {seconds} s for the pid of a run that never started")

    with pytest.MonkeyPatch.context() as mp:  # the executor's own call: --wait-for-pid, which a refusal ends at once
        mp.setattr(remote.time, "sleep", no_wait)
        assert remote.main(["end", str(run), "--wait-for-pid", "--kill-after", "0.5"]) == 0
    assert _answer(capsys)["refused"].startswith(f"looper.remote run refused the run: {words}")
