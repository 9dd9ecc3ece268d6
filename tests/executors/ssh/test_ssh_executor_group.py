"""The SSH executor against a real sshd on 127.0.0.1: the REMOTE process group must die, whether the
budget, a stall or a cancel ends the run, or sshd dies under it, or the daemon that started it did
(reap).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from ssh_jobs import Make, _job

from looper.core.verdicts.verdict import Status
from looper.executors.base import RunResult
from looper.proc import group_gone

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _pgrep(pattern: str) -> list[int]:
    got = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(p) for p in got.stdout.split()]


def _write_pgid_then(body: str, marker: str) -> str:
    """A train.py that records its process group and starts a marked child, then runs ``body``."""
    return (
        "import os, pathlib, signal, subprocess, sys, time\n"
        "out = pathlib.Path(os.environ['LOOPER_OUT'])\n"
        "(out / 'pgid').write_text(str(os.getpgid(0)))\n"
        f"subprocess.Popen(['sleep', '{marker}'])\n"
        + body
    )


def _marker() -> str:
    return f"1000.{uuid.uuid4().int % 10**9}"


def _remote_pgids(remote: Path) -> list[int]:
    out = []
    for f in remote.glob("runs/*/out/pgid"):
        out.append(int(f.read_text()))
    return out


# -- limits and cancel -----------------------------------------------------------------------------

def test_budget_exceeded_kills_the_remote_process_group(make_executor: Make, checkout: Path,
                                                        tmp_path: Path) -> None:
    marker = _marker()
    # ignores SIGTERM: only the SIGKILL that follows can end it
    (checkout / "train.py").write_text(_write_pgid_then(
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "while True:\n    print('tick', flush=True)\n    time.sleep(0.2)\n", marker))
    job = _job(checkout, tmp_path, budget=1, grace=0.5)
    t0 = time.monotonic()
    r = make_executor(sandbox="none", kill_after=1.0).train(job, None, None)
    assert r.timed_out and not r.clean_exit and r.transport_error == "", r
    assert time.monotonic() - t0 < 20
    pgid = int((job.out_dir / "pgid").read_text())
    assert group_gone(pgid), f"remote process group {pgid} survived the budget"
    assert _pgrep(f"sleep {marker}") == []
    assert "remote process group ended (killed)" in r.log_tail


def test_stall_kills_the_remote_process_group(make_executor: Make, checkout: Path, tmp_path: Path) -> None:
    marker = _marker()
    (checkout / "train.py").write_text(_write_pgid_then("print('start', flush=True)\ntime.sleep(600)\n",
                                                        marker))
    job = _job(checkout, tmp_path, budget=60, stall=1.5)
    r = make_executor(sandbox="none").train(job, None, None)
    assert r.stalled and not r.timed_out, r
    pgid = int((job.out_dir / "pgid").read_text())
    assert group_gone(pgid) and _pgrep(f"sleep {marker}") == []


def test_cancel_kills_the_remote_process_group(make_executor: Make, checkout: Path, tmp_path: Path) -> None:
    marker = _marker()
    (checkout / "train.py").write_text(_write_pgid_then(
        "while True:\n    print('tick', flush=True)\n    time.sleep(0.2)\n", marker))
    job = _job(checkout, tmp_path)
    cancel = threading.Event()

    def on_line(line: str) -> None:
        if line == "tick":  # the remote run is up: cancel it
            cancel.set()

    r = make_executor(sandbox="none").train(job, on_line, cancel)
    assert r.cancelled and not r.clean_exit
    assert group_gone(int((job.out_dir / "pgid").read_text())) and _pgrep(f"sleep {marker}") == []


# -- transport faults and reap ---------------------------------------------------------------------

def _wait_for(pred: Callable[[], bool], within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_sshd_dying_mid_run_is_a_transport_error_then_reap_ends_the_orphan(
        make_executor: Make, checkout: Path, tmp_path: Path, sshd) -> None:  # noqa: ANN001
    marker = _marker()
    (checkout / "train.py").write_text(_write_pgid_then("print('started', flush=True)\ntime.sleep(600)\n",
                                                        marker))
    ex = make_executor(sandbox="none")
    job = _job(checkout, tmp_path, budget=120, stall=120)
    box: list[RunResult] = []
    th = threading.Thread(target=lambda: box.append(ex.train(job, None, None)))
    th.start()
    remote = (tmp_path / "remote").resolve()
    _wait_for(lambda: bool(_remote_pgids(remote)) and "started" in
              (job.log_path.read_text() if job.log_path.exists() else ""))
    pgid = _remote_pgids(remote)[0]
    sshd.kill_all()
    th.join(timeout=60)
    assert box, "train() did not return after the connection dropped"
    r = box[0]
    assert r.transport_exit_code == 255 and r.exit_code != 0 and not r.clean_exit, r
    assert "dropped" in r.transport_error and "looper-test" in r.transport_error
    assert "reconnecting failed" in r.transport_error
    # the host is gone: preflight says so
    v = ex.preflight(require_gpu=False)
    assert v.status is Status.ERROR and "connection refused" in " ".join(v.blocking)
    # the remote job outlived its session; once sshd is back, a new executor ends it
    os.killpg(pgid, 0)
    sshd.start()
    ended = make_executor(sandbox="none").reap()
    assert len(ended) == 1 and f"process group {pgid}" in ended[0], ended
    assert group_gone(pgid) and _pgrep(f"sleep {marker}") == []
    assert make_executor(sandbox="none").reap() == []  # nothing twice


def test_reap_ends_a_run_a_dead_daemon_left_behind(make_executor: Make, checkout: Path, tmp_path: Path,
                                                   sshd) -> None:  # noqa: ANN001
    marker = _marker()
    (checkout / "train.py").write_text(_write_pgid_then("print('started', flush=True)\ntime.sleep(600)\n",
                                                        marker))
    remote = (tmp_path / "remote").resolve()
    daemon = (
        "import sys\nfrom pathlib import Path\n"
        "from looper.executors.ssh.executor import SshExecutor\n"
        "from looper.executors.base import TrainJob\n"
        f"ex = SshExecutor(Path({str(tmp_path / 'ws')!r}), {{'sandbox': 'none', 'host': 'looper-test', 'remote_dir': {str(remote)!r},"
        f" 'python': sys.executable, 'ssh_options': ['-F {sshd.ssh_config}']}})\n"
        f"ex.train(TrainJob(Path({str(checkout)!r}), Path({str(tmp_path / 'd' / 'out')!r}), 0, 120, 5, 120,"
        f" Path({str(tmp_path / 'd' / 'log')!r})), None, None)\n")
    p = subprocess.Popen([sys.executable, "-c", daemon], start_new_session=True)
    try:
        _wait_for(lambda: bool(list(remote.glob("runs/*/out/pgid"))) and bool(list(remote.glob("runs/*/run.pid"))))
        pgid = _remote_pgids(remote)[0]
        # the daemon dies hard, and its ssh client with it
        kids = [p.pid, *_descendants(p.pid)]
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
    time.sleep(0.5)
    os.killpg(pgid, 0)  # still alive on the "remote" side
    ended = make_executor(sandbox="none").reap()
    assert len(ended) == 1 and "left behind on looper-test" in ended[0] and str(pgid) in ended[0]
    assert group_gone(pgid) and _pgrep(f"sleep {marker}") == []
    assert not list(remote.glob("runs/*/run.pid"))


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        got = subprocess.run(["pgrep", "-P", str(todo.pop())], capture_output=True, text=True)
        kids = [int(k) for k in got.stdout.split()]
        out += kids
        todo += kids
    return out
