"""What every executor shares: config reading, the child environment, results, local data.

The executors (local, ssh, slurm) are separate classes side by side; what they have in
common lives here as plain functions rather than in a base class.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from looper import proc
from looper.core.verdicts.verdict import Verdict
from looper.executors.base import EvalJob, RunResult, TrainJob
from looper.workspace.hashes import PRETRAINED_DIR, TEST_SEED_ENV, secret_seed_file, tree_hash

MIN_FREE_BYTES = 1 << 30  # 1 GiB: less than this where runs write is a preflight error
NO_TOOL_CODE = -1  # transport_exit_code when the fault is not a tool's own exit status


def get(section: Any, key: str, default: Any) -> Any:
    """``section.key`` (a config section or a plain dict), ``default`` when absent or None."""
    value = section.get(key, default) if isinstance(section, dict) else getattr(section, key, default)
    return default if value is None else value


def last_lines(text: str, n: int = 3) -> str:
    """The last ``n`` non-blank lines of ``text`` on one line, for error messages."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # a run side by side: its thread pools, its share of the cores


def child_env(yolo_config_dir: str, extra: dict[str, str] | None = None, **values: str) -> dict[str, str]:
    """The environment every child run gets (offline Ultralytics, unbuffered Python; CUDA numbers the GPUs as NVML
    does, by PCI bus, so that ``[executor] gpu_index`` N is the GPU the preflight and the sampler read: CUDA's own
    order puts the fastest first, another GPU on a machine of mixed ones)."""
    env = {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "YOLO_OFFLINE": "1",
        "YOLO_CONFIG_DIR": yolo_config_dir,
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.update(extra or {})
    env.update(values)
    return env


def pretrained_dir(workspace: Path) -> Path | None:
    """The workspace's ``pretrained/`` folder when it has one (the training sandbox shows it read-only)."""
    p = Path(workspace) / PRETRAINED_DIR
    return p if p.is_dir() else None


def train_vars(job: TrainJob, data: str, out: str, pretrained: Path | str | None = None) -> dict[str, str]:
    """The train.py interface (docs: the workspace contract) as environment variables;
    ``pretrained``: the workspace's pretrained/ folder as train.py's machine sees it."""
    env = {
        "LOOPER_BUDGET_SECONDS": str(int(job.budget_seconds)),
        "LOOPER_DATA": data,
        "LOOPER_OUT": out,
        "LOOPER_SEED": str(job.seed if job.seed_value is None else job.seed_value),
        "LOOPER_DEVICE": job.device or "cpu",
    }
    if job.max_steps > 0:  # a step budget: a busy machine cannot silently shrink a run
        env["LOOPER_MAX_STEPS"] = str(int(job.max_steps))
    if pretrained:
        env["LOOPER_PRETRAINED_DIR"] = str(pretrained)
    if job.threads > 0:  # runs side by side ([loop] seed_jobs): the CPU threads this run may use
        env["LOOPER_THREADS"] = str(int(job.threads))
    return env


def eval_command(python: str, evaluate_py: str, weights: str, data: str, out: str, device: str) -> list[str]:
    """evaluate.py's command line (docs: the workspace contract), whichever machine it runs on."""
    argv = [python, evaluate_py, "--weights", weights, "--data", data, "--out", out]
    return argv + ["--device", device] if device else argv


def run_result(s: proc.Supervised) -> RunResult:
    """A supervised child's end as a :class:`RunResult`."""
    return RunResult(exit_code=s.exit_code, signal=s.signal, timed_out=s.timed_out, stalled=s.stalled,
                     cancelled=s.stopped_by == "cancel", seconds=s.seconds, log_tail=s.log_tail,
                     limit=s.limit, log_error=s.log_error, started=s.started, held_seconds=s.held_seconds)


def fault_result(message: str, code: int, seconds: float = 0.0) -> RunResult:
    """A run that never got going because the executor could not do its part."""
    return RunResult(exit_code=None, seconds=seconds, transport_exit_code=code, transport_error=message)


def local_preflight(name: str, workspace: Path, python: str) -> tuple[dict[str, Any], list[str]]:
    """Free disk under the workspace and the interpreter, checked on this machine."""
    metrics: dict[str, Any] = {"executor": name}
    problems: list[str] = []
    free = shutil.disk_usage(workspace).free
    metrics["disk_free_gb"] = round(free / 2**30, 2)
    if free < MIN_FREE_BYTES:
        problems.append(f"disk nearly full on {name}: {free / 2**20:.0f} MiB free (need 1024 MiB)")
    if not Path(python).exists() and shutil.which(python) is None:
        problems.append(f"python interpreter not found: {python}")
    return metrics, problems


def prepare_local_data(python: str, prepare_py: Path, path: Path, label: str, scale: str, seed: int,
                       cwd: Path, env: dict[str, str]) -> Verdict:
    """Build the data set at ``path`` with prepare.py when missing, then hash it. prepare.py is told
    where the workspace keeps the test pages' secret seed (``cwd/.looper/test_seed``, drawn there the
    first time) through its environment, never its argv."""
    if path.exists() and not path.is_dir():
        return Verdict.errored(f"[data] dir = {label!r} names a file ({path}), not a data folder: import it "
                               f"first (looper data import {path} --out DIR) and set [data] dir to DIR")
    if not (path / "manifest.json").is_file():
        if path.exists() and any(path.iterdir()):
            return Verdict.errored(f"data folder {label} exists but has no manifest.json: move it away or finish "
                                   f"preparing it; an export (COCO, Ultralytics) is imported with "
                                   f"`looper data import SOURCE --out {label}`")
        env = {**env, TEST_SEED_ENV: str(secret_seed_file(cwd))}
        done = proc.run([python, str(prepare_py), "--out", str(path), "--scale", scale, "--seed", str(seed)],
                        cwd=cwd, env=env, timeout=3600)
        if not done.ok or not (path / "manifest.json").is_file():
            return Verdict.errored(f"prepare.py failed (exit {done.exit_code}): "
                                   + last_lines(done.stderr or done.stdout, 5))
    hashed = hash_local_data(path, label)
    return hashed.with_metrics(label_index=label_index(python, path, cwd, env)) if hashed.ok else hashed


LABEL_INDEX = Path(__file__).resolve().parents[1] / "data" / "labelindex.py"


def label_index(python: str, path: Path, cwd: Path, env: dict[str, str]) -> str:
    """The data set's label index (Ultralytics' labels.cache over each distinct tile, looper/data/labelindex.py),
    made by the runs' own interpreter where missing or stale, kept where it matches: one line a split, or why it
    could not be made. Never an error: without it each run scans the labels itself, as it did before."""
    try:
        done = proc.run([python, str(LABEL_INDEX), str(path)], cwd=cwd, env=env, timeout=600)
    except OSError as exc:  # no such interpreter: the preflight names it; the index is only not made
        return f"not made (exit None): {exc}"
    lines = [ln for ln in (done.stdout or "").splitlines() if ln.startswith("labelindex ")]
    if done.ok and lines:
        return "; ".join(ln.removeprefix("labelindex ") for ln in lines)
    return f"not made (exit {done.exit_code}): " + last_lines(done.stderr or done.stdout, 2)


def hash_local_data(path: Path, label: str) -> Verdict:
    """The data set's manifest hash; an error when it has no manifest."""
    if not (path / "manifest.json").is_file():
        return Verdict.errored(f"data missing: {label}/manifest.json does not exist")
    digest, files = tree_hash(path)
    return Verdict.passed({"hash": digest, "files": files})


class DataFolder:
    """The data folder, set once per loop (``use_data``) so jobs stay small."""

    _data_dir: str = "data"

    def use_data(self, data_dir: str) -> None:
        self._data_dir = data_dir

    def plan(self, data_dir: str, runs: int) -> str:
        """What the night tells its executor once, before the first run: the data folder, and how many runs may be
        at a time (looper.executors.limits.sharing; the local executor sizes its boxes ahead by it). Returns what
        the night should say of it ("" for nothing)."""
        self.use_data(data_dir)
        return ""

    def close(self) -> None:
        """The night is over (the local executor ends the boxes it started ahead of runs; the others hold none)."""


def sandboxed_eval_argv(python: str, job: EvalJob, data_dir: Path, env: dict[str, str], policy: Any,
                        script: str = "evaluate.py", **node: Any) -> list[str]:
    """``python -I`` on the harness's copy of evaluate.py (``eval/`` next to METRICS.json) in the
    evaluation sandbox, writing ``eval/out/METRICS.json``; ``node``: a compute node's device list and bwrap;
    ``script``: another file of ``eval/`` to run (the threshold evaluation's stream_eval.py)."""
    import looper.executors.limits as limits
    import looper.executors.sandbox as sandbox
    eval_dir = job.metrics_path.parent / "eval"
    node.setdefault("tmp_bytes", limits.current().caps.tmp_max_bytes)  # [limits] tmp_max_bytes (issue 39)
    return sandbox.eval_argv(python, eval_dir / script, weights=job.weights, data_dir=data_dir,
                             out_dir=eval_dir / "out", env=env, device=job.device, policy=policy, **node)
