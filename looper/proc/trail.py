"""The pid trail of the subprocess choke point (looper.proc), and what its two runners share: a finished short
command (:class:`Completed`), the environment a child gets, a process group's end."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# The pid trail: while a daemon runs, every child's process group is noted as
# ``<trail>/<pgid>.pid`` until it ends, so a restart after ``kill -9`` can end what the dead
# daemon left behind (training runs, agents, ssh clients). Each note records the leader's
# start time (from /proc), the boot it started in and its command line (the first words and a
# hash of all): a restart ends a group only when its leader is still that same process (same
# boot, same start time), so a stale note (a pid reused by an unrelated process) or a note in
# another format never gets anything killed.
_TRAIL: Path | None = None
TRAIL_FORMAT = "looper-pid/1"


def set_trail(folder: Path | None) -> None:
    global _TRAIL
    _TRAIL = Path(folder) if folder else None
    if _TRAIL:
        _TRAIL.mkdir(parents=True, exist_ok=True)


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_identity(pid: int) -> dict[str, str] | None:
    """The leader's start time (clock ticks after boot), boot id and command-line hash; None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    args = cmdline.rstrip(b"\0")
    return {"start": fields[19], "boot": _boot_id(), "cmd_sha256": hashlib.sha256(args).hexdigest()}


def _argv_sha(argv: Sequence[str]) -> str:
    return hashlib.sha256("\0".join(str(a) for a in argv).encode("utf-8", "surrogateescape")).hexdigest()


def _trail_add(pid: int, argv: Sequence[str]) -> Path | None:
    if _TRAIL is None:
        return None
    p = _TRAIL / f"{pid}.pid"
    ident = process_identity(pid) or {}
    record = {"format": TRAIL_FORMAT, "pgid": pid, "start": ident.get("start", ""), "boot": _boot_id(),
              "cmd_sha256": _argv_sha(argv), "cmd": " ".join(str(a) for a in argv[:4])[:300],
              "daemon": os.getpid()}
    try:
        p.write_text(json.dumps(record) + "\n")
    except OSError:
        return None
    return p


def _trail_remove(p: Path | None) -> None:
    if p is not None:
        p.unlink(missing_ok=True)


def _trail_check(p: Path) -> tuple[int | None, str]:
    """(the group to end, words): None when the note is not ours or its leader is another process."""
    try:
        pid = int(p.stem)
        record = json.loads(p.read_text(errors="replace"))
    except (ValueError, OSError):
        return None, f"ignored {p.name}: not a pid note looper wrote"
    if not isinstance(record, dict) or record.get("format") != TRAIL_FORMAT or record.get("pgid") != pid:
        return None, f"ignored {p.name}: not a pid note looper wrote"
    now = process_identity(pid)
    if now is None:
        return None, ""  # already gone: nothing to say
    what = str(record.get("cmd", ""))[:300]
    if not record.get("start") or (now["start"], now["boot"]) != (record.get("start"), record.get("boot")):
        return None, (f"left process {pid} alone: it is not the one a previous daemon started "
                      f"(its start time differs from {p.name}: {what})")
    try:
        if os.getpgid(pid) != pid:
            return None, f"left process {pid} alone: it no longer leads its process group ({what})"
    except ProcessLookupError:
        return None, ""
    return pid, what


def reap_trail(folder: Path) -> list[str]:
    """End the process groups a dead daemon left in its trail; one line for each ended or left alone."""
    ended = []
    folder = Path(folder)
    if not folder.is_dir():
        return ended
    for p in sorted(folder.glob("*.pid")):
        pgid, what = _trail_check(p)
        if pgid is not None and kill_group(pgid):
            ended.append(f"ended a process a previous daemon left behind: group {pgid} ({what})")
        elif what:
            ended.append(what)
        p.unlink(missing_ok=True)
    return ended


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    exit_code: int | None  # None: killed on timeout before it exited by itself
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    limit: str = ""  # run(max_output=, check=): the limit that stopped it, in words ("" when none did)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def _merged_env(env: Mapping[str, str] | None, inherit: bool) -> dict[str, str]:
    base = dict(os.environ) if inherit else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if env:
        base.update({k: str(v) for k, v in env.items()})
    return base


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_gone(pgid: int, within: float = 5.0, poll: float = 0.05) -> bool:
    """Wait up to ``within`` seconds for a process group to have no member left; True once it has none."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(poll)
    return False


def kill_group(pgid: int, wait: float = 5.0) -> bool:
    """TERM then KILL a process group; True when something was there to end."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    if group_gone(pgid, wait, poll=0.1):
        return True
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True
