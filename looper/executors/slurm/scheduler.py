"""What the scheduler's output says happened: pure functions over ``scontrol``/``sinfo`` text (no process,
no file): job states, exit codes, the end of a job as the change's doing or the cluster's fault, partitions;
and what a job asks of it (:class:`BatchOptions`: the batch script's text)."""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from looper.errors import ConfigError

#: states in which the job still holds (or waits for) resources
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "REQUEUED",
                 "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SIGNALING", "STAGE_OUT", "STOPPED"}
WAITING_STATES = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
#: end states that are the cluster's fault, never the change's
HARNESS_STATES = {"NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}

UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|connect failure|"
    r"Zero Bytes were transmitted|Communication connection failure|Transport endpoint is not connected|"
    r"slurm_load_partitions|Unable to establish controller",
    re.IGNORECASE,
)
MEM_EXCEEDED = re.compile(r"Exceeded job memory limit|exceeded memory limit|oom-kill event", re.IGNORECASE)


# -- the pure part: scheduler output -> what happened ------------------------------------------
def parse_scontrol(text: str) -> dict[str, str]:
    """``scontrol show job -o ID`` output -> {key: value} (first job only)."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    fields: dict[str, str] = {}
    key = ""
    for token in line.split(" "):
        if "=" in token and re.match(r"^[A-Za-z][A-Za-z0-9/:_.-]*=", token):
            key, _, value = token.partition("=")
            fields[key] = value
        elif key and token:  # a value with spaces (Comment=..., Command=...)
            fields[key] += " " + token
    return fields


def parse_exit_code(value: str) -> tuple[int | None, int | None]:
    """SLURM's ``ExitCode=n:s`` -> (exit code n, signal s or None)."""
    code, _, sig = value.partition(":")
    try:
        n = int(code)
    except ValueError:
        return None, None
    try:
        s = int(sig) if sig else 0
    except ValueError:
        s = 0
    return n, (s or None)


@dataclass(frozen=True)
class JobEnd:
    """What a finished job means for looper."""

    kind: str  # "done": the job's own end (success or the change's failure) | "harness": requeue
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    oom: bool = False
    reason: str = ""  # in words, for harness faults and the OOM line


def job_end(fields: dict[str, str], *, job_id: str, stopped_by: str = "", output: str = "") -> JobEnd:
    """Map a finished job's ``scontrol`` fields to an outcome.

    ``stopped_by`` is what looper itself did to the job ("budget", "stall", "cancel" or "");
    ``output`` is the tail of the job's output file (the non-cgroup memory kill says it there).
    """
    state = fields.get("JobState", "").split("+")[0].upper()
    reason = fields.get("Reason", "")
    code, sig = parse_exit_code(fields.get("ExitCode", ""))
    if state == "COMPLETED":
        return JobEnd("done", exit_code=code if code is not None else 0, signal=None)
    if state == "OUT_OF_MEMORY" or (state == "FAILED" and MEM_EXCEEDED.search(output)):
        # the change used more memory than the job asked for: its own fault (a crash)
        return JobEnd("done", exit_code=code if code else None, signal=None if code else 9, oom=True,
                      reason=f"slurm: OUT_OF_MEMORY: job {job_id} was killed for exceeding its memory "
                             f"limit (out of memory; JobState={state}, ExitCode={fields.get('ExitCode', '?')})")
    if stopped_by:
        # looper cancelled it (budget, stall, cancel): whatever SLURM says, that is how it ended
        return JobEnd("done", exit_code=code if code and not sig else None, signal=sig or 15)
    if state == "TIMEOUT":
        return JobEnd("done", exit_code=None, signal=sig or 15, timed_out=True,
                      reason=f"slurm: job {job_id} hit its SLURM time limit")
    if state == "FAILED":
        if reason in ("JobLaunchFailure", "launch_failed_requeued_held", "Prolog", "NodeDown",
                      "BadConstraints", "SystemFailure"):
            return JobEnd("harness", reason=f"slurm: job {job_id} FAILED ({reason}): the job could not be "
                                            "started on its node")
        if code:
            return JobEnd("done", exit_code=code, signal=None)
        if sig:
            return JobEnd("done", exit_code=None, signal=sig)
        return JobEnd("harness", reason=f"slurm: job {job_id} FAILED with no exit code ({reason or 'no reason'})")
    if state == "CANCELLED":
        return JobEnd("harness", reason=f"slurm: job {job_id} CANCELLED by someone other than looper")
    if state in HARNESS_STATES:
        return JobEnd("harness", reason=f"slurm: job {job_id} {state} ({reason or 'no reason given'})")
    return JobEnd("harness", reason=f"slurm: job {job_id} ended in a state looper does not know: "
                                    f"{state or 'none'} ({reason or 'no reason'})")


def partition_problems(sinfo: str, partition: str, need_gpu: bool, metrics: dict[str, Any]) -> list[str]:
    """``sinfo -h -o "%P %a %G"`` output -> what is wrong with the partition jobs go to (in words).

    ``partition`` empty means the cluster's default; ``metrics`` gets the partition and its gres.
    """
    table: dict[str, tuple[str, set[str]]] = {}
    default = ""
    for line in sinfo.splitlines():
        bits = line.split()
        if len(bits) < 2:
            continue
        pname, avail, gres = bits[0], bits[1], (bits[2] if len(bits) > 2 else "(null)")
        if pname.endswith("*"):
            pname = pname[:-1]
            default = pname
        old = table.get(pname, (avail, set()))
        table[pname] = (old[0], old[1] | ({gres} if gres != "(null)" else set()))
    wanted = partition or default
    metrics["partition"] = wanted
    if not wanted:
        return ["slurm: no partition configured and the cluster has no default partition"]
    if wanted not in table:
        return [f"slurm: partition {wanted!r} does not exist (known: {', '.join(sorted(table))})"]
    avail, gres_set = table[wanted]
    metrics["gres"] = sorted(gres_set)
    problems = []
    if avail != "up":
        problems.append(f"slurm: partition {wanted!r} is {avail}, not up")
    if need_gpu and not any(g.startswith("gpu") for g in gres_set):
        problems.append(f"slurm: GPU required but partition {wanted!r} has no gpu gres "
                        f"(node gres: {', '.join(sorted(gres_set)) or 'none'})")
    return problems


def time_limit_minutes(seconds: float) -> int:
    """SLURM's ``--time`` in whole minutes, rounded up, at least 1."""
    return max(1, math.ceil(seconds / 60.0))


@dataclass(frozen=True)
class BatchOptions:
    """The ``#SBATCH`` lines of every job of one workspace (``[executor]`` partition, gres, account,
    sbatch_extra; ``comment`` marks the workspace's jobs for ``reap``)."""

    partition: str = ""
    gres: str = ""
    account: str = ""
    extra: tuple[str, ...] = ()
    comment: str = ""

    @classmethod
    def of(cls, get: Callable[[str, Any], Any], comment: str) -> BatchOptions:
        """From the ``[executor]`` section, read through ``get(key, default)``; an extra entry that is not one
        sbatch option (no leading ``-``, or a line break) is a :class:`ConfigError` naming it."""
        extra = tuple(str(x) for x in get("sbatch_extra", []))
        for entry in extra:
            if not entry.startswith("-") or "\n" in entry:
                raise ConfigError(f"executor.sbatch_extra: not one sbatch option: {entry!r}")
        return cls(str(get("partition", "")).strip(), str(get("gres", "")).strip(), str(get("account", "")).strip(),
                   extra, comment)

    def script(self, name: str, output: Path, cwd: Path, argv: Sequence[str], env: dict[str, str],
               seconds: float) -> str:
        """The batch script: every directive first (sbatch stops reading at the first command), then the
        environment, cd, exec."""
        lines = ["#!/bin/sh", f"#SBATCH --job-name={name}", f"#SBATCH --comment={self.comment}",
                 f"#SBATCH --time={time_limit_minutes(seconds)}", f"#SBATCH --output={output}",
                 "#SBATCH --open-mode=append", "#SBATCH --no-requeue"]
        lines += [f"#SBATCH --{k}={v}" for k, v in (("partition", self.partition), ("gres", self.gres),
                                                    ("account", self.account)) if v]
        lines += [f"#SBATCH {extra}" for extra in self.extra]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
        lines += [f"cd {shlex.quote(str(cwd))} || {{ echo 'looper: checkout {cwd} is not on this node' >&2; "
                  "exit 97; }", "exec " + " ".join(shlex.quote(a) for a in argv), ""]
        return "\n".join(lines)
