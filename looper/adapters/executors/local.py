"""Run training and evaluation on this machine, in a process group of their own."""

from __future__ import annotations

import shutil
import sys
import threading
from pathlib import Path

from looper import proc
from looper.adapters.executors.base import EvalJob, LineSink, RunResult, TrainJob
from looper.adapters.gpu import NvmlProbe
from looper.core.verdict import Verdict
from looper.datahash import tree_hash

MIN_FREE_BYTES = 1 << 30  # 1 GiB: less than this on the workspace disk is a preflight error


def _result(s: proc.Supervised) -> RunResult:
    return RunResult(exit_code=s.exit_code, signal=s.signal, timed_out=s.timed_out, stalled=s.stalled,
                     cancelled=s.stopped_by == "cancel", seconds=s.seconds, log_tail=s.log_tail)


class LocalExecutor:
    name = "local"

    def __init__(self, workspace: Path, python: str = "", gpu_index: int = 0, probe: NvmlProbe | None = None,
                 extra_env: dict[str, str] | None = None) -> None:
        self.workspace = Path(workspace)
        self.python = python if python and python != "python3" else sys.executable
        self.gpu_index = gpu_index
        self.probe = probe or NvmlProbe(gpu_index)
        self.extra_env = dict(extra_env or {})

    # -- helpers ----------------------------------------------------------------------
    def _data_path(self, data_dir: str) -> Path:
        p = Path(data_dir)
        return p if p.is_absolute() else self.workspace / p

    def _env(self, **values: str) -> dict[str, str]:
        env = {
            "YOLO_OFFLINE": "1",
            "YOLO_CONFIG_DIR": str(self.workspace / ".looper" / "ultralytics"),
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        env.update(self.extra_env)
        env.update(values)
        return env

    # -- Executor ---------------------------------------------------------------------
    def preflight(self, require_gpu: bool) -> Verdict:
        metrics: dict = {"executor": self.name}
        problems: list[str] = []
        free = shutil.disk_usage(self.workspace).free
        metrics["disk_free_gb"] = round(free / 2**30, 2)
        if free < MIN_FREE_BYTES:
            problems.append(f"disk nearly full on {self.name}: {free / 2**20:.0f} MiB free (need 1024 MiB)")
        if not Path(self.python).exists() and shutil.which(self.python) is None:
            problems.append(f"python interpreter not found: {self.python}")
        if require_gpu:
            reading = self.probe.read()
            metrics["gpu"] = reading.as_dict()
            if not reading.ok:
                problems.append(f"require_gpu is set but no usable GPU: {reading.problem}")
        return Verdict.errored(*problems, metrics=metrics) if problems else Verdict.passed(metrics)

    def ensure_data(self, prepare_py: Path, data_dir: str, scale: str, seed: int) -> Verdict:
        path = self._data_path(data_dir)
        if not (path / "manifest.json").is_file():
            if path.exists() and any(path.iterdir()):
                return Verdict.errored(f"data folder {data_dir} exists but has no manifest.json: "
                                       "move it away or finish preparing it")
            done = proc.run([self.python, str(prepare_py), "--out", str(path), "--scale", scale,
                             "--seed", str(seed)], cwd=self.workspace, env=self._env(), timeout=3600)
            if not done.ok or not (path / "manifest.json").is_file():
                tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
                return Verdict.errored(f"prepare.py failed (exit {done.exit_code}): " + " | ".join(tail))
        return self.data_hash(data_dir)

    def data_hash(self, data_dir: str) -> Verdict:
        path = self._data_path(data_dir)
        if not (path / "manifest.json").is_file():
            return Verdict.errored(f"data missing: {data_dir}/manifest.json does not exist")
        digest, files = tree_hash(path)
        return Verdict.passed({"hash": digest, "files": files})

    def train_env(self, job: TrainJob) -> dict[str, str]:
        """The train.py interface (CONTRACT section 2) as environment variables."""
        return self._env(
            LOOPER_BUDGET_SECONDS=str(int(job.budget_seconds)),
            LOOPER_DATA=str(self._data_path(self._data_dir)),
            LOOPER_OUT=str(job.out_dir),
            LOOPER_SEED=str(job.seed),
            LOOPER_DEVICE=job.device or "cpu",
        )

    def train(self, job: TrainJob, on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        job.out_dir.mkdir(parents=True, exist_ok=True)
        env = self.train_env(job)
        limits = proc.Limits(budget_seconds=job.budget_seconds + job.grace_seconds,
                             stall_seconds=job.stall_seconds)
        sampler = None
        if job.device and job.device != "cpu":  # GPU figures and loss detection through NVML
            from looper.adapters.gpu import GpuSampler

            index = int(job.device.split(":")[-1]) if job.device.split(":")[-1].isdigit() else self.gpu_index
            sampler = GpuSampler(index).start()
        try:
            s = self._supervise([self.python, "train.py"], job.checkout, env, job.log_path, limits, on_line, cancel)
        finally:
            gpu = sampler.stop() if sampler else {}
        result = _result(s)
        result.gpu = gpu
        return result

    def evaluate(self, job: EvalJob, on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        job.metrics_path.unlink(missing_ok=True)  # a result not written by this run does not exist
        env = self._env(LOOPER_DEVICE=job.device or "cpu")
        argv = [self.python, str(job.checkout / "evaluate.py"), "--weights", str(job.weights),
                "--data", str(self._data_path(self._data_dir)), "--out", str(job.metrics_path)]
        if job.device:
            argv += ["--device", job.device]
        limits = proc.Limits(budget_seconds=job.timeout_seconds, stall_seconds=job.stall_seconds)
        s = self._supervise(argv, job.checkout, env, job.log_path, limits, on_line, cancel)
        return _result(s)

    def _supervise(self, argv: list[str], cwd: Path, env: dict[str, str], log_path: Path,
                   limits: proc.Limits, on_line: LineSink | None, cancel: threading.Event | None) -> proc.Supervised:
        return proc.supervise(argv, cwd=cwd, env=env, log_path=log_path, limits=limits, on_line=on_line,
                              cancel=cancel)

    def reap(self) -> list[str]:
        """End process groups a killed daemon left running (the pid trail in .looper/pids/)."""
        return proc.reap_trail(self.workspace / ".looper" / "pids")

    # The data folder is set once per loop; kept here so jobs stay small.
    _data_dir: str = "data"

    def use_data(self, data_dir: str) -> None:
        self._data_dir = data_dir
