"""What the SSH executor's end-to-end tests share (tests/executors/ssh/test_ssh_executor*.py): a training job
for the fixture checkout of conftest.py, run in a folder of the test's own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from looper.executors.base import TrainJob
from looper.executors.ssh.executor import SshExecutor

Make = Callable[..., SshExecutor]


def _job(checkout: Path, tmp: Path, name: str = "run", budget: float = 30, grace: float = 5,
         stall: float = 30, device: str = "") -> TrainJob:
    return TrainJob(checkout=checkout, out_dir=tmp / name / "out", seed=7, budget_seconds=budget,
                    grace_seconds=grace, stall_seconds=stall, log_path=tmp / name / "train.log", device=device)
