"""Run training and evaluation as SLURM batch jobs, with the local supervisor in charge.

A shared filesystem is assumed: the workspace (checkouts, run folders, the data folder) has
the same path on the submit host (where the daemon runs) and on the compute nodes. Each
training or evaluation run is one ``sbatch --parsable`` of a generated script under the run
folder's ``slurm/`` subfolder; the script ``cd``s into the checkout and runs ``train.py`` (or
``evaluate.py``) with the same ``LOOPER_*`` environment as :class:`LocalExecutor`. The job's
``--output`` file is tailed here: every line goes to the run's log and ``on_line``; the
budget (from the moment the job is RUNNING), the stall rule (no growth of the output file
for ``stall_seconds``) and cancellation are enforced from here with ``scancel`` (then
``scancel --signal=KILL`` after ``kill_after`` seconds).

The scheduler's own verdict decides what happened (``scontrol show job -o ID``: JobState,
ExitCode, Reason; sacct is not needed):

- COMPLETED, FAILED with ExitCode ``n:0``, a signal that ended the job's own processes,
  OUT_OF_MEMORY: the change's doing, reported as the run's exit code / signal. An out of
  memory job gets the line ``slurm: OUT_OF_MEMORY ...`` appended to ``log_tail`` so the core
  classifies it as an out of memory crash.
- NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE, REVOKED, CANCELLED by anyone but looper, a job
  still pending after ``start_timeout``, a job launch failure, and a controller that does not
  answer (squeue or sbatch failing to connect): harness faults. The job is resubmitted up to
  ``requeue_limit`` times; after that the result carries ``transport_exit_code`` and
  ``transport_error`` in words ("slurm: job 12 NODE_FAIL, requeued 2 times") and the core
  calls it a harness error, never a crash of train.py.

:meth:`SlurmExecutor.reap` finds this workspace's jobs (``--comment=looper:<workspace hash>``
or the ``looper-<short hash>-`` name prefix) in ``squeue`` and cancels them.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import looper.executors.evaluator as evaluator
import looper.executors.limits as run_limits
import looper.executors.sandbox as sandbox
from looper import proc
from looper.core.verdicts.verdict import Verdict
from looper.errors import ConfigError
from looper.executors.base import EvalJob, LineSink, RunResult, TrainJob
from looper.executors.common import (
    NO_TOOL_CODE,
    DataFolder,
    child_env,
    eval_command,
    get,
    hash_local_data,
    last_lines,
    local_preflight,
    prepare_local_data,
    pretrained_dir,
    sandboxed_eval_argv,
    train_vars,
)
from looper.executors.sandbox import NODE_GPU_DEVICES, SandboxPolicy
from looper.executors.slurm.client import TOOLS, Attempt, SlurmClient, SlurmFault, pump_output
from looper.executors.slurm.scheduler import (
    ACTIVE_STATES,
    WAITING_STATES,
    BatchOptions,
    job_end,
    partition_problems,
)


class SlurmExecutor(DataFolder):
    """The :class:`~looper.executors.base.Executor` for ``[executor] kind = "slurm"``.

    Data preparation and hashing run here, on the shared filesystem (the same helpers as
    :class:`~looper.executors.local.LocalExecutor`); training and evaluation are batch jobs.
    """

    name = "slurm"
    prestarts = False  # a gated run takes its slot before anything starts (looper.night.slots)

    def __init__(self, workspace: Path, section: Any, *, poll: float = 2.0, kill_after: float = 10.0,
                 unreachable_seconds: float = 120.0, tool_timeout: float = 30.0) -> None:
        self.workspace = Path(workspace)
        python = str(get(section, "python", "python3"))
        self.python = python if python and python != "python3" else sys.executable
        self.gpu_index = int(get(section, "gpu_index", 0))
        self.extra_env: dict[str, str] = {}  # added to every job's environment
        self.start_timeout = float(get(section, "start_timeout", 600))
        self.requeue_limit = int(get(section, "requeue_limit", 2))
        self.require_gpu = bool(get(section, "require_gpu", False))
        self.sandbox = SandboxPolicy(mode=str(get(section, "sandbox", "bwrap") or "bwrap"),
                                     network=bool(get(section, "sandbox_network", False)))
        if self.start_timeout <= 0 or self.requeue_limit < 0:
            raise ConfigError("executor.start_timeout must be > 0 and executor.requeue_limit >= 0")
        self.poll = poll
        self.kill_after = kill_after
        self.unreachable_seconds = unreachable_seconds
        self.cluster = SlurmClient(tool_timeout)
        digest = hashlib.sha1(str(self.workspace.resolve()).encode()).hexdigest()
        self.batch = BatchOptions.of(functools.partial(get, section), comment=f"looper:{digest[:16]}")  # the #SBATCH lines
        self.name_prefix = f"looper-{digest[:8]}-"

    # -- the data folder and the child environment (on the shared filesystem) ------------------
    def _data_path(self, data_dir: str) -> Path:
        p = Path(data_dir)
        return p if p.is_absolute() else self.workspace / p

    def _env(self, **values: str) -> dict[str, str]:
        return child_env(str(self.workspace / ".looper" / "ultralytics"), self.extra_env, **values)

    def train_env(self, job: TrainJob) -> dict[str, str]:
        """The train.py interface as environment variables (exported by the batch script)."""
        return self._env(**train_vars(job, str(self._data_path(self._data_dir)), str(job.out_dir),
                                          pretrained_dir(self.workspace)))

    # -- the commands (the one place each argv is built; the batch script execs them) -----------
    def train_argv(self, job: TrainJob) -> list[str]:
        """The training command inside the training sandbox on the node (looper/executors/sandbox.py): bwrap from
        the node's PATH, its NVIDIA nodes bound where they exist; the plain command when opted out."""
        if not self.sandbox.enabled:
            return self.plain_train_argv(job)
        return sandbox.train_argv(self.plain_train_argv(job), checkout=job.checkout, out_dir=job.out_dir,
                                  data_dir=self._data_path(self._data_dir), env=self.train_env(job),
                                  policy=self.sandbox, devices=NODE_GPU_DEVICES, bwrap="bwrap",
                                  pretrained=pretrained_dir(self.workspace),
                                  tmp_bytes=run_limits.current().caps.tmp_max_bytes)

    def eval_argv(self, job: EvalJob) -> list[str]:
        """``python -I`` on the harness's copy of evaluate.py (``eval/`` next to METRICS.json, on the
        shared filesystem) in the evaluation sandbox on the node; the plain command when opted out."""
        if not self.sandbox.enabled:
            return self.plain_eval_argv(job)
        env = self._env(LOOPER_DEVICE=job.device or "cpu")  # no secrets in an argv: the rest is inherited
        return sandboxed_eval_argv(self.python, job, self._data_path(self._data_dir), env, self.sandbox,
                                   devices=NODE_GPU_DEVICES, bwrap="bwrap")

    def plain_train_argv(self, job: TrainJob) -> list[str]:
        """The training command, run in ``job.checkout`` on the compute node."""
        return [self.python, "train.py"]

    def plain_eval_argv(self, job: EvalJob) -> list[str]:
        """The evaluation command, run in ``job.checkout`` on the compute node."""
        return eval_command(self.python, str(job.checkout / "evaluate.py"), str(job.weights),
                            str(self._data_path(self._data_dir)), str(job.metrics_path), job.device)

    def ensure_data(self, prepare_py: Path, data_dir: str, scale: str, seed: int) -> Verdict:
        return prepare_local_data(self.python, prepare_py, self._data_path(data_dir), data_dir, scale, seed,
                                  self.workspace, self._env())

    def data_hash(self, data_dir: str) -> Verdict:
        return hash_local_data(self._data_path(data_dir), data_dir)

    # -- one supervised run, with requeues ---------------------------------------------------------
    def _run(self, kind: str, argv: list[str], cwd: Path, env: dict[str, str], log_path: Path,
             limit_seconds: float, stall_seconds: float, on_line: LineSink | None,
             cancel: threading.Event | None, before_attempt: Callable[[], None]) -> RunResult:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        folder = log_path.parent / "slurm"
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{self.name_prefix}{log_path.parent.name}-{kind}"
        t0 = time.monotonic()
        faults: list[str] = []
        last_code = NO_TOOL_CODE
        tail: deque[str] = deque(maxlen=80)
        with proc.capped_log(log_path) as log:  # [limits] log_max_bytes: head and tail kept
            def note(text: str) -> None:
                log.write(text + "\n")
                log.flush()

            for attempt in range(self.requeue_limit + 1):
                if cancel is not None and cancel.is_set():
                    return RunResult(exit_code=None, cancelled=True, seconds=time.monotonic() - t0,
                                     log_tail="\n".join(tail))
                before_attempt()
                output = folder / f"{name}-a{attempt}.out"
                output.unlink(missing_ok=True)
                script = folder / f"{name}-a{attempt}.sh"
                script.write_text(self.batch.script(name, output, cwd, argv, env, limit_seconds + self.kill_after))
                tail.clear()
                try:
                    job_id = self.cluster.submit(script, cwd)
                    note(f"slurm: submitted job {job_id} ({name}, attempt {attempt + 1})")
                    result = self._watch(job_id, output, limit_seconds, stall_seconds, log, tail, on_line, cancel)
                except SlurmFault as fault:
                    faults.append(str(fault))
                    last_code = fault.code
                    note(f"{fault}")
                    if not fault.retry:
                        break
                    time.sleep(min(self.poll, 2.0))
                    continue
                result.seconds = time.monotonic() - t0
                return result
        what = faults[-1] if faults else "slurm: no attempt was made"
        if len(faults) > 1:
            what += f"; requeued {len(faults) - 1} times"
            earlier = "; ".join(dict.fromkeys(faults[:-1]))
            what += f" (earlier: {earlier})"
        return RunResult(exit_code=None, seconds=time.monotonic() - t0, log_tail="\n".join(tail),
                         transport_exit_code=last_code if last_code else NO_TOOL_CODE, transport_error=what)

    def _watch(self, job_id: str, output: Path, limit_seconds: float, stall_seconds: float, log: Any,
               tail: deque[str], on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        at = Attempt(job_id=job_id, output=output, submitted=time.monotonic())
        unreachable_since: float | None = None
        next_poll = 0.0
        state = "PENDING"
        while True:
            now = time.monotonic()
            pump_output(at, log, tail, on_line, final=False)
            if now >= next_poll:
                next_poll = now + self.poll
                try:
                    state = self.cluster.state(job_id)
                    unreachable_since = None
                except SlurmFault as fault:
                    unreachable_since = unreachable_since or now
                    if now - unreachable_since >= self.unreachable_seconds:
                        self.cluster.scancel(job_id)  # best effort: the controller may be back
                        raise SlurmFault(f"{fault} for {now - unreachable_since:.0f} s while job {job_id} was "
                                     "in flight", fault.code) from None
                    time.sleep(0.2)
                    continue
                if state not in ACTIVE_STATES:
                    break
                if state == "RUNNING" and at.started is None:
                    at.started = now
                    at.last_growth = now
            if self._stop_if_due(at, state, now, limit_seconds, stall_seconds, cancel):
                break  # it would not end: report how looper stopped it
            time.sleep(0.2)
        return self._result(at, log, tail, on_line)

    def _stop_if_due(self, at: Attempt, state: str, now: float, limit_seconds: float, stall_seconds: float,
                     cancel: threading.Event | None) -> bool:
        """Stop the job when the budget, the stall rule or a cancel says so (scancel, then KILL after
        ``kill_after``); a job that never started within ``start_timeout`` is a fault. True: it would not
        end, give up waiting."""
        job_id = at.job_id
        if not at.stopped_by:
            if cancel is not None and cancel.is_set():
                at.stopped_by = "cancel"
            elif at.started is None and state in WAITING_STATES and now - at.submitted > self.start_timeout:
                self.cluster.scancel(job_id)
                self.cluster.wait_gone(job_id)
                raise SlurmFault(f"slurm: job {job_id} did not start within start_timeout "
                                 f"({self.start_timeout:.0f} s; still {state})")
            elif at.started is not None and now - at.started > limit_seconds:
                at.stopped_by = "budget"
            elif at.started is not None and stall_seconds and now - at.last_growth > stall_seconds:
                at.stopped_by = "stall"
            if at.stopped_by:
                self.cluster.scancel(job_id)
                at.stop_at = now
        elif not at.killed and at.stop_at is not None and now - at.stop_at > self.kill_after:
            self.cluster.scancel(job_id, "--signal=KILL", "--full")
            self.cluster.scancel(job_id)
            at.killed = True
        elif at.stop_at is not None and now - at.stop_at > self.kill_after * 3 + 30:
            return True
        return False

    def _result(self, at: Attempt, log: Any, tail: deque[str], on_line: LineSink | None) -> RunResult:
        """What the ended job's output and the scheduler's own verdict say happened (a fault raises)."""
        job_id = at.job_id
        pump_output(at, log, tail, on_line, final=True)
        try:
            fields = self.cluster.details(job_id)
        except SlurmFault:
            if at.stopped_by:
                fields = {"JobState": "CANCELLED"}
            else:
                raise
        end = job_end(fields, job_id=job_id, stopped_by=at.stopped_by, output="\n".join(tail))
        if end.kind == "harness":
            raise SlurmFault(end.reason)
        if end.oom:
            tail.append(end.reason)
            log.write(end.reason + "\n")
        elif end.timed_out:
            tail.append(end.reason)
        return RunResult(exit_code=end.exit_code, signal=end.signal,
                         timed_out=at.stopped_by == "budget" or end.timed_out,
                         stalled=at.stopped_by == "stall", cancelled=at.stopped_by == "cancel",
                         log_tail="\n".join(tail))

    # -- Executor --------------------------------------------------------------------------------
    def preflight(self, require_gpu: bool, gpu: int | None = None) -> Verdict:  # gpu: each job's own allocation
        metrics, problems = local_preflight(self.name, self.workspace, self.python)  # the shared workspace
        boxed = sandbox.preflight(self.sandbox)  # checked here; the nodes must have bwrap too (docs/SECURITY.md)
        metrics.update(boxed.metrics)
        problems += boxed.blocking
        missing = [t for t in TOOLS if shutil.which(t) is None]
        if missing:
            return Verdict.errored(f"SLURM client tools not found on this machine: {', '.join(missing)}",
                                   metrics=metrics)
        try:
            ping = self.cluster.tool(["scontrol", "ping"], "pinging the controller")
            if ping.exit_code != 0 or "UP" not in ping.stdout:
                return Verdict.errored(f"slurm: controller not up: {last_lines(ping.stdout + ping.stderr)}",
                                       metrics=metrics)
            parts = self.cluster.tool(["sinfo", "-h", "-o", "%P %a %G"], "listing partitions")
        except SlurmFault as fault:
            return Verdict.errored(str(fault), metrics=metrics)
        if parts.exit_code != 0:
            return Verdict.errored(f"slurm: sinfo failed: {last_lines(parts.stderr or parts.stdout)}",
                                   metrics=metrics)
        need_gpu = require_gpu or self.require_gpu or self.batch.gres.startswith("gpu")
        problems += partition_problems(parts.stdout, self.batch.partition, need_gpu, metrics)
        return Verdict.errored(*problems, metrics=metrics) if problems else Verdict.passed(metrics)

    def watch_gpus(self, gpus: Collection[int]) -> None:
        """None: a run's node is known only once its job runs (each run's own figures come back from it)."""
        return None

    def gpu_count(self) -> int:
        """One: each job has its own allocation ([executor] gres), its GPUs numbered from 0 there, so every worker's
        runs take the one ``gpu_index`` names in it (0: the first), never GPU 1 of a one-GPU allocation."""
        return 1

    def train(self, job: TrainJob, on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        job.out_dir.mkdir(parents=True, exist_ok=True)
        env = self.train_env(job)

        def clear_out() -> None:  # a resubmitted job must not find the last attempt's files
            for p in job.out_dir.iterdir():
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)

        return self._run("train", self.train_argv(job), job.checkout, env, job.log_path,
                         job.budget_seconds + job.grace_seconds, job.stall_seconds, on_line, cancel, clear_out)

    def evaluate(self, job: EvalJob, on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        env = self._env(LOOPER_DEVICE=job.device or "cpu")

        def clear_metrics() -> None:  # a result not written by this run does not exist
            job.metrics_path.unlink(missing_ok=True)

        if self.sandbox.enabled:  # training's job is over: a fresh copy of the verified evaluate.py
            refused = evaluator.stage(job)
            if refused is not None:
                return refused
        result = self._run("eval", self.eval_argv(job), job.checkout, env, job.log_path, job.timeout_seconds, job.stall_seconds,
                         on_line, cancel, clear_metrics)
        if self.sandbox.enabled:
            evaluator.collect(job)
        return result

    def reap(self) -> list[str]:
        """Cancel this workspace's jobs a previous daemon left in the queue."""
        try:
            got = self.cluster.tool(["squeue", "-h", "-o", "%i|%j|%k|%T"], "listing jobs")
        except SlurmFault:
            return []  # preflight reports the unreachable controller
        if got.exit_code != 0:
            return []
        ended = []
        for line in got.stdout.splitlines():
            bits = line.strip().split("|")
            if len(bits) < 4:
                continue
            job_id, name, comment, state = bits[0], bits[1], bits[2], bits[3]
            if comment.strip() != self.batch.comment and not name.startswith(self.name_prefix):
                continue
            if self.cluster.scancel(job_id):
                ended.append(f"cancelled SLURM job {job_id} ({name}, {state}) left behind by a previous daemon")
        return ended
