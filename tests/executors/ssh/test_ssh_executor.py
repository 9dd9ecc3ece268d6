"""The SSH executor against a real sshd on 127.0.0.1 (the remote host is this machine).

Every test uses trivial fixture scripts: the executor must not care what they do.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import tiers

from looper.core.verdicts.verdict import Status
from looper.executors.base import EvalJob, RunResult, TrainJob
from looper.executors.ssh.executor import NO_TOOL_CODE, SshExecutor
from looper.proc import group_gone
from looper.workspace.hashes import tree_hash

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

Make = Callable[..., SshExecutor]


def _job(checkout: Path, tmp: Path, name: str = "run", budget: float = 30, grace: float = 5,
         stall: float = 30, device: str = "") -> TrainJob:
    return TrainJob(checkout=checkout, out_dir=tmp / name / "out", seed=7, budget_seconds=budget,
                    grace_seconds=grace, stall_seconds=stall, log_path=tmp / name / "train.log", device=device)


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


# -- options --------------------------------------------------------------------------------------

def test_ssh_argv_honours_the_users_config(make_executor: Make, tmp_path: Path, sshd) -> None:  # noqa: ANN001
    argv = make_executor().ssh_argv()
    joined = " ".join(argv)
    assert "BatchMode=yes" in joined
    assert "ConnectTimeout" not in joined  # the config sets ConnectTimeout 5: never overridden
    assert "ServerAliveInterval=15" in joined
    assert "ControlMaster=auto" in joined and "ControlPersist=300" in joined
    # with the user's own multiplexing, looper adds none of its own
    cfg = tmp_path / "own_mux"
    cfg.write_text(sshd.ssh_config.read_text().replace(
        "Host looper-test\n", f"Host looper-test\n  ControlMaster auto\n  ControlPath {tmp_path}/mine-%C\n"))
    ex = SshExecutor(tmp_path / "ws", {"host": "looper-test", "remote_dir": "/tmp/x",
                                        "ssh_options": [f"-F {cfg}", "ServerAliveInterval=2"]})
    joined2 = " ".join(ex.ssh_argv())
    assert "ControlPath=" not in joined2 and "ControlMaster" not in joined2
    assert "-o ServerAliveInterval=2" in joined2 and "ServerAliveInterval=15" not in joined2


def test_missing_host_or_remote_dir_is_a_config_error(tmp_path: Path) -> None:
    from looper.errors import ConfigError

    with pytest.raises(ConfigError, match="executor.host"):
        SshExecutor(tmp_path, {"host": "", "remote_dir": "/x"})
    with pytest.raises(ConfigError, match="executor.remote_dir"):
        SshExecutor(tmp_path, {"host": "h", "remote_dir": ""})


# -- preflight ------------------------------------------------------------------------------------

def test_preflight_passes_and_reports_remote_facts(make_executor: Make, tmp_path: Path) -> None:
    v = make_executor().preflight(require_gpu=False)
    assert v.status is Status.PASS, v.blocking
    assert v.metrics["host"] == "looper-test" and v.metrics["disk_free_gb"] > 0
    assert v.metrics["python"].startswith("3.")
    assert v.metrics["remote_dir"] == str((tmp_path / "remote").resolve())
    assert v.metrics["sandbox"].startswith("bwrap")  # the host built the training sandbox once


def test_preflight_fails_on_a_host_that_cannot_build_the_sandbox(make_executor: Make, tmp_path: Path) -> None:
    """A host whose PATH has no bwrap (the remote python is a wrapper that runs it with such a PATH):
    the night must not start there, and the error says which host and what to install."""
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    (bare / "rsync").symlink_to(shutil.which("rsync") or "/usr/bin/rsync")  # everything else the host needs
    wrapper = tmp_path / "python-without-bwrap"
    wrapper.write_text(f"#!/bin/sh\nPATH={bare} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    v = make_executor(python=str(wrapper)).preflight(require_gpu=False)
    assert v.status is Status.ERROR
    (line,) = [b for b in v.blocking if "sandbox" in b]
    assert line.startswith("train.py cannot run in its sandbox on looper-test: bubblewrap (bwrap) is not installed")
    assert "apt-get install" in line or "install it with" in line
    opted_out = make_executor(python=str(wrapper), sandbox="none").preflight(require_gpu=False)
    assert opted_out.status is Status.PASS, opted_out.blocking  # an explicit opt-out asks the host nothing
    assert "sandbox" not in opted_out.metrics


# The "remote" is this machine (sshd on 127.0.0.1): one test per machine condition, decided
# by nvidia-smi (tests/tiers.py), not by the probe under test.

@tiers.NEEDS_GPU
def test_preflight_require_gpu_names_the_remote_gpu(make_executor: Make) -> None:
    v = make_executor(require_gpu=True).preflight(require_gpu=True)
    gpu = v.metrics.get("gpu", {})
    assert v.status is Status.PASS, v.blocking
    assert gpu.get("ok") is True and gpu["name"], gpu


def test_train_gets_the_workspace_starting_checkpoint_on_the_host(make_executor: Make, checkout: Path,
                                                                  tmp_path: Path) -> None:
    """The workspace's pretrained/ folder goes along with train.py (checked by hash after the sync),
    and LOOPER_PRETRAINED_DIR names where it landed on the host."""
    pre = tmp_path / "ws" / "pretrained"
    pre.mkdir()
    (pre / "start.safetensors").write_bytes(b"weights as data " * 64)
    (checkout / "train.py").write_text(
        "import os, pathlib\n"
        "out = pathlib.Path(os.environ['LOOPER_OUT'])\n"
        "src = pathlib.Path(os.environ['LOOPER_PRETRAINED_DIR']) / 'start.safetensors'\n"
        "(out / 'seen').write_bytes(src.read_bytes())\n"
        "(out / 'weights.pt').write_bytes(b'w' * 10)\n"
        "(out / 'train.json').write_text('{\"steps\": 1}')\n")
    job = _job(checkout, tmp_path)
    r = make_executor().train(job, None, None)
    assert r.clean_exit, (r, r.log_tail)
    assert (job.out_dir / "seen").read_bytes() == b"weights as data " * 64
    remote = (tmp_path / "remote").resolve()
    assert (remote / "checkout" / "pretrained" / "start.safetensors").is_file()


@tiers.NEEDS_NO_GPU
def test_preflight_require_gpu_without_a_remote_gpu_is_an_error(make_executor: Make) -> None:
    v = make_executor(require_gpu=True).preflight(require_gpu=True)
    assert v.status is Status.ERROR
    assert not v.metrics.get("gpu", {}).get("ok")
    assert any("looper-test" in b and "GPU" in b for b in v.blocking), v.blocking


def _watch_the_night(ex: SshExecutor) -> list[dict]:
    assert ex.preflight(require_gpu=False).ok  # the host's folder and package, as the night has them by then
    watch = ex.watch_gpus({0})
    assert watch is not None
    time.sleep(2)  # the night
    return watch.stop()


@tiers.NEEDS_GPU
def test_the_night_s_gpu_is_watched_on_the_host_over_its_own_connection(make_executor: Make) -> None:
    figures = _watch_the_night(make_executor())
    assert [(g["index"], g["host"]) for g in figures] == [(0, "looper-test")]
    assert figures[0]["samples"] >= 2 and figures[0]["name"] and figures[0]["busy_pct"] is not None, figures


@tiers.NEEDS_NO_GPU
def test_the_night_s_gpu_watch_on_a_host_without_one_answers_why_from_the_host(make_executor: Make) -> None:
    """The ssh executor's night watch (looper/executors/nightgpu.py) is the host's own process, told to finish
    when the night ends: here its answer is NVML's own reason (not a transport's: it ran there and answered)."""
    figures = _watch_the_night(make_executor())
    assert [(g["index"], g["host"], g["samples"]) for g in figures] == [(0, "looper-test", 0)]
    assert "NVML" in figures[0]["problem"] and "the watch ended" not in figures[0]["problem"], figures


def test_a_host_whose_sessions_renumber_the_gpus_stops_the_gpu_preflight_naming_the_variable(make_executor: Make,
                                                                                           cuda1_host: str) -> None:
    """A host whose sessions set CUDA_VISIBLE_DEVICES=1 (a login's rc file; here the ssh client sends it): its runs get
    it (the host's sandbox passes it) and number the GPUs by PCI bus, so a run told cuda:0 trains on NVML's GPU 1
    while the preflight and the night's watch read GPU 0. The host says what its sessions get (``facts``); the
    preflight names it and checks nothing in a box. Where NVML sees one GPU there is no other to train on, and the
    GPU check in a run's box is what fails (cuda:0 is no GPU to torch there)."""
    ex = make_executor(host=cuda1_host)
    v = ex.preflight(require_gpu=True)
    assert ex.remote.ask("facts", what="the host's facts")["cuda_visible_devices"] == "1"
    words = (f"CUDA_VISIBLE_DEVICES=1 in the environment of {cuda1_host} renumbers the GPUs for the runs (their "
             "cuda:0 is NVML's GPU 1) but not for NVML")
    if (v.metrics.get("gpu") or {}).get("count") == 1:
        assert any("torch cannot use cuda:0" in b for b in v.blocking), v.blocking
        return
    assert any(b.startswith(words) for b in v.blocking) and "device_check" not in v.metrics, v.blocking
    plain = make_executor().preflight(require_gpu=True)  # the same host, its sessions without the variable
    assert not any("CUDA_VISIBLE_DEVICES" in b for b in plain.blocking), plain.blocking


def test_preflight_connection_refused_is_an_error(make_executor: Make) -> None:
    v = make_executor(host="looper-closed").preflight(require_gpu=False)
    assert v.status is Status.ERROR
    assert "connection refused" in v.blocking[0] and "looper-closed" in v.blocking[0]


def test_preflight_authentication_failure_is_an_error(make_executor: Make) -> None:
    v = make_executor(host="looper-badkey").preflight(require_gpu=False)
    assert v.status is Status.ERROR and "authentication to looper-badkey failed" in v.blocking[0]


def test_train_on_unreachable_host_is_a_transport_fault(make_executor: Make, checkout: Path,
                                                        tmp_path: Path) -> None:
    r = make_executor(host="looper-closed").train(_job(checkout, tmp_path), None, None)
    assert r.exit_code is None and r.transport_exit_code not in (None, 0)
    assert "connection refused" in r.transport_error and not r.clean_exit


# -- train and evaluate ------------------------------------------------------------------------------

def test_train_runs_remotely_and_brings_evidence_back(make_executor: Make, checkout: Path,
                                                      tmp_path: Path) -> None:
    ex = make_executor()
    lines: list[str] = []
    job = _job(checkout, tmp_path, budget=42)
    r = ex.train(job, lines.append, None)
    assert r.clean_exit, (r, r.log_tail)
    remote = (tmp_path / "remote").resolve()
    env_line = next(ln for ln in lines if ln.startswith("env "))
    budget, seed, data, device, cwd = env_line.split()[1:]
    assert (budget, seed, device) == ("42", "7", "cpu")
    assert data == f"{remote}/data" and cwd == f"{remote}/checkout"
    assert (job.out_dir / "weights.pt").stat().st_size == 1000
    assert json.loads((job.out_dir / "train.json").read_text())["steps"] == 3
    assert "done" in job.log_path.read_text()  # the log streamed back
    assert not list(remote.glob("runs/*/run.pid"))  # a finished run leaves no pid file
    assert (remote / "checkout" / "looper" / "workspace" / "hashes.py").is_file()  # the package went along


@tiers.NEEDS_NO_GPU
def test_train_gpu_sampling_reports_without_gpu(make_executor: Make, checkout: Path, tmp_path: Path) -> None:
    r = make_executor().train(_job(checkout, tmp_path, device="cuda:0"), None, None)
    assert r.clean_exit
    assert r.gpu.get("lost") is False and r.gpu.get("available") is False
    assert r.gpu.get("problem"), r.gpu  # no GPU here: says why, never "lost"


@tiers.NEEDS_GPU
def test_train_gpu_sampling_samples_the_remote_gpu(make_executor: Make, checkout: Path, tmp_path: Path) -> None:
    r = make_executor().train(_job(checkout, tmp_path, device="cuda:0"), None, None)
    assert r.clean_exit
    assert r.gpu.get("available") is True and r.gpu.get("lost") is False, r.gpu


@pytest.mark.parametrize("body,exit_code,sig", [
    ("raise SystemExit(3)\n", 3, None),
    ("raise SystemExit(255)\n", 255, None),  # a real 255 from train.py is not a transport fault
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", None, signal.SIGKILL),
])
def test_train_exit_status_is_reported_like_a_local_run(make_executor: Make, checkout: Path, tmp_path: Path,
                                                        body: str, exit_code: int | None, sig: int | None) -> None:
    (checkout / "train.py").write_text("print('starting', flush=True)\n" + body)
    r = make_executor().train(_job(checkout, tmp_path), None, None)
    assert (r.exit_code, r.signal) == (exit_code, sig), r
    assert r.transport_exit_code is None and r.transport_error == ""


def test_evaluate_reuses_remote_weights_and_fetches_metrics(make_executor: Make, checkout: Path,
                                                            tmp_path: Path) -> None:
    ex = make_executor()
    job = _job(checkout, tmp_path)
    assert ex.train(job, None, None).clean_exit
    metrics = tmp_path / "eval" / "METRICS.json"
    metrics.parent.mkdir()
    ej = EvalJob(checkout=checkout, weights=job.out_dir / "weights.pt", metrics_path=metrics,
                 log_path=tmp_path / "eval" / "eval.log", timeout_seconds=30, stall_seconds=30)
    r = ex.evaluate(ej, None, None)
    assert r.clean_exit, r
    m = json.loads(metrics.read_text())
    assert m["weights_bytes"] == 1000 and "-train-" in m["weights"]  # no upload: training's copy
    # weights that changed locally are uploaded, not confused with the remote copy
    (job.out_dir / "weights.pt").write_bytes(b"X" * 1234)
    r2 = ex.evaluate(ej, None, None)
    m2 = json.loads(metrics.read_text())
    assert r2.clean_exit and m2["weights_bytes"] == 1234 and "-eval-" in m2["weights"]


def test_evaluate_deletes_stale_metrics_when_nothing_is_written(make_executor: Make, checkout: Path,
                                                                 tmp_path: Path) -> None:
    ex = make_executor()
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"w")
    metrics = tmp_path / "METRICS.json"
    metrics.write_text('{"stale": true}')
    ej = EvalJob(checkout=checkout, weights=weights, metrics_path=metrics, log_path=tmp_path / "e.log",
                 timeout_seconds=30, stall_seconds=30, device="write-nothing")
    r = ex.evaluate(ej, None, None)
    assert r.exit_code == 0 and not metrics.exists()


# -- limits: the REMOTE process group must die ---------------------------------------------------------

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


# -- transport faults ------------------------------------------------------------------------------------

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


def test_fixed_file_changed_on_remote_is_an_error(make_executor: Make, checkout: Path, tmp_path: Path) -> None:
    ex = make_executor()
    assert ex.sync(checkout).ok
    remote_eval = (tmp_path / "remote" / "checkout" / "evaluate.py").resolve()
    st = remote_eval.stat()
    text = remote_eval.read_text()
    # same size, same mtime: rsync's quick check skips it, the hash check must not
    remote_eval.write_text(text.replace("evaluated", "EVALUATED"))
    os.utime(remote_eval, ns=(st.st_atime_ns, st.st_mtime_ns))
    v = ex.sync(checkout)
    assert v.status is Status.ERROR and "fixed file evaluate.py on looper-test differs" in v.blocking[0]
    r = ex.train(_job(checkout, tmp_path), None, None)
    assert r.exit_code is None and r.transport_exit_code == NO_TOOL_CODE
    assert "fixed file evaluate.py" in r.transport_error and not r.clean_exit


def test_scoring_module_changed_on_remote_is_an_error(make_executor: Make, checkout: Path, tmp_path: Path) -> None:
    """The remote package's matching rules decide a score as much as evaluate.py: hash-checked too."""
    ex = make_executor()
    assert ex.sync(checkout).ok
    remote_metrics = (tmp_path / "remote" / "checkout" / "looper" / "core" / "scoring" / "metrics.py").resolve()
    st = remote_metrics.stat()
    text = remote_metrics.read_text()
    assert "IOU" in text
    remote_metrics.write_text(text.replace("IOU", "IoU", 1))  # same size, same mtime: rsync skips it
    os.utime(remote_metrics, ns=(st.st_atime_ns, st.st_mtime_ns))
    v = ex.sync(checkout)
    assert v.status is Status.ERROR
    assert "scoring module looper/core/scoring/metrics.py on looper-test differs" in " ".join(v.blocking)


# -- data ------------------------------------------------------------------------------------------------

def test_data_prepared_once_remotely_and_hash_matches_local(make_executor: Make, checkout: Path,
                                                            tmp_path: Path) -> None:
    ex = make_executor()
    remote = (tmp_path / "remote").resolve()
    v1 = ex.ensure_data(checkout / "prepare.py", "data", "tiny", 3)
    assert v1.ok, v1.blocking
    v2 = ex.ensure_data(checkout / "prepare.py", "data", "tiny", 3)
    assert v2.ok and v2.metrics["hash"] == v1.metrics["hash"]
    assert (remote / "prepare_calls.log").read_text().count("called") == 1  # prepared once
    local = tmp_path / "local_data"
    subprocess.run([sys.executable, str(checkout / "prepare.py"), "--out", str(local), "--scale", "tiny",
                    "--seed", "3"], check=True, capture_output=True)
    digest, files = tree_hash(local)
    assert v1.metrics["hash"] == digest and v1.metrics["files"] == files == 4
    # a change on the remote shows in the recomputed hash
    (remote / "data" / "tiles" / "t0.txt").write_text("tampered")
    assert ex.data_hash("data").metrics["hash"] != digest


def test_the_host_makes_the_label_index_once_and_keeps_it(make_executor: Make, checkout: Path, tmp_path: Path,
                                                          tiny_data: Path) -> None:
    """The data step on the host makes the data set's label index there (looper/data/labelindex.py, by the
    runs' own interpreter, as the local and SLURM executors do), a second night keeps it, the hash is unchanged."""
    remote = (tmp_path / "remote").resolve()
    remote.mkdir()
    shutil.copytree(tiny_data, remote / "data", ignore=shutil.ignore_patterns("*.cache"))
    ex = make_executor()
    v1 = ex.ensure_data(checkout / "prepare.py", "data", "tiny", 0)
    assert v1.ok, v1.blocking
    first = v1.metrics["label_index"]
    assert "split=train tiles=" in first and "index=made" in first and "split=val" in first, first
    assert (remote / "data" / "tiles" / "train" / "labels.cache").is_file()
    v2 = ex.ensure_data(checkout / "prepare.py", "data", "tiny", 0)
    assert v2.metrics["hash"] == v1.metrics["hash"] and "index=kept" in v2.metrics["label_index"]
    assert "index=made" not in v2.metrics["label_index"]
    assert not (remote / "prepare_calls.log").exists()  # present: not prepared again
    assert "label_index" not in ex.data_hash("data").metrics  # the hash alone does not touch the index


def test_data_hash_missing_and_dirty_folder_are_errors(make_executor: Make, checkout: Path, tmp_path: Path) -> None:
    ex = make_executor()
    v = ex.data_hash("nodata")
    assert v.status is Status.ERROR and "manifest.json does not exist" in v.blocking[0]
    dirty = tmp_path / "remote" / "half"
    dirty.mkdir(parents=True)
    (dirty / "x").write_text("x")
    v2 = ex.ensure_data(checkout / "prepare.py", "half", "tiny", 0)
    assert v2.status is Status.ERROR and "no manifest.json" in v2.blocking[0]


def test_a_sparse_or_outsized_out_is_refused_unfetched(make_executor: Make, checkout: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39, finding 7: the host measures out/ before rsync fetches it; a 1 TB sparse file (a few
    blocks on its disk, 1 TB on ours) or more than [limits] out_max_bytes is the run's limit, nothing
    comes back; an honest out/ still arrives whole. The run's own limits are not sent to the host here
    (``RLIMIT_FSIZE`` there would stop both writes first): the fetch bound is the line that holds where
    they do not apply."""
    from looper.core.run.limits import Caps
    from looper.executors import limits

    monkeypatch.setattr(limits, "request", lambda: {})
    before = limits.current()
    limits._SETTINGS[0] = limits.Settings(Caps(out_max_bytes=1 << 20, out_max_files=100))
    try:
        (checkout / "train.py").write_text(
            "import os\nout = os.environ['LOOPER_OUT']\n"
            "with open(os.path.join(out, 'weights.pt'), 'wb') as f:\n"
            "    f.truncate(1 << 40)\n")  # 1 TB on paper
        r = make_executor().train(_job(checkout, tmp_path, name="sparse"), None, None)
        assert "sparse file(s), refused unfetched: weights.pt" in r.limit and not r.clean_exit
        assert not (tmp_path / "sparse" / "out" / "weights.pt").exists()
        (checkout / "train.py").write_text(
            "import os\nout = os.environ['LOOPER_OUT']\n"
            "open(os.path.join(out, 'weights.pt'), 'wb').write(os.urandom(2 << 20))\n")
        r = make_executor().train(_job(checkout, tmp_path, name="big"), None, None)
        assert "over [limits] out_max_bytes = 1048576: refused unfetched" in r.limit
        assert not (tmp_path / "big" / "out" / "weights.pt").exists()
        (checkout / "train.py").write_text(
            "import os\nout = os.environ['LOOPER_OUT']\n"
            "open(os.path.join(out, 'weights.pt'), 'wb').write(b'w' * 1000)\n")
        r = make_executor().train(_job(checkout, tmp_path, name="fine"), None, None)
        assert r.clean_exit and r.limit == "", (r, r.log_tail)
        assert (tmp_path / "fine" / "out" / "weights.pt").stat().st_size == 1000
    finally:
        limits._SETTINGS[0] = before


def test_the_runs_limits_apply_on_the_host_and_name_what_was_hit(make_executor: Make, checkout: Path,
                                                                  tmp_path: Path) -> None:
    """Issue 39 on an ssh host: ``looper.remote run`` applies the daemon's [limits] there (oom_score_adj,
    RLIMIT_DATA, the sandbox's /tmp size) and ``end`` hands back what it saw; a 1 GiB allocation under
    256 MiB is the limit named."""
    from looper.core.run.limits import Caps
    from looper.executors import limits
    from looper.night.measure import limit_hit

    before = limits.current()
    limits._SETTINGS[0] = limits.Settings(Caps(memory_max_bytes=256 << 20, pids_max=64, tmp_max_bytes=4 << 20,
                                               out_max_bytes=8 << 20, out_max_files=100))
    try:
        (checkout / "train.py").write_text(
            "import os, resource, shutil, json\nout = os.environ['LOOPER_OUT']\n"
            "facts = {'adj': open('/proc/self/oom_score_adj').read().strip(),\n"
            "         'data': resource.getrlimit(resource.RLIMIT_DATA)[0], 'tmp': shutil.disk_usage('/tmp').total}\n"
            "open(os.path.join(out, 'facts.json'), 'w').write(json.dumps(facts))\n"
            "hog = bytearray(1 << 30)\n")
        job = _job(checkout, tmp_path, name="limited")
        r = make_executor().train(job, None, None)
        assert not r.clean_exit and "MemoryError" in r.log_tail and r.seen, r
        assert "out of memory at [limits] memory_max_bytes = 268435456" in limit_hit(r)
        facts = json.loads((job.out_dir / "facts.json").read_text())
        assert facts == {"adj": "1000", "data": 256 << 20, "tmp": 4 << 20}, facts
    finally:
        limits._SETTINGS[0] = before


def test_limits_left_at_0_are_the_host_s_own_and_the_result_says_so(make_executor: Make, checkout: Path,
                                                                      tmp_path: Path) -> None:
    """The daemon's machine (a laptop, often) says nothing of the host's memory: the [limits] left at 0 are derived
    there, from the host's own memory, cores and pid_max (looper.core.run.limits.on_host), and ``end`` hands back
    what the run ran under, so that a limit hit names the host's figure. Here the daemon asks 256 MiB as a derived
    figure; the run on the host gets 75 % of the host's memory instead, and its 1 GiB allocation succeeds."""
    from looper.core.run.limits import Caps, derived
    from looper.executors import limits

    before = limits.current()
    limits._SETTINGS[0] = limits.Settings(Caps(memory_max_bytes=256 << 20, pids_max=64, tmp_max_bytes=4 << 20,
                                               out_max_bytes=8 << 20, out_max_files=100),
                                          derived=("memory_max_bytes",))
    try:
        (checkout / "train.py").write_text(
            "import os, resource, json\nout = os.environ['LOOPER_OUT']\n"
            "hog = bytearray(1 << 30)\n"
            "open(os.path.join(out, 'facts.json'), 'w').write(json.dumps(resource.getrlimit(resource.RLIMIT_DATA)[0]))\n")
        job = _job(checkout, tmp_path, name="host-derived")
        r = make_executor().train(job, None, None)
        assert r.clean_exit, (r, r.log_tail)
        m = limits.machine()  # the host is this machine here
        host = derived(m["memory"], m["cores"], m["pid_max"])["memory_max_bytes"]
        assert json.loads((job.out_dir / "facts.json").read_text()) == host
        assert (r.caps["memory_max_bytes"], tuple(r.caps["on_host"]), r.caps["pids_max"]) == (host, ("memory_max_bytes",), 64)
        from looper.night.measure import limit_hit

        failed = dataclasses.replace(r, exit_code=1, log_tail="Traceback\nMemoryError")  # had it hit it there:
        assert limit_hit(failed) == (f"train.py ran out of memory at [limits] memory_max_bytes = {host}, its share of "
                                     "75 % of the ssh host's memory (the key is 0: the host derives it) (MemoryError)")
    finally:
        limits._SETTINGS[0] = before


@pytest.mark.parametrize("limited", [True, False], ids=["run-limits", "no-run-limits"])
@pytest.mark.parametrize("runs", [1, 2])
def test_the_workers_runs_at_a_time_on_the_host_each_get_a_share_of_its_cores(make_executor: Make, checkout: Path,
                                                                             tmp_path: Path, runs: int,
                                                                             limited: bool) -> None:
    """Two workers on one ssh host ran each run on every core of it (the daemon sets threads for its own machine
    only): the host now gives each run its share of its own cores (looper.core.run.cores.host_threads), with
    run limits and without (``[limits] run_limits = false``: the count travels alone, and no limit is set)."""
    from looper.core.run.limits import Caps
    from looper.executors import limits

    before = limits.current()
    limits._SETTINGS[0] = limits.Settings(Caps(pids_max=512) if limited else Caps(), runs=runs)
    try:
        (checkout / "train.py").write_text(
            "import os, json\nout = os.environ['LOOPER_OUT']\nnames = ('LOOPER_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS')\n"
            "open(os.path.join(out, 'threads.json'), 'w').write(json.dumps([os.environ.get(k) for k in names]))\n")
        job = _job(checkout, tmp_path, name=f"threads-{runs}")
        r = make_executor().train(job, None, None)
        assert r.clean_exit, (r, r.log_tail)
        seen = json.loads((job.out_dir / "threads.json").read_text())
        share = str(max(1, (os.cpu_count() or 1) // 2))  # the host is this machine here
        assert seen[0] == (share if runs == 2 else None) and (runs == 1 or seen == [share] * 3), seen
        assert bool(r.caps) == limited, r.caps  # no limits asked: none set on the host, the share all the same
    finally:
        limits._SETTINGS[0] = before


def test_a_limits_request_the_host_cannot_read_is_a_harness_error_and_nothing_runs(make_executor: Make, checkout: Path,
                                                                                    tmp_path: Path) -> None:
    """The daemon writes LOOPER_LIMITS itself: one the host cannot read (here ``runs`` 0) is a harness bug. The host
    runs nothing (never the run with fewer limits than asked, as it did before) and the result is a transport
    fault in the host's words, which the failure classification calls a harness error, never the candidate's."""
    from looper.core.fault.failure import FailureEvidence, classify_failure
    from looper.core.run.limits import Caps
    from looper.core.verdicts.verdict import Outcome
    from looper.executors import limits

    before = limits.current()
    limits._SETTINGS[0] = limits.Settings(Caps(memory_max_bytes=256 << 20, pids_max=64), runs=0)
    try:
        (checkout / "train.py").write_text("import os\nopen(os.path.join(os.environ['LOOPER_OUT'], 'ran'), 'w')\n")
        job = _job(checkout, tmp_path, name="refused")
        r = make_executor().train(job, None, None)
        assert not (job.out_dir / "ran").exists()
        assert r.transport_exit_code == -1 and not r.clean_exit and r.exit_code is None
        assert r.transport_error.endswith("looper.remote run refused the run: LOOPER_LIMITS: runs must be a whole "
                                          "number at least 1, got 0"), r.transport_error
        verdict = classify_failure(FailureEvidence(exit_code=r.exit_code, log_tail=r.log_tail,
                                           transport_exit_code=r.transport_exit_code))
        assert verdict.outcome is Outcome.ERROR and verdict.reason.startswith("harness error"), verdict
    finally:
        limits._SETTINGS[0] = before


def test_the_gpu_check_runs_on_the_host_as_a_run_runs_there_and_names_the_part_that_breaks_it(
        make_executor: Make) -> None:
    """The preflight's GPU check (looper/executors/devicecheck.py) on an ssh host: torch on the device in the host's
    sandbox under the limits the daemon asks for, judged here. On this CPU host the device is the CPU; a memory
    limit torch cannot start under is named, with its key; a request the host cannot read is refused."""
    from looper.core.run.limits import Caps
    from looper.executors import limits

    before = limits.current()
    ex = make_executor()
    host = ex.host
    assert ex.preflight(require_gpu=False).ok  # the host's folder and package, as a night's first preflight makes
    try:
        limits._SETTINGS[0] = limits.Settings(Caps(memory_max_bytes=4 << 30, pids_max=512), runs=1)
        assert ex.device_check("cpu") == (f"torch on cpu in a run's box on {host}: ok (box)", "")
        limits._SETTINGS[0] = limits.Settings(Caps(memory_max_bytes=200 << 20), runs=1)
        did, problem = ex.device_check("cpu")
        assert did == f"torch on cpu in a run's box on {host}: failed (box, no memory limit)"
        assert problem.startswith(f"on {host}: torch cannot use cpu in a run's box (exit ")
        assert "without the run's memory limit it can" in problem and "memory_max_bytes = 209715200" in problem
        limits._SETTINGS[0] = limits.Settings(Caps(memory_max_bytes=200 << 20), runs=0)
        did, problem = ex.device_check("cpu")
        assert did.endswith("not checked") and "refused the check: LOOPER_LIMITS: runs must be" in problem
    finally:
        limits._SETTINGS[0] = before
    assert list(Path(ex.remote.root()).joinpath("runs").glob("check-device-*")) == []  # removed on the host
