"""Run training and evaluation on an SSH host, with the local supervisor in charge.

Layers: :mod:`looper.executors.ssh.transport` (the ssh command line, connection sharing,
retries, faults in words); :mod:`looper.remote` (what runs on the host, as
``python -m looper.remote ...`` from the synced package); :class:`RemoteHost` here (remote_dir
on the host as calls of that module: layout, sync and hash checks, run folders, data); and
:class:`SshExecutor`, the :class:`~looper.executors.base.Executor` protocol on top.

A run is ``ssh host 'cd checkout && exec python -m looper.remote run RUN ... -- ARGV'`` under
:func:`looper.proc.supervise` here: the budget, grace and stall limits are enforced here, and
whatever ended the run (a limit, a cancel, the link dropping, or a normal exit) the REMOTE
process group is then ended over a fresh connection (``looper.remote end``: SIGTERM, then
SIGKILL ``kill_after`` seconds later). A run a dead daemon left behind is found by
:meth:`SshExecutor.reap` through its ``run.pid``.

Transport faults (ssh's own exit status 255, rsync failures, a remote disk that is full, a
fixed file whose remote copy differs) never look like a crash of train.py: the result
carries ``transport_exit_code`` (ssh's 255, rsync's own code, or ``-1`` where no tool
failed) and ``transport_error`` in words.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import looper
import looper.executors.devicecheck as devicecheck
import looper.executors.limits as run_limits
import looper.executors.nightgpu as nightgpu
from looper import proc
from looper.core.run import limits as core_limits
from looper.core.run.slots import renumbered
from looper.core.verdicts.verdict import Verdict
from looper.errors import ConfigError
from looper.executors.base import EvalJob, LineSink, RunResult, TrainJob
from looper.executors.common import (
    MIN_FREE_BYTES,
    NO_TOOL_CODE,
    DataFolder,
    child_env,
    eval_command,
    fault_result,
    get,
    train_vars,
)
from looper.executors.gpu import device_index
from looper.executors.sandbox import SandboxPolicy
from looper.executors.ssh.host import RemoteHost
from looper.executors.ssh.outcome import data_verdict, gpu_summary, settle_run, unreachable_after
from looper.executors.ssh.transport import SshTransport, TransportFault
from looper.workspace.hashes import PRETRAINED_DIR


class SshExecutor(DataFolder):
    """The :class:`~looper.executors.base.Executor` for ``[executor] kind = "ssh"``."""

    name = "ssh"
    prestarts = False  # a gated run takes its slot before anything starts (looper.night.slots)

    def __init__(self, workspace: Path, section: Any, *, kill_after: float = 10.0, retries: int = 3,
                 control_timeout: float = 120.0, package_dir: Path | None = None) -> None:
        self.workspace = Path(workspace)
        self.host = str(get(section, "host", "")).strip()
        remote_dir = str(get(section, "remote_dir", "")).strip()
        if not self.host:
            raise ConfigError("executor.host: kind 'ssh' needs a host (as written in ~/.ssh/config)")
        if not remote_dir:
            raise ConfigError("executor.remote_dir: kind 'ssh' needs a folder on the host to work in")
        self.python = str(get(section, "python", "python3")) or "python3"
        self.require_gpu = bool(get(section, "require_gpu", False))
        self.gpu_index = int(get(section, "gpu_index", 0))
        self.sandbox = SandboxPolicy(mode=str(get(section, "sandbox", "bwrap") or "bwrap"),
                                     network=bool(get(section, "sandbox_network", False)))
        self.kill_after = kill_after
        self.link = SshTransport(self.workspace, self.host, get(section, "ssh_options", []), retries=retries,
                                 control_timeout=control_timeout)
        self.remote = RemoteHost(self.link, remote_dir, self.python,
                                 Path(package_dir) if package_dir else Path(looper.__file__).parent, kill_after)
        self.device_checked: dict[str, tuple[str, str]] = {}  # device: the night's check that passed (preflight)
        # local weights file -> (size, mtime_ns, remote path): evaluation reuses the remote copy
        self._weights: dict[str, tuple[int, int, str]] = {}

    # -- the transport, as the executor's own words ----------------------------------------------
    def ssh_argv(self) -> list[str]:
        return self.link.argv()

    def describe(self, got: proc.Completed | None, text: str = "") -> str:
        return self.link.describe(got, text)

    def close(self) -> None:
        self.link.close()

    # -- the commands (the one place each argv is built; they run in the remote checkout) ----------
    def train_argv(self, job: TrainJob) -> list[str]:
        """The training command on the host."""
        return [self.python, "train.py"]

    def eval_argv(self, job: EvalJob, weights: str, out: str) -> list[str]:
        """The evaluation command on the host (``weights`` and ``out`` are remote paths)."""
        return eval_command(self.python, "evaluate.py", weights, self.remote.data_path(self._data_dir), out,
                            job.device)

    def sandbox_request(self, kind: str) -> dict[str, str]:
        """Environment entries asking ``looper.remote run`` to wrap the command in the host's sandbox
        (``kind``: train | eval; looper/remote.py ``wrap_on_host``); none when opted out."""
        if not self.sandbox.enabled:
            return run_limits.request()  # the run's own limits on the host (issue 39), sandbox or not
        return {"LOOPER_SANDBOX": kind, **({"LOOPER_SANDBOX_NETWORK": "1"} if self.sandbox.network else {}),
                **run_limits.request()}  # its limits carry [limits] tmp_max_bytes: the sandbox's /tmp, /dev/shm sizes

    def _env(self, **values: str) -> dict[str, str]:
        return child_env(f"{self.remote.root()}/.ultralytics", {"PYTHONPATH": self.remote.checkout}, **values)

    # -- supervised remote runs ---------------------------------------------------------------
    def _supervised(self, run: str, argv: list[str], env: dict[str, str], job: TrainJob | EvalJob,
                    limits: proc.Limits, on_line: LineSink | None, cancel: threading.Event | None,
                    sample_gpu: bool) -> tuple[RunResult, dict[str, Any] | None]:
        """Run ``argv`` remotely under ``limits``: the result and what ``end`` said (None: the host is gone)."""
        command = self.remote.run_command(run, argv, env, device_index(job.device, self.gpu_index) if sample_gpu else None,
                                          limits.budget_seconds, code=isinstance(job, TrainJob))
        s = proc.supervise(command, cwd=job.checkout, env=None, log_path=job.log_path, limits=limits,
                           on_line=on_line, cancel=cancel)
        # Always end the remote process group: after a limit fired the local ssh is gone but the
        # remote group lives on; after a normal exit, children train.py left behind must go too
        # (as locally, nothing of the group outlives its leader).
        try:
            ended = self.remote.end_run(run)
        except TransportFault as fault:
            return unreachable_after(s, fault, self.link.drop_words(s.log_tail)), None
        return settle_run(s, ended, self.host, self.link.drop_words(s.log_tail)), ended

    # -- Executor -------------------------------------------------------------------------------
    def preflight(self, require_gpu: bool, gpu: int | None = None) -> Verdict:
        metrics: dict[str, Any] = {"executor": self.name, "host": self.host}
        for tool in ("ssh", "rsync"):
            if shutil.which(tool) is None:
                return Verdict.errored(f"{tool} is not installed on this machine (needed for executor 'ssh')",
                                       metrics=metrics)
        try:
            t0 = time.monotonic()
            got = proc.run(self.link.command("true"), timeout=self.link.connect_timeout + 20)
            metrics["connect_seconds"] = round(time.monotonic() - t0, 3)
            if not got.ok:
                return Verdict.errored(self.describe(got), metrics=metrics)
            root = self.remote.root()
            metrics["remote_dir"] = root
            probe = (["--sandbox", "network" if self.sandbox.network else "isolated"] if self.sandbox.enabled else [])
            facts = self.remote.ask("facts", *probe, what="checking the remote host")
        except TransportFault as fault:
            return Verdict.errored(str(fault), metrics=metrics)
        problems: list[str] = []
        free = int(facts.get("free_bytes", 0))
        metrics["disk_free_gb"] = round(free / 2**30, 2)
        if free < MIN_FREE_BYTES:
            problems.append(f"remote disk nearly full on {self.host}: {free / 2**20:.0f} MiB free under "
                            f"{root} (need 1024 MiB)")
        metrics["python"] = str(facts.get("python", ""))
        if isinstance(facts.get("cores"), int) and facts["cores"] > 0:  # the host's: its GPU's slots are fed by them
            metrics["cores"] = facts["cores"]
        if not facts.get("rsync"):
            problems.append(f"rsync is not installed on {self.host}")
        boxed = facts.get("sandbox")
        if self.sandbox.enabled:
            metrics["sandbox"] = self.sandbox.describe()
            if not isinstance(boxed, dict) or not boxed.get("ok"):
                why = boxed.get("why") if isinstance(boxed, dict) else "the host did not answer the sandbox check"
                problems.append(f"train.py cannot run in its sandbox on {self.host}: {why}")
        if require_gpu and not problems:
            index = self.gpu_index if gpu is None else gpu
            metrics["gpu"], problem = self._remote_gpu(index)
            visible = facts.get("cuda_visible_devices")
            count = metrics["gpu"].get("count") if isinstance(metrics["gpu"], dict) else 0
            moved = renumbered(visible if isinstance(visible, str) else None, [index], int(count or 0),
                               f"the environment of {self.host}")
            if not problem and not moved:  # the GPU is there: can a run use it, in its box, under its limits? (once a night)
                metrics["device_check"], problem = devicecheck.once_a_night(self.device_checked, f"cuda:{index}",
                                                                            self.device_check)
            problems += [p for p in (problem, moved) if p]  # moved: its runs would train on another GPU than the one checked
        return Verdict.errored(*problems, metrics=metrics) if problems else Verdict.passed(metrics)

    def device_check(self, device: str) -> tuple[str, str]:
        """(what the check did, the problem or ""): ``looper.remote check-device`` on the host, the run's
        environment and limits request with it (looper/executors/devicecheck.py runs it there); judged here."""
        from looper.core.run import probe

        sandboxed = ["--sandbox", "network" if self.sandbox.network else "isolated"] if self.sandbox.enabled else []
        env = {**self._env(LOOPER_DEVICE=device), **run_limits.request()}
        try:
            answer = self.remote.ask("check-device", device, *sandboxed, *(f"--env={k}={v}" for k, v in env.items()),
                                     what="the GPU check in a run's box", timeout=4 * probe.TIMEOUT_S + 60, retries=0)
            tried = tuple(probe.Attempt(str(a["where"]), a["exit_code"], str(a["output"])) for a in answer["tried"])
        except TransportFault as fault:
            return f"torch on {device} in a run's box on {self.host}: not checked", str(fault)
        except (KeyError, TypeError) as exc:
            words = answer.get("refused") or f"an answer without its attempts ({exc!r})"
            return f"torch on {device} in a run's box on {self.host}: not checked", f"the GPU check on {self.host}: {words}"
        problem = probe.verdict(device, tried, str(answer.get("memory_words", "")))
        return probe.summary(device, tried, problem, self.host), (f"on {self.host}: {problem}" if problem else "")

    def watch_gpus(self, gpus: Collection[int]) -> nightgpu.RemoteWatch | None:
        """The host's GPUs, sampled there (``python -m looper.executors.nightgpu watch``) over a connection of its
        own until the night ends (a dropped connection ends it too: its figures are then said missing); None
        where it cannot even start."""
        try:
            line = self.remote.line("watch", *(f"--index={i}" for i in sorted(set(gpus))),
                                    module="looper.executors.nightgpu")
            argv = self.link.command(line, solo=True)
        except TransportFault:
            return None
        return nightgpu.RemoteWatch(proc.launch(argv, cwd=self.workspace, env=None, hold=True), self.host, gpus)

    def gpu_count(self) -> int | None:
        """The host's GPUs (NVML there)."""
        reading, problem = self._remote_gpu(self.gpu_index)
        return None if problem else int(reading.get("count") or 0) or None

    def _remote_gpu(self, index: int) -> tuple[dict, str]:
        """One NVML reading of GPU ``index`` on the host, through the synced looper package and pynvml there."""
        try:
            reading = self.remote.ask("read", "--index", str(index), module="looper.executors.gpu",
                                      what="the NVML check", timeout=120)
        except TransportFault as fault:
            return {}, f"require_gpu is set but the GPU on {self.host} could not be checked: {fault}"
        if not reading.get("ok"):
            return reading, (f"require_gpu is set but {self.host} has no usable GPU: "
                             f"{reading.get('problem', 'unknown')}")
        return reading, ""

    def sync(self, checkout: Path) -> Verdict:
        """Copy train.py, the fixed files and the package; error when a remote copy differs."""
        metrics = {"host": self.host}
        try:
            problems = self.remote.sync_checked(checkout)
            metrics["checkout"] = self.remote.checkout
        except TransportFault as fault:
            return Verdict.errored(str(fault), metrics=metrics)
        return Verdict.errored(*problems, metrics=metrics) if problems else Verdict.passed(metrics)

    def ensure_data(self, prepare_py: Path, data_dir: str, scale: str, seed: int) -> Verdict:
        prepare_py = Path(prepare_py)
        try:
            data = self.remote.data_path(data_dir)
            env = [f"--env={k}={v}" for k, v in self._env().items()]  # offline, settings under remote_dir
            found = self.remote.data(data, "--index", *env)
            if found.get("state") == "missing":
                self.remote.push([prepare_py])
                # a half-built folder must not be built over: not retried
                found = self.remote.data(data, "--prepare", prepare_py.name, "--scale", scale,
                                         "--seed", str(int(seed)), "--index", *env, retries=1)
        except TransportFault as fault:
            return Verdict.errored(str(fault), metrics={"host": self.host})
        return data_verdict(found, data, self.host)

    def data_hash(self, data_dir: str) -> Verdict:
        """The same hash as :func:`looper.workspace.hashes.tree_hash`, computed on the host."""
        try:
            data = self.remote.data_path(data_dir)
            found = self.remote.data(data)
        except TransportFault as fault:
            return Verdict.errored(str(fault), metrics={"host": self.host})
        return data_verdict(found, data, self.host)

    def train(self, job: TrainJob, on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        job.out_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        try:
            run = self.remote.new_run("train")
            pre = self.workspace / PRETRAINED_DIR  # the starting checkpoint(s), pushed beside train.py
            problems = self.remote.sync_checked(job.checkout, run, [pre] if pre.is_dir() else [], code=True)
            if problems:
                return fault_result("; ".join(problems), NO_TOOL_CODE, time.monotonic() - t0)
            env = self._env(**train_vars(job, self.remote.data_path(self._data_dir), f"{run}/out",
                                         f"{self.remote.checkout}/{PRETRAINED_DIR}" if pre.is_dir() else ""),
                            **self.sandbox_request("train"))
        except TransportFault as fault:
            return fault_result(str(fault), fault.code, time.monotonic() - t0)
        limits = proc.Limits(budget_seconds=job.budget_seconds + job.grace_seconds,
                             stall_seconds=job.stall_seconds, kill_after=self.kill_after)
        sample = self.require_gpu or bool(job.device and job.device != "cpu")
        result, ended = self._supervised(run, self.train_argv(job), env, job, limits, on_line, cancel, sample)
        if ended is None:
            return result  # nothing more can be fetched from a host that does not answer
        if isinstance(ended.get("seen"), dict):  # what the host saw of the run's limits
            result.seen = {k: v for k, v in ended["seen"].items() if k in core_limits.Seen.__dataclass_fields__}
        if isinstance(ended.get("caps"), dict):  # what the run ran under there ([limits] at 0: the host's own figures)
            result.caps = dataclasses.asdict(core_limits.caps_of(ended["caps"]))
        caps = run_limits.current().caps  # what comes back is bounded (issue 39): measured there first
        refused = core_limits.fetch_refused(ended.get("out"), caps.out_max_bytes, caps.out_max_files)
        if refused:
            result.limit = refused
            return result
        # train.py's own scratch (a linked view of the data, Ultralytics' caches) stays there
        bound = [f"--max-size={caps.out_max_bytes}"] if caps.out_max_bytes else []
        self._fetch(result, [*bound, "--exclude", "/data/", "--exclude", "*.cache", self.link.spec(f"{run}/out/"),
                             str(job.out_dir) + "/"], f"fetching the run output from {run}")
        weights = job.out_dir / "weights.pt"
        if weights.is_file():
            st = weights.stat()
            self._weights[str(weights.resolve())] = (st.st_size, st.st_mtime_ns, f"{run}/out/weights.pt")
        if sample:
            result.gpu = gpu_summary(ended, self.host)
        return result

    def evaluate(self, job: EvalJob, on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        job.metrics_path.unlink(missing_ok=True)  # a result not written by this run does not exist
        t0 = time.monotonic()
        try:
            run = self.remote.new_run("eval")
            problems = self.remote.sync_checked(job.checkout)
            if problems:
                return fault_result("; ".join(problems), NO_TOOL_CODE, time.monotonic() - t0)
            argv = self.eval_argv(job, self._remote_weights(job.weights, run), f"{run}/out/METRICS.json")
            env = self._env(LOOPER_DEVICE=job.device or "cpu", **self.sandbox_request("eval"))
        except TransportFault as fault:
            return fault_result(str(fault), fault.code, time.monotonic() - t0)
        limits = proc.Limits(budget_seconds=job.timeout_seconds, stall_seconds=job.stall_seconds,
                             kill_after=self.kill_after)
        result, ended = self._supervised(run, argv, env, job, limits, on_line, cancel, False)
        if ended is None:
            return result
        staging = Path(tempfile.mkdtemp(prefix=".metrics-", dir=job.metrics_path.parent))
        try:
            self._fetch(result, [self.link.spec(f"{run}/out/"), str(staging) + "/"],
                        f"fetching METRICS.json from {run}")
            if (staging / "METRICS.json").is_file():
                if (staging / "MATCHES.json").is_file():  # the matched boxes, for the report
                    os.replace(staging / "MATCHES.json", job.metrics_path.with_name("MATCHES.json"))
                os.replace(staging / "METRICS.json", job.metrics_path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return result

    def _fetch(self, result: RunResult, args: list[str], what: str) -> None:
        """rsync a run's output back; a failure is the result's transport error (unless it has one)."""
        try:
            self.link.rsync(args, what)
        except TransportFault as fault:
            if not result.transport_error:
                result.transport_exit_code, result.transport_error = fault.code, str(fault)

    def _remote_weights(self, weights: Path, run: str) -> str:
        """The weights' path on the host: the copy training left there, else an upload."""
        weights = Path(weights)
        known = self._weights.get(str(weights.resolve())) if weights.exists() else None
        cached = ""
        if known is not None and (weights.stat().st_size, weights.stat().st_mtime_ns) == known[:2]:
            cached = known[2]
        if self.remote.run_dir(run, cached):
            return cached
        if not weights.is_file():
            # let evaluate.py meet the missing file and say so; the path names what was asked for
            return f"{run}/weights-missing-locally/{weights.name}"
        self.link.rsync([str(weights), self.link.spec(f"{run}/{weights.name}")],
                        f"copying {weights.name} to {self.host}")
        return f"{run}/{weights.name}"

    def reap(self) -> list[str]:
        """End remote runs a previous daemon left behind (live process groups under runs/)."""
        try:
            root = self.remote.root()
            ended = self.remote.reap()
        except TransportFault:
            return []  # preflight reports the unreachable host; nothing could be ended from here
        return [f"ended a run left behind on {self.host}: {root}/runs/{name} (process group {pgid})"
                for pgid, name in ended]

__all__ = ["NO_TOOL_CODE", "RemoteHost", "SshExecutor", "TransportFault"]
