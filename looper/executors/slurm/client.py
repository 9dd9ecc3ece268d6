"""The SLURM client tools with a timeout and faults in words, and what a watcher reads of a job's output file."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper import proc
from looper.executors.base import LineSink
from looper.executors.common import (
    NO_TOOL_CODE,
    last_lines,
)
from looper.executors.slurm.scheduler import ACTIVE_STATES, UNREACHABLE, parse_scontrol

TOOLS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo")


class SlurmFault(Exception):
    """The cluster could not do what was asked: a harness fault (may be retried)."""

    def __init__(self, message: str, code: int = NO_TOOL_CODE, retry: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.retry = retry


@dataclass
class Attempt:
    """One submitted job and what the watcher saw of it."""

    job_id: str
    output: Path
    submitted: float
    started: float | None = None
    stopped_by: str = ""
    stop_at: float | None = None
    killed: bool = False
    offset: int = 0
    cut: proc.LineCutter = field(default_factory=lambda: proc.LineCutter(proc.Limits().line_max_bytes))
    last_growth: float = 0.0


def pump_output(at: Attempt, log: Any, tail: deque[str], on_line: LineSink | None, final: bool) -> None:
    """Read what the job's output file grew by; every complete line to the log and on_line."""
    try:
        with open(at.output, "rb") as fh:
            fh.seek(at.offset)
            while chunk := fh.read(1 << 20):  # in bounded chunks, each line cut as it arrives
                at.offset += len(chunk)
                at.last_growth = time.monotonic()
                proc.emit_lines(at.cut.feed(chunk), log, tail, on_line)
    except FileNotFoundError:
        return
    if final:
        proc.emit_lines(at.cut.feed(b"", final=True), log, tail, on_line)


class SlurmClient:
    """The SLURM client tools (sbatch, squeue, scontrol, scancel) with a timeout, faults in words."""

    def __init__(self, tool_timeout: float = 30.0) -> None:
        self.tool_timeout = tool_timeout

    def tool(self, argv: Sequence[str], what: str, cwd: Path | None = None) -> proc.Completed:
        """Run a SLURM client command; a connection failure or timeout is a :class:`SlurmFault`."""
        try:
            got = proc.run(list(argv), cwd=cwd, timeout=self.tool_timeout)
        except OSError as exc:
            raise SlurmFault(f"slurm: {what}: {argv[0]} could not be started ({exc})", NO_TOOL_CODE, False) from exc
        if got.timed_out:
            raise SlurmFault(f"slurm: {what}: {argv[0]} did not answer within {self.tool_timeout:.0f} s "
                         "(controller unreachable?)", NO_TOOL_CODE)
        if got.exit_code != 0 and UNREACHABLE.search(got.stderr + got.stdout):
            raise SlurmFault(f"slurm: {what}: controller unreachable ({last_lines(got.stderr or got.stdout, 2)})",
                         got.exit_code if got.exit_code is not None else NO_TOOL_CODE)
        return got

    def submit(self, script: Path, cwd: Path) -> str:
        got = self.tool(["sbatch", "--parsable", str(script)], "submitting the job", cwd=cwd)
        if got.exit_code != 0:
            raise SlurmFault(f"slurm: sbatch refused the job (exit {got.exit_code}): "
                         f"{last_lines(got.stderr or got.stdout)}", got.exit_code or NO_TOOL_CODE, retry=False)
        job_id = got.stdout.strip().split(";")[0].strip()
        if not job_id.isdigit():
            raise SlurmFault(f"slurm: sbatch printed no job id: {got.stdout.strip()!r}", NO_TOOL_CODE, retry=False)
        return job_id

    def state(self, job_id: str) -> str:
        """The job's state from squeue ('' when squeue no longer lists it)."""
        got = self.tool(["squeue", "-h", "-j", job_id, "-o", "%T"], f"watching job {job_id}")
        if got.exit_code != 0:
            if "Invalid job id" in got.stderr:
                return ""
            raise SlurmFault(f"slurm: squeue failed for job {job_id} (exit {got.exit_code}): "
                         f"{last_lines(got.stderr or got.stdout)}", got.exit_code or NO_TOOL_CODE)
        return got.stdout.strip().splitlines()[0].strip() if got.stdout.strip() else ""

    def details(self, job_id: str) -> dict[str, str]:
        got = self.tool(["scontrol", "show", "job", "-o", job_id], f"reading job {job_id}")
        if got.exit_code != 0:
            raise SlurmFault(f"slurm: job {job_id} is gone from the controller: {last_lines(got.stderr or got.stdout)}",
                         got.exit_code or NO_TOOL_CODE)
        return parse_scontrol(got.stdout)

    def scancel(self, job_id: str, *extra: str) -> bool:
        try:
            return self.tool(["scancel", *extra, job_id], f"cancelling job {job_id}").exit_code == 0
        except SlurmFault:
            return False

    def wait_gone(self, job_id: str, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if self.state(job_id) not in ACTIVE_STATES:
                    return
            except SlurmFault:
                return
            time.sleep(0.5)
