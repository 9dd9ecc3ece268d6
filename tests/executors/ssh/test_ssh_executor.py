"""The SSH executor against a real sshd on 127.0.0.1 (the remote host is this machine): options,
preflight, train and evaluate, the fixed files and the data on the host.

Every test uses trivial fixture scripts: the executor must not care what they do. The GPU on the host:
test_ssh_executor_gpu.py; the remote process group ended (limits, cancel, sshd dying, reap):
test_ssh_executor_group.py; the run's [limits] on the host: test_ssh_executor_limits.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ssh_jobs import Make, _job

from looper.core.verdicts.verdict import Status
from looper.executors.base import EvalJob
from looper.executors.ssh.executor import NO_TOOL_CODE, SshExecutor
from looper.workspace.hashes import tree_hash

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


# -- options ---------------------------------------------------------------------------------------

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


# -- preflight -------------------------------------------------------------------------------------

def test_preflight_passes_and_reports_remote_facts(make_executor: Make, tmp_path: Path) -> None:
    v = make_executor().preflight(require_gpu=False)
    assert v.status is Status.PASS, v.blocking
    assert v.metrics["host"] == "looper-test" and v.metrics["disk_free_gb"] > 0
    assert v.metrics["python"].startswith("3.")
    assert v.metrics["remote_dir"] == str((tmp_path / "remote").resolve())
    assert v.metrics["sandbox"].startswith("bwrap")  # the host built the training sandbox once
    assert v.metrics["cores"] == len(os.sched_getaffinity(0))  # the host's cores (the host is this machine here)


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


# -- train and evaluate ----------------------------------------------------------------------------

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
    (code,) = remote.glob("runs/*-train-*/code")  # the run's own copy of train.py and the fixed files
    assert data == f"{remote}/data" and cwd == str(code)
    assert sorted(p.name for p in code.iterdir()) == ["evaluate.py", "prepare.py", "train.py"]
    assert (code / "train.py").read_text() == (checkout / "train.py").read_text()
    assert (job.out_dir / "weights.pt").stat().st_size == 1000
    assert json.loads((job.out_dir / "train.json").read_text())["steps"] == 3
    assert "done" in job.log_path.read_text()  # the log streamed back
    assert not list(remote.glob("runs/*/run.pid"))  # a finished run leaves no pid file
    assert (remote / "checkout" / "looper" / "workspace" / "hashes.py").is_file()  # the package went along


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


# -- fixed files changed on the host ---------------------------------------------------------------

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


# -- data ------------------------------------------------------------------------------------------

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
