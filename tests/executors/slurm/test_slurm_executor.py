"""The SLURM executor against a real single-node cluster (scripts/slurm_up.sh)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from looper.core.fault.failure import FailureEvidence, classify_failure
from looper.core.verdicts.verdict import Outcome, Status
from looper.executors.base import EvalJob, RunResult, TrainJob
from looper.executors.slurm.executor import SlurmExecutor

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _job(ws: Path, run: str = "r1", budget: float = 30, grace: float = 5, stall: float = 30) -> TrainJob:
    rd = ws / "runs" / run
    return TrainJob(checkout=ws / "checkout", out_dir=rd / "out", seed=7, budget_seconds=budget,
                    grace_seconds=grace, stall_seconds=stall, log_path=rd / "train.log")


def _evidence(r: RunResult) -> FailureEvidence:
    return FailureEvidence(exit_code=r.exit_code, signal=r.signal, timed_out=r.timed_out, stalled=r.stalled,
                           log_tail=r.log_tail, transport_exit_code=r.transport_exit_code)


def _in_background(fn: Callable[[], RunResult]) -> tuple[threading.Thread, list[RunResult]]:
    box: list[RunResult] = []
    t = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    t.start()
    return t, box


def test_train_as_batch_job_brings_back_weights_and_streams_log(
        workspace: Path, make_executor: Callable[..., SlurmExecutor],
        kit: SimpleNamespace) -> None:
    ex = make_executor()
    assert ex.preflight(False).status is Status.PASS
    lines: list[str] = []
    job = _job(workspace)
    r = ex.train(job, lines.append, None)
    assert r.clean_exit, r
    assert (job.out_dir / "weights.pt").stat().st_size == 1000
    assert '"seed": 7' in (job.out_dir / "train.json").read_text()
    assert lines[0].startswith("step 0/") and lines[-1] == "done"
    log = job.log_path.read_text()
    assert "slurm: submitted job" in log and "done" in log
    script = next((job.log_path.parent / "slurm").glob("*.sh")).read_text()
    assert f"#SBATCH --comment={ex.batch.comment}" in script and "#SBATCH --time=1" in script
    # evaluation is a batch job too, and METRICS.json lands where it was asked
    metrics = job.log_path.parent / "METRICS.json"
    metrics.write_text("stale")
    e = ex.evaluate(EvalJob(checkout=workspace / "checkout", weights=job.out_dir / "weights.pt",
                            metrics_path=metrics, log_path=job.log_path.parent / "eval.log",
                            timeout_seconds=30, stall_seconds=30), None, None)
    assert e.clean_exit, e
    assert '"weights_bytes": 1000' in metrics.read_text()


def test_over_budget_is_stopped_and_timed_out(workspace: Path, make_executor: Callable[..., SlurmExecutor],
        kit: SimpleNamespace) -> None:
    ex = make_executor()
    ex.extra_env["FIXTURE_SECONDS"] = "60"
    t0 = time.monotonic()
    r = ex.train(_job(workspace, budget=3, grace=0), None, None)
    took = time.monotonic() - t0
    assert r.timed_out and not r.clean_exit and r.transport_error == "", r
    assert took < 25, f"stopping an over-budget job took {took:.1f} s"
    assert not kit.our_jobs(ex), "the over-budget job is still in the queue"
    assert classify_failure(_evidence(r)).outcome is Outcome.CRASH


def test_stall_is_stopped(workspace: Path, make_executor: Callable[..., SlurmExecutor],
        kit: SimpleNamespace) -> None:
    ex = make_executor()
    (workspace / "checkout" / "train.py").write_text("import time\nprint('start', flush=True)\ntime.sleep(60)\n")
    r = ex.train(_job(workspace, stall=3), None, None)
    assert r.stalled and not r.timed_out and r.log_tail.startswith("start"), r


def test_cancelled_from_outside_is_requeued_then_succeeds(
        workspace: Path, make_executor: Callable[..., SlurmExecutor],
        kit: SimpleNamespace) -> None:
    ex = make_executor(requeue_limit=2)
    ex.extra_env["FIXTURE_SECONDS"] = "4"
    job = _job(workspace)
    t, box = _in_background(lambda: ex.train(job, None, None))
    first = kit.wait_for(lambda: [j for j, s in kit.our_jobs(ex) if s == "RUNNING"], 30, "the job to run")[0]
    subprocess.run(["scancel", first], check=True, timeout=30)
    t.join(60)
    r = box[0]
    assert r.clean_exit, r
    assert (job.out_dir / "weights.pt").is_file()
    log = job.log_path.read_text()
    assert f"slurm: job {first} CANCELLED by someone other than looper" in log
    assert log.count("slurm: submitted job") == 2


def test_requeues_exhausted_is_a_harness_error(workspace: Path, make_executor: Callable[..., SlurmExecutor],
        kit: SimpleNamespace) -> None:
    ex = make_executor(requeue_limit=1)
    ex.extra_env["FIXTURE_SECONDS"] = "20"
    t, box = _in_background(lambda: ex.train(_job(workspace), None, None))
    cancelled: set[str] = set()
    for _ in range(2):
        job_id = kit.wait_for(lambda: [j for j, s in kit.our_jobs(ex) if s == "RUNNING" and j not in cancelled], 30,
                          "a running job")[0]
        subprocess.run(["scancel", job_id], check=True, timeout=30)
        cancelled.add(job_id)
    t.join(60)
    r = box[0]
    assert r.transport_exit_code not in (None, 0) and "CANCELLED by someone other than looper" in r.transport_error
    assert "requeued 1 times" in r.transport_error, r.transport_error
    assert classify_failure(_evidence(r)).outcome is Outcome.ERROR


def test_never_starts_within_start_timeout(workspace: Path, make_executor: Callable[..., SlurmExecutor],
        kit: SimpleNamespace) -> None:
    # a job that asks for more memory than the node has would wait forever (held, never runs)
    ex = make_executor(requeue_limit=0, start_timeout=3, sbatch_extra=["--begin=now+3600"])
    r = ex.train(_job(workspace), None, None)
    assert "did not start within start_timeout" in r.transport_error, r
    assert not kit.our_jobs(ex)


def test_over_memory_is_crash_evidence(workspace: Path, make_executor: Callable[..., SlurmExecutor],
        kit: SimpleNamespace) -> None:
    ex = make_executor(sbatch_extra=["--mem=60M"])
    ex.extra_env.update(FIXTURE_SECONDS="0.2", FIXTURE_ALLOC_MB="600")
    r = ex.train(_job(workspace), None, None)
    assert not r.clean_exit and r.transport_error == "", r
    assert "slurm: OUT_OF_MEMORY" in r.log_tail, r.log_tail
    c = classify_failure(_evidence(r))
    assert c.outcome is Outcome.CRASH and c.kind == "oom", c


def test_reap_after_restart_cancels_own_jobs_only(
        workspace: Path, make_executor: Callable[..., SlurmExecutor],
        kit: SimpleNamespace) -> None:
    ex = make_executor(requeue_limit=0)
    ex.extra_env["FIXTURE_SECONDS"] = "60"
    other = subprocess.run(["sbatch", "--parsable", "--comment=looper:someoneelse", "--time=2",
                            "--output=/dev/null", "--wrap", "sleep 60"], capture_output=True, text=True,
                           check=True, timeout=30).stdout.strip()
    try:
        t, box = _in_background(lambda: ex.train(_job(workspace), None, None))
        job_id = kit.wait_for(lambda: [j for j, s in kit.our_jobs(ex) if s == "RUNNING"], 30, "the job to run")[0]
        restarted = make_executor()  # the daemon restarts: a new executor object for the same workspace
        ended = restarted.reap()
        assert len(ended) == 1 and job_id in ended[0], ended
        kit.wait_for(lambda: not kit.our_jobs(ex), 30, "the reaped job to leave the queue")
        state = subprocess.run(["squeue", "-h", "-j", other, "-o", "%T"], capture_output=True, text=True,
                               timeout=30).stdout.strip()
        assert state in ("PENDING", "RUNNING"), f"another workspace's job was touched: {state!r}"
        t.join(30)
        assert box and not box[0].clean_exit
    finally:
        subprocess.run(["scancel", other], capture_output=True, timeout=30)


def test_controller_stopped_mid_run_is_a_transport_error(
        workspace: Path, make_executor: Callable[..., SlurmExecutor],
        kit: SimpleNamespace) -> None:
    ex = make_executor(requeue_limit=1, unreachable_seconds=3, tool_timeout=5)
    ex.extra_env["FIXTURE_SECONDS"] = "30"
    t, box = _in_background(lambda: ex.train(_job(workspace), None, None))
    kit.wait_for(lambda: [j for j, s in kit.our_jobs(ex) if s == "RUNNING"], 30, "the job to run")
    pid = int(Path("/run/slurmctld.pid").read_text())
    subprocess.run(["kill", str(pid)], check=True)
    try:
        t.join(60)
        r = box[0]
        assert r.transport_exit_code not in (None, 0) and "controller unreachable" in r.transport_error, r
        assert classify_failure(_evidence(r)).outcome is Outcome.ERROR
        pre = ex.preflight(False)
        assert pre.status is Status.ERROR and "slurm" in " ".join(pre.blocking), pre
    finally:
        subprocess.run(["bash", str(kit.slurm_up)], capture_output=True, timeout=120, check=True)
    assert ex.preflight(False).status is Status.PASS
