"""The night's look at its GPU the way a run sees it, before any run (``[executor] require_gpu``).

An NVML reading says a GPU is there; it does not say a run can use it: a run is torch on CUDA inside the training
sandbox under its run limits, and each can break CUDA where a CPU never notices (issue 46: every sandboxed run on
an H200 crashed, and the night halted with nothing useful to say). So the preflight runs
looper.core.run.probe's program the way a run runs (same interpreter, environment, sandbox and limits, a fresh
box of its own), and where that fails, again with one part taken away at a time, so that the words name the part
(looper.core.run.probe.verdict decides). Used by the local executor's preflight and, on an ssh host, by
``looper.remote check-device``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

import looper.executors.limits as run_limits
import looper.executors.sandbox as sandbox
from looper import proc
from looper.core.run import limits as core
from looper.core.run import probe


def attempts(device: str, *, python: str, env: Mapping[str, str], policy: sandbox.SandboxPolicy, caps: core.Caps,
             folder: Path, oom_score_adj: int = 1000, min_free_bytes: int = 0) -> tuple[probe.Attempt, ...]:
    """The attempts looper.core.run.probe.next_attempt asks for, each in a fresh process (its own box where the
    sandbox is on); ``folder``: an empty folder of the harness's (its ``code``, ``out`` and ``data`` made here)."""
    for part in ("code", "out", "data"):
        (folder / part).mkdir(parents=True, exist_ok=True)
    tried: tuple[probe.Attempt, ...] = ()
    while (where := probe.next_attempt(device, tried, bool(caps.memory_max_bytes), policy.enabled,
                                       caps != core.Caps())) is not None:
        tried += (_attempt(where, device, python, {**env, "LOOPER_OUT": str(folder / "out")}, policy, caps, folder,
                           oom_score_adj, min_free_bytes),)
    return tried


def _attempt(where: str, device: str, python: str, env: dict[str, str], policy: sandbox.SandboxPolicy,
             caps: core.Caps, folder: Path, oom_score_adj: int, min_free_bytes: int) -> probe.Attempt:
    kept = {probe.BOX: caps, probe.NO_MEMORY_LIMIT: dataclasses.replace(caps, memory_max_bytes=0),
            probe.NO_SANDBOX: dataclasses.replace(caps, memory_max_bytes=0)}.get(where, core.Caps())
    argv = [python, "-c", probe.PROGRAM, device]
    if policy.enabled and where in (probe.BOX, probe.NO_MEMORY_LIMIT):
        argv = sandbox.train_argv(argv, checkout=folder / "code", out_dir=folder / "out", data_dir=folder / "data",
                                  env=env, policy=policy, tmp_bytes=kept.tmp_max_bytes, code_folder=True)
    with run_limits.Box(kept, folder / "out", oom_score_adj, min_free_bytes) as box:
        done = proc.run(box.wrap(argv), cwd=folder / "code", env=env, timeout=probe.TIMEOUT_S)
    said = "\n".join(part.rstrip() for part in (done.stderr, done.stdout) if part.strip())  # its own line last
    return probe.Attempt(where, None if done.timed_out else done.exit_code, said)


def once_a_night(held: dict[str, tuple[str, str]], device: str,
                 check: Callable[[str], tuple[str, str]]) -> tuple[str, str]:
    """(the check's line, its problem): ``check(device)`` until it passes once, then the pass ``held`` keeps (the
    preflight runs before every experiment; a fresh box and torch's import cost seconds each time)."""
    if device in held:
        return held[device]
    said, problem = check(device)
    if not problem:
        held[device] = (said, "")
    return said, problem
