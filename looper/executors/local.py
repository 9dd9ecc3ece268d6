"""Run training and evaluation on this machine, in a process group of their own."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import looper.executors.devicecheck as devicecheck
import looper.executors.evaluator as evaluator
import looper.executors.limits as run_limits
import looper.executors.nightgpu as nightgpu
import looper.executors.prestart as prestart
import looper.executors.sandbox as sandbox
from looper import proc
from looper.core.run import probe
from looper.core.run.slots import boxes_ahead, boxes_ahead_words, renumbered
from looper.core.verdicts.verdict import Verdict
from looper.executors.base import STARTUP_MARK, EvalJob, LineSink, RunResult, TrainJob
from looper.executors.common import (
    THREAD_VARS,
    DataFolder,
    child_env,
    eval_command,
    hash_local_data,
    local_preflight,
    prepare_local_data,
    pretrained_dir,
    run_result,
    sandboxed_eval_argv,
    train_vars,
)
from looper.executors.gpu import NvmlProbe
from looper.executors.sandbox import SandboxPolicy
from looper.workspace import trees


class LocalExecutor(DataFolder):
    name = "local"
    prestarts = True  # a TrainJob with a gate: the run's box started first, train.py once the slot is its own

    def __init__(self, workspace: Path, python: str = "", gpu_index: int = 0, probe: NvmlProbe | None = None,
                 extra_env: dict[str, str] | None = None, sandbox: SandboxPolicy | None = None) -> None:
        self.workspace = Path(workspace)
        self.sandbox = sandbox or SandboxPolicy()  # [executor] sandbox: bwrap unless opted out
        self.python = python if python and python != "python3" else sys.executable
        self.gpu_index = gpu_index
        self.probe = probe or NvmlProbe(gpu_index)
        self.extra_env = dict(extra_env or {})
        self.spares = prestart.Spares(self._start_spare, self._end_spare)  # [loop] prestart: boxes ahead of runs
        self.device_checked: dict[str, tuple[str, str]] = {}  # device: the night's check that passed (preflight)

    def plan(self, data_dir: str, runs: int) -> str:
        """[loop] prestart: as many boxes may wait ahead as runs may be at a time (each run asks for the next's), as
        far as a quarter of this machine's memory holds them (looper.core.run.slots.boxes_ahead); the words when
        fewer may wait (the night says them once; used only where prestart is on)."""
        super().plan(data_dir, runs)
        memory = run_limits.machine()["memory"]
        self.spares.most = boxes_ahead(runs, memory)
        words = boxes_ahead_words(runs, memory)
        return f"prestart: {words}" if words else ""

    # -- helpers ----------------------------------------------------------------------
    def _data_path(self, data_dir: str) -> Path:
        p = Path(data_dir)
        return p if p.is_absolute() else self.workspace / p

    def _env(self, threads: int = 0, **values: str) -> dict[str, str]:
        pools = {var: str(threads) for var in THREAD_VARS} if threads > 0 else {}  # OpenMP and MKL: the run's share
        return child_env(str(self.workspace / ".looper" / "ultralytics"), self.extra_env, **pools, **values)

    # -- the commands (the one place each argv is built) ------------------------------
    def train_argv(self, job: TrainJob) -> list[str]:
        """The training command inside the training sandbox (looper/executors/sandbox.py) unless opted out."""
        if not self.sandbox.enabled:
            return self.plain_train_argv(job)
        return sandbox.train_argv(self.plain_train_argv(job), checkout=job.checkout, out_dir=job.out_dir,
                                  data_dir=self._data_path(self._data_dir), env=self.train_env(job),
                                  policy=self.sandbox, pretrained=pretrained_dir(self.workspace),
                                  tmp_bytes=run_limits.current().caps.tmp_max_bytes)

    def eval_argv(self, job: EvalJob) -> list[str]:
        """``python -I`` on the harness's copy of evaluate.py (``eval/`` next to METRICS.json) in the
        evaluation sandbox, writing ``eval/out/METRICS.json``; the plain command when opted out."""
        if not self.sandbox.enabled:
            return self.plain_eval_argv(job)
        env = self._eval_env(job)  # no secrets in an argv: the rest is inherited
        return sandboxed_eval_argv(self.python, job, self._data_path(self._data_dir), env, self.sandbox)

    def plain_train_argv(self, job: TrainJob) -> list[str]:
        """The training command, run in ``job.checkout``."""
        return [self.python, "train.py"]

    def plain_eval_argv(self, job: EvalJob) -> list[str]:
        """The evaluation command, run in ``job.checkout``."""
        return eval_command(self.python, str(job.checkout / "evaluate.py"), str(job.weights),
                            str(self._data_path(self._data_dir)), str(job.metrics_path), job.device)

    def train_env(self, job: TrainJob) -> dict[str, str]:
        """The train.py interface as environment variables."""
        return self._env(job.threads, **train_vars(job, str(self._data_path(self._data_dir)), str(job.out_dir),
                                          pretrained_dir(self.workspace)))

    # -- Executor ---------------------------------------------------------------------
    def preflight(self, require_gpu: bool, gpu: int | None = None) -> Verdict:
        metrics, problems = local_preflight(self.name, self.workspace, self.python)
        boxed = sandbox.preflight(self.sandbox)
        metrics.update(boxed.metrics)
        problems += boxed.blocking
        metrics["run_limits"], missing = run_limits.preflight()
        problems += missing
        if require_gpu:
            index = self.gpu_index if gpu is None else gpu
            reading = (self.probe if index == self.gpu_index else self.probe.at(index)).read()  # a worker's GPU
            metrics["gpu"] = reading.as_dict()
            moved = renumbered(os.environ.get("CUDA_VISIBLE_DEVICES"), [index], reading.count)  # the runs get it here
            if not reading.ok:
                problems.append(f"require_gpu is set but no usable GPU: {reading.problem}")
            if moved:  # the runs would train on another GPU than the one checked, sampled and sized
                problems.append(moved)
            if reading.ok and not problems:  # the GPU is there: can a run use it, in its box, under its limits? (once a night)
                metrics["device_check"], problem = devicecheck.once_a_night(self.device_checked, f"cuda:{index}",
                                                                            self.device_check)
                problems += [problem] if problem else []
        return Verdict.errored(*problems, metrics=metrics) if problems else Verdict.passed(metrics)

    def gpu_count(self) -> int | None:
        """This machine's GPUs (NVML)."""
        reading = self.probe.read()
        return reading.count if reading.ok else None

    def watch_gpus(self, gpus: Collection[int]) -> nightgpu.Samplers:
        """This machine's GPUs, sampled here through the preflight's NVML."""
        return nightgpu.Samplers(gpus, nvml=self.probe._nvml if isinstance(self.probe, NvmlProbe) else None)

    def device_check(self, device: str) -> tuple[str, str]:
        """(what the check did, the problem or ""): looper.core.run.probe's program on ``device`` as a run runs
        here (this executor's interpreter, environment, sandbox and the daemon's run limits), in a box folder of
        its own (.looper/boxes/box-check-*, removed after; a killed daemon's by :meth:`reap`)."""
        self._boxes().mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="box-check-", dir=self._boxes()))
        limits = run_limits.current()
        try:
            tried = devicecheck.attempts(device, python=self.python, env=self._env(LOOPER_DEVICE=device),
                                         policy=self.sandbox, caps=limits.caps, folder=folder,
                                         oom_score_adj=limits.oom_score_adj, min_free_bytes=limits.min_free_bytes)
        finally:
            trees.remove_tree(folder)
        problem = probe.verdict(device, tried, limits.caps.memory_words())
        return probe.summary(device, tried, problem), problem

    def ensure_data(self, prepare_py: Path, data_dir: str, scale: str, seed: int) -> Verdict:
        return prepare_local_data(self.python, prepare_py, self._data_path(data_dir), data_dir, scale, seed,
                                  self.workspace, self._env())

    def data_hash(self, data_dir: str) -> Verdict:
        return hash_local_data(self._data_path(data_dir), data_dir)

    def train(self, job: TrainJob, on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        job.out_dir.mkdir(parents=True, exist_ok=True)
        limits = proc.Limits(budget_seconds=job.budget_seconds + job.grace_seconds,
                             stall_seconds=job.stall_seconds)
        sampler: list = []

        def given() -> bool:  # the slot is the run's (no slot: at once); then its GPU is sampled, not before
            if job.gate is not None and not job.gate():
                return False
            if job.device and job.device != "cpu":  # GPU figures and loss detection through NVML
                from looper.executors.gpu import GpuSampler, device_index

                sampler.append(GpuSampler(device_index(job.device, self.gpu_index)).start())
            return True

        try:
            spare = self._spare_for(job) if job.prestart else None
            if spare is not None:  # a box started ahead of this run (looper/executors/prestart.py)
                s, seen = self._train_in(spare, dataclasses.replace(job, gate=given), limits, on_line, cancel)
            elif not given():  # its slot was not given: nothing is started
                return RunResult(exit_code=None, started=False)
            else:
                with run_limits.box(job.out_dir) as box:  # memory, processes, the quota of out/ (issue 39)
                    limits.check = box.check
                    s = proc.supervise(box.wrap(self.train_argv(job)), cwd=job.checkout, env=self.train_env(job),
                                       log_path=job.log_path, limits=limits, on_line=on_line, cancel=cancel,
                                       on_start=box.started)
                    seen = box.seen(s.log_error, s.limit)
        finally:
            gpu = sampler[0].stop() if sampler else {}
        result = run_result(s)
        result.gpu = gpu
        result.seen = dataclasses.asdict(seen)
        return result

    def evaluate(self, job: EvalJob, on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        job.metrics_path.unlink(missing_ok=True)  # a result not written by this run does not exist
        if self.sandbox.enabled:  # training's sandbox is gone: a fresh copy of the verified evaluate.py
            refused = evaluator.stage(job)
            if refused is not None:
                return refused
            if job.prestart and os.path.lexists(job.weights):  # in a box started ahead ([loop] prestart)
                called = time.monotonic()
                boxed = self._evaluate_in_box(job, on_line, cancel)
                if boxed is not None:  # its time: from this call, a wait for a box not yet ready included
                    return dataclasses.replace(run_result(boxed), seconds=max(boxed.seconds, time.monotonic() - called))
        s = self._supervise_eval(job, self.eval_argv(job), on_line, cancel)
        if self.sandbox.enabled:
            evaluator.collect(job)
        return run_result(s)

    def evaluate_stream(self, job: EvalJob, split: str, on_line: LineSink | None = None,
                        cancel: threading.Event | None = None) -> RunResult:
        """The threshold evaluation: evaluate.py on ``split`` through looper/executors/streameval.py, in the
        evaluation sandbox unless it is off; METRICS.json, MATCHES.json and STREAM.json end beside
        ``job.metrics_path``. Only the report reads them (looper/night/tuned.py)."""
        for name in (job.metrics_path.name, "MATCHES.json", evaluator.STREAM_NAME):  # none left from an earlier one
            job.metrics_path.with_name(name).unlink(missing_ok=True)
        refused = evaluator.stage_stream(job)
        if refused is not None:
            return refused
        eval_dir = job.metrics_path.parent / "eval"
        if self.sandbox.enabled:
            argv = sandboxed_eval_argv(self.python, job, self._data_path(self._data_dir), self._eval_env(job),
                                       self.sandbox, script=evaluator.STREAM_COPY)
        else:
            argv = eval_command(self.python, str(eval_dir / evaluator.STREAM_COPY), str(job.weights),
                                str(self._data_path(self._data_dir)), str(eval_dir / "out" / "METRICS.json"),
                                job.device)
        s = self._supervise_eval(job, [*argv, "--split", split], on_line, cancel)
        evaluator.collect_stream(job)
        return run_result(s)

    def _eval_env(self, job: EvalJob) -> dict[str, str]:
        return self._env(job.threads, LOOPER_DEVICE=job.device or "cpu")

    def _supervise_eval(self, job: EvalJob, argv: list[str], on_line: LineSink | None,
                        cancel: threading.Event | None) -> proc.Supervised:
        """An evaluation under the job's wall clock and stall limit, in the run limits' box (memory, processes:
        the evaluator reads the candidate's weights)."""
        limits = proc.Limits(budget_seconds=job.timeout_seconds, stall_seconds=job.stall_seconds)
        with run_limits.box() as box:
            return proc.supervise(box.wrap(argv), cwd=job.checkout, env=self._eval_env(job), log_path=job.log_path,
                                  limits=limits, on_line=on_line, cancel=cancel)

    def reap(self) -> list[str]:
        """End process groups a killed daemon left running (the pid trail in .looper/pids/) and remove the
        folders of the boxes it had started ahead of their runs (.looper/boxes/)."""
        ended = proc.reap_trail(self.workspace / ".looper" / "pids")
        left = [p for p in sorted(self._boxes().glob("box-*")) if p.is_dir()]
        for folder in left:
            trees.remove_tree(folder)
        return ended + ([f"removed {len(left)} box folder(s) a stopped daemon left in .looper/boxes"] if left else [])

    def close(self) -> None:
        """The night is over: end the boxes started ahead of runs that did not come."""
        self.spares.close()

    # -- boxes started ahead of their runs ([loop] prestart) -------------------------
    def _boxes(self) -> Path:
        return self.workspace / ".looper" / "boxes"

    def _box_env(self, job: TrainJob, out: Path) -> tuple[str, dict[str, str], dict[str, str]]:
        """(the key of the boxes that can serve ``job``, their variables from the start, the run's go variables)."""
        start, run = prestart.split_env(self._env(job.threads, **train_vars(
            job, str(self._data_path(self._data_dir)), str(out), pretrained_dir(self.workspace))))
        return json.dumps([self.python, start, self.sandbox.mode], sort_keys=True), start, run

    def _spare_for(self, job: TrainJob) -> prestart.Spare | None:
        """A box for ``job``: one started ahead for the same variables, or one started now. None: no box could
        be started (the run starts as without prestart)."""
        key = self._box_env(job, job.out_dir)[0]
        return self.spares.take(key) or self._start_spare(key, job)

    def _eval_key(self, job: EvalJob) -> str:
        """The key of the boxes that can serve the evaluation ``job``."""
        return json.dumps(["evaluate", self.python, self._eval_env(job), self.sandbox.mode], sort_keys=True)

    def _evaluate_in_box(self, job: EvalJob, on_line: LineSink | None,
                         cancel: threading.Event | None) -> proc.Supervised | None:
        """Evaluate ``job`` in a box started ahead (or now): the harness's copy of evaluate.py into its code
        folder and the run's weights (a plain file: :func:`evaluator.stage` checked) into its ``w/``, both
        read-only inside, then go; its METRICS.json moved to ``job.metrics_path``. The box for the next
        evaluation is asked for as this one ends: it imports while the next run trains. None: no box started."""
        key = self._eval_key(job)
        spare = self.spares.take(key) or self._start_spare(key, job)
        if spare is None:
            return None
        try:
            shutil.copyfile(job.weights, spare.folder / "w" / "weights.pt")
            shutil.copyfile(job.metrics_path.parent / "eval" / "evaluate.py", spare.code / "evaluate.py")
            (spare.code / "evaluate.py").chmod(0o444)
            with open(job.log_path, "a", encoding="utf-8") as log:
                log.write("".join(line + "\n" for line in spare.said))
            limits = proc.Limits(budget_seconds=job.timeout_seconds, stall_seconds=job.stall_seconds)
            limits.check = spare.limits.check
            s = proc.supervise([], cwd=spare.code, env=None, log_path=job.log_path, limits=limits, on_line=on_line,
                               cancel=cancel, gate=lambda: True, launched=spare.launched, go=prestart.go_line({}))
            evaluator.collect_metrics(spare.out, job.metrics_path)
            return s
        finally:
            self._end_spare(spare)
            self.spares.request(key, job)

    def _start_spare(self, key: str, job: TrainJob | EvalJob) -> prestart.Spare | None:
        """Start a box (its run limits, its sandbox, the launcher) and wait for its ready line."""
        self._boxes().mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="box-", dir=self._boxes()))
        for part in ("code", "out", "w") if isinstance(job, EvalJob) else ("code", "out"):
            (folder / part).mkdir()
        box = run_limits.box(None if isinstance(job, EvalJob) else folder / "out").__enter__()  # evaluation: no quota
        try:
            tmp_bytes = run_limits.current().caps.tmp_max_bytes
            if isinstance(job, EvalJob):  # the evaluator's sandbox (always on here), its files written at go
                start = self._eval_env(job)
                argv = sandbox.eval_argv(self.python, folder / "code" / "evaluate.py", weights=folder / "w" / "weights.pt",
                                         data_dir=self._data_path(self._data_dir), out_dir=folder / "out", env=start,
                                         device=job.device, policy=self.sandbox, boot=prestart.EVAL_LAUNCHER,
                                         tmp_bytes=tmp_bytes, weights_folder=True)
            else:
                _key, start, _run = self._box_env(job, folder / "out")
                argv = prestart.argv(self.python)
                if self.sandbox.enabled:
                    argv = sandbox.train_argv(argv, checkout=folder / "code", out_dir=folder / "out",
                                              data_dir=self._data_path(self._data_dir), env=start, policy=self.sandbox,
                                              pretrained=pretrained_dir(self.workspace), tmp_bytes=tmp_bytes,
                                              code_folder=True)
            launched = proc.launch(box.wrap(argv), cwd=folder / "code", env=start, hold=True)
        except BaseException:  # no box: nothing of it is left behind
            box.__exit__(None, None, None)
            trees.remove_tree(folder)
            raise
        box.started(launched.proc.pid)
        spare = prestart.Spare(key, launched, box, folder, prestart.read_ready(launched))
        if not any(prestart.READY_MARK in line for line in spare.said):
            self._end_spare(spare)
            return None
        return spare

    def _end_spare(self, spare: prestart.Spare) -> None:
        proc.end_launched(spare.launched)
        spare.limits.__exit__(None, None, None)
        trees.remove_tree(spare.folder)

    def _train_in(self, spare: prestart.Spare, job: TrainJob, limits: proc.Limits, on_line: LineSink | None,
                  cancel: threading.Event | None) -> tuple[proc.Supervised, Any]:
        """Run ``job`` in ``spare``: its train.py into the box's code folder, go with the run's variables once
        its slot is given (``job.gate``), the box's ``$LOOPER_OUT`` moved to ``job.out_dir`` when it ends. The
        box for the run after it is asked for at this run's first step (its start-up and the next box's
        imports do not share the cores), or when it ends before one."""
        asked: list[bool] = []

        def ask() -> None:
            if not asked:
                asked.append(True)
                self.spares.request(spare.key, job)

        def each_line(line: str) -> None:
            if STARTUP_MARK in line:
                ask()
            if on_line is not None:
                on_line(line)

        try:
            shutil.copyfile(job.checkout / "train.py", spare.code / "train.py")
            with open(job.log_path, "a", encoding="utf-8") as log:
                log.write("".join(line + "\n" for line in spare.said))
            limits.check = spare.limits.check
            s = proc.supervise([], cwd=spare.code, env=None, log_path=job.log_path, limits=limits, on_line=each_line,
                               cancel=cancel, gate=job.gate or (lambda: True), launched=spare.launched,
                               go=prestart.go_line(self._box_env(job, spare.out)[2]))
            seen = spare.limits.seen(s.log_error, s.limit)
            job.out_dir.rmdir()  # empty until now: the box's out/ takes its place, whole
            os.replace(spare.out, job.out_dir)
            return s, seen
        finally:
            self._end_spare(spare)
            ask()
