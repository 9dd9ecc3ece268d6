"""A real single-node SLURM cluster for the SLURM executor tests.

``scripts/slurm_up.sh`` starts munge, slurmctld and slurmd and is
idempotent. When the cluster cannot be brought up (not root, no slurm, the script fails) the
tests FAIL with the reason and the apt line, unless the tier is skipped by name
(``LOOPER_SKIP_TIERS=slurm``; tests/tiers.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import tiers

from looper.executors.slurm.executor import SlurmExecutor

ROOT = Path(__file__).resolve().parents[3]
SLURM_UP = ROOT / "scripts" / "slurm_up.sh"

TRAIN_PY = """\
import json, os, sys, time, pathlib
out = pathlib.Path(os.environ["LOOPER_OUT"])
seconds = float(os.environ.get("FIXTURE_SECONDS", "1"))
steps = max(1, int(seconds / 0.2))
for i in range(steps):
    print(f"step {i}/{steps} loss={1.0 / (i + 1):.3f}", flush=True)
    time.sleep(0.2)
if os.environ.get("FIXTURE_ALLOC_MB"):
    hog = bytearray(int(os.environ["FIXTURE_ALLOC_MB"]) * 2**20)
    print("allocated", len(hog), flush=True)
    time.sleep(10)
(out / "weights.pt").write_bytes(b"w" * 1000)
(out / "train.json").write_text(json.dumps({"steps": steps, "seed": int(os.environ["LOOPER_SEED"]),
                                            "budget_seconds": int(os.environ["LOOPER_BUDGET_SECONDS"])}))
print("done", flush=True)
"""

EVALUATE_PY = """\
import argparse, json, pathlib
p = argparse.ArgumentParser()
p.add_argument("--weights"); p.add_argument("--data"); p.add_argument("--out"); p.add_argument("--device")
a = p.parse_args()
size = pathlib.Path(a.weights).stat().st_size
pathlib.Path(a.out).write_text(json.dumps({"schema": 1, "pages": 1, "weights_bytes": size}))
print("evaluated", size)
"""


def _fail_or_skip(msg: str, missing: list[str] | None = None) -> None:
    tiers.require("slurm", missing or [], msg)


def _cluster_answers() -> bool:
    if shutil.which("scontrol") is None:
        return False
    got = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30)
    return "is UP" in got.stdout


def start_cluster() -> None:
    """Run scripts/slurm_up.sh (idempotent); a clear failure when it cannot work here (a skip
    only when the user opted out of the tier)."""
    if "slurm" in tiers.skipped():
        tiers.require("slurm", [])
    if os.geteuid() != 0:
        if _cluster_answers():
            return
        _fail_or_skip("SLURM tests need root to start a single-node cluster with scripts/slurm_up.sh")
    absent = [t for t in ("slurmctld", "slurmd", "munged", "sbatch", "scontrol") if shutil.which(t) is None]
    if absent:
        _fail_or_skip("scripts/slurm_up.sh needs slurm-wlm and munge installed", absent)
    got = subprocess.run(["bash", str(SLURM_UP)], capture_output=True, text=True, timeout=600)
    if got.returncode != 0:
        _fail_or_skip(f"scripts/slurm_up.sh failed (exit {got.returncode}): {got.stderr.strip()[-800:]}")


@pytest.fixture(autouse=True)
def one_slurm_test_at_a_time() -> Iterator[None]:
    """``make test`` runs two pytest-xdist workers: the cluster has one node and its tests watch
    its queue, so a SLURM test waits for the other worker's to end (a lock file both take)."""
    import fcntl
    import tempfile

    with open(Path(tempfile.gettempdir()) / "looper-slurm-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    """The cluster is up; returns the node's partition name."""
    start_cluster()
    got = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    return got.stdout.split()[0].rstrip("*")


def our_jobs(ex: SlurmExecutor) -> list[tuple[str, str]]:
    """(job id, state) of this executor's workspace's jobs in the queue."""
    got = subprocess.run(["squeue", "-h", "-o", "%i|%k|%T"], capture_output=True, text=True, timeout=30)
    out = []
    for line in got.stdout.splitlines():
        bits = line.split("|")
        if len(bits) == 3 and bits[1] == ex.batch.comment:
            out.append((bits[0], bits[2]))
    return out


def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def workspace(tmp_path: Path, slurm_cluster: str) -> Iterator[Path]:
    """A workspace with a checkout holding the fixture train.py / evaluate.py; its jobs are
    cancelled afterwards whatever the test did."""
    ws = tmp_path / "ws"
    ck = ws / "checkout"
    ck.mkdir(parents=True)
    (ck / "train.py").write_text(TRAIN_PY)
    (ck / "evaluate.py").write_text(EVALUATE_PY)
    (ws / "data").mkdir()
    yield ws
    ex = SlurmExecutor(ws, {"kind": "slurm"})
    for job_id, _ in our_jobs(ex):
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)


@pytest.fixture
def make_executor(workspace: Path) -> Callable[..., SlurmExecutor]:
    def make(**section: Any) -> SlurmExecutor:
        fast = {k: section.pop(k) for k in ("poll", "kill_after", "unreachable_seconds", "tool_timeout")
                if k in section}
        fast.setdefault("poll", 0.3)
        fast.setdefault("kill_after", 3.0)
        return SlurmExecutor(workspace, {"kind": "slurm", **section}, **fast)

    return make


@pytest.fixture
def kit() -> SimpleNamespace:
    """Helpers for the tests (fixtures, so the test modules import nothing from here)."""
    return SimpleNamespace(our_jobs=our_jobs, wait_for=wait_for, slurm_up=SLURM_UP)
