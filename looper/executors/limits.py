"""Each sandboxed run's own resources (issue 39): memory, processes, private tmpfs sizes, a disk
quota for ``$LOOPER_OUT``, and ``oom_score_adj``, so that what a run takes costs the daemon nothing.

How each limit is applied (which applies where: docs/SECURITY.md, "Resources"):

- **memory** (``[limits] memory_max_bytes``): ``RLIMIT_DATA`` on every process of the run (a
  larger allocation fails: ``MemoryError``), and where the daemon may write the cgroup file system
  (root, cgroup v1 here; v2 through ``systemd-run --scope`` where systemd runs the machine) a memory
  cgroup for the whole run, tmpfs pages included: the kernel kills the run at the limit;
- **processes** (``pids_max``): a pids cgroup where one can be made (threads count); else
  ``RLIMIT_NPROC`` at the processes this user already has + ``pids_max`` (it never binds root);
- **/tmp and /dev/shm** (``tmp_max_bytes``): bwrap's ``--size`` on the two tmpfs mounts
  (looper.executors.sandbox); full, a write fails with ENOSPC naming the path;
- **$LOOPER_OUT** (``out_max_bytes``, ``out_max_files``): ``RLIMIT_FSIZE`` (one file larger fails
  with EFBIG) and a watch that sums the folder every second and stops the run past the quota;
  the quota is never more than the disk has free beyond ``min_free_bytes``;
- ``oom_score_adj`` (1000): the kernel's OOM killer takes the run's processes before the daemon.

:class:`Box` applies them to one run (:meth:`Box.wrap` its argv, :meth:`Box.check` the watch) and
reports what it saw (:meth:`Box.seen`); looper.core.run.limits decides which limit a run hit.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from looper.core.run import limits as core
from looper.workspace import trees

CGROUP_ROOT = Path("/sys/fs/cgroup")
_COUNTER = itertools.count(1)
HELD_EVERY = 10  # polls (seconds) between two looks for deleted files a run holds, when the disk gave no cause
# sh -c JOIN sh ADJ CGROUP_PROCS... -- ARGV: the run's first process sets its oom_score_adj and joins
# its cgroups, then becomes ARGV (the same pid: everything it starts inherits both).
JOIN = ('adj=$1; shift; echo "$adj" > /proc/self/oom_score_adj || { echo "looper limits: cannot set '
        'oom_score_adj" >&2; exit 125; }; while [ "$1" != "--" ]; do echo $$ > "$1" || { echo "looper limits: '
        'cannot join the cgroup $1" >&2; exit 125; }; shift; done; shift; exec "$@"')


@functools.lru_cache(maxsize=1)
def machine() -> dict[str, int]:
    """This machine's memory (bytes), cores and kernel pid_max."""
    memory = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pid_max = 32768
    return {"memory": memory or 4 << 30, "cores": os.cpu_count() or 1, "pid_max": pid_max}


def caps_from(section: Any, runs: int = 1) -> core.Caps:
    """``[limits]`` as the caps a run gets (0 resolved from this machine, shared by ``runs`` runs at a time:
    looper.core.run.limits.derived); all 0 with ``run_limits = false``."""
    if not getattr(section, "run_limits", True):
        return core.Caps()
    m = machine()
    auto = core.derived(m["memory"], m["cores"], m["pid_max"], runs)

    def pick(key: str) -> int:
        return int(getattr(section, key, 0) or 0) or auto[key]

    return core.Caps(memory_max_bytes=pick("memory_max_bytes"), pids_max=pick("pids_max"),
                     tmp_max_bytes=pick("tmp_max_bytes"), out_max_bytes=pick("out_max_bytes"),
                     out_max_files=int(getattr(section, "out_max_files", 100_000) or 0),
                     shared_by=1 if int(getattr(section, "memory_max_bytes", 0) or 0) else max(1, runs))


def sharing(cfg: Any) -> int:
    """The runs at a time that share the memory of the machine they run on under ``cfg``: on this one (the local
    executor) looper.core.run.slots.host_runs; on an ssh host the same count (every worker's seeds side by side,
    with prestart each evaluated beside the next training), a share of the host's own memory and cores it
    derives (:func:`from_request`); 1 on a SLURM node (its job's ``--mem``)."""
    from looper.core.run.slots import host_runs, prestart

    loop = cfg.loop
    if cfg.executor.kind not in ("local", "ssh"):
        return 1
    return host_runs(loop.seed_jobs, loop.workers, prestart(loop.prestart, cfg.executor.require_gpu))


def _own_cgroup(controller: str) -> Path | None:
    """This process's cgroup folder of a v1 ``controller``, when that hierarchy is mounted here."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            folder = CGROUP_ROOT / controller / parts[2].lstrip("/")
            return folder if folder.is_dir() else None
    return None


@functools.lru_cache(maxsize=4)
def cgroup_parents() -> dict[str, Path]:
    """The v1 cgroups (``memory``, ``pids``) this daemon may make a run's cgroup in (probed once)."""
    found: dict[str, Path] = {}
    for controller, knob in (("memory", "memory.limit_in_bytes"), ("pids", "pids.max")):
        parent = _own_cgroup(controller)
        if parent is None:
            continue
        probe = parent / f"looper-probe-{os.getpid()}"
        try:
            probe.mkdir()
            ok = (probe / knob).exists() and os.access(probe / "cgroup.procs", os.W_OK)
            probe.rmdir()
        except OSError:
            continue
        if ok:
            found[controller] = parent
    return found


@functools.lru_cache(maxsize=1)
def systemd_scope() -> bool:
    """``systemd-run --scope`` works here (cgroup v2 with systemd as init): probed once."""
    exe = shutil.which("systemd-run")
    if exe is None or not Path("/run/systemd/system").is_dir():
        return False
    from looper import proc

    try:
        return proc.run([exe, *_user(), "--scope", "--quiet", "--collect", "-p", "TasksMax=64", "true"], timeout=20).ok
    except OSError:
        return False


def _user() -> list[str]:
    """A daemon that is not root asks its own user manager (systemd delegates memory and pids to it)."""
    return ["--user"] if os.getuid() != 0 else []


def backend() -> str:
    """Which mechanism carries the memory and process limits here: ``cgroup-v1``, ``systemd`` or ``rlimits``."""
    if cgroup_parents():
        return "cgroup-v1"
    return "systemd" if systemd_scope() else "rlimits"


def preflight() -> tuple[str, list[str]]:
    """(how the limits apply here, in words; problems): the limits need ``prlimit`` (util-linux)."""
    if current().caps == core.Caps():
        return "off ([limits] run_limits = false)", []
    if shutil.which("prlimit") is None:
        return "none", ["prlimit (util-linux) is not installed: each run's memory and file-size limits need it "
                        "(sudo apt-get install -y util-linux), or set [limits] run_limits = false"]
    return backend(), []


def _count_user_processes(uid: int) -> int:
    n = 0
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and p.stat().st_uid == uid:
                n += 1
        except OSError:
            continue
    return n


def _folder_usage(folder: Path, stop_at: int) -> tuple[int, int, int]:
    """(bytes on disk, entries, folders too deep to enter) under ``folder``: walked iteratively through
    folder descriptors, links not followed (looper.workspace.trees); stops counting past ``stop_at`` entries."""
    size = 0
    walk = trees.Walk(folder, max_entries=stop_at, max_depth=trees.MAX_DEPTH)
    for _rel, st in walk:
        size += max(st.st_blocks * 512, st.st_size if not stat.S_ISDIR(st.st_mode) else 0)
    return size, walk.entries, walk.too_deep


def _descendants(leader: int) -> list[int]:
    """``leader`` and every process under it (from /proc's parent links; one pass)."""
    children: dict[int, list[int]] = {}
    for p in os.scandir("/proc"):
        if not p.name.isdigit():
            continue
        try:
            with open(f"/proc/{p.name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(p.name))
    found, todo = [], [leader]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def held_deleted(pids: Sequence[int], device: int) -> int:
    """Bytes on ``device`` held by ``pids`` in files deleted but still open or mapped (each counted once, by
    its blocks): a run that unlinks what it writes still fills the disk (issue 48)."""
    seen: set[int] = set()
    total = 0
    for pid in pids:
        for sub in ("fd", "map_files"):
            try:
                it = os.scandir(f"/proc/{pid}/{sub}")
            except OSError:
                continue
            with it:
                for e in it:
                    try:
                        st = os.stat(e.path)
                    except OSError:
                        continue
                    if st.st_nlink == 0 and st.st_dev == device and st.st_ino not in seen and stat.S_ISREG(st.st_mode):
                        seen.add(st.st_ino)
                        total += st.st_blocks * 512
    return total


@dataclass(frozen=True)
class Settings:
    """What every later run's :class:`Box` starts from (set once by the daemon: :func:`configure`)."""

    caps: core.Caps = core.Caps()  # not configured (a test driving an executor alone): no limits
    oom_score_adj: int = 1000
    min_free_bytes: int = 0
    runs: int = 1  # the runs at a time that share the machine's memory (looper.core.run.slots.host_runs)
    derived: tuple[str, ...] = ()  # the caps [limits] left at 0 (this machine's figures; an ssh host derives its own)


_SETTINGS = [Settings()]


def configure(section: Any, runs: int = 1) -> Settings:
    """The daemon's ``[limits]`` for every later run (looper.night.loop.open_daemon, once per daemon), ``runs``
    at a time; the empty run cgroups a daemon that is gone left behind are removed (one still holding processes
    stays)."""
    caps = caps_from(section, runs)
    derived = tuple(k for k in core.DERIVED if not int(getattr(section, k, 0) or 0)) if caps != core.Caps() else ()
    _SETTINGS[0] = Settings(caps, int(getattr(section, "oom_score_adj", 1000)),
                            int(getattr(section, "min_free_bytes", 0)), max(1, runs), derived)
    if _SETTINGS[0].caps != core.Caps():
        for parent in cgroup_parents().values():
            for left in parent.glob("looper-run-*"):
                pid = left.name.split("-")[2]
                if pid.isdigit() and not Path(f"/proc/{pid}").exists():  # its daemon is gone (never a live one's)
                    Box._remove(left)
    return _SETTINGS[0]


def current() -> Settings:
    return _SETTINGS[0]


REQUEST = "LOOPER_LIMITS"  # the environment entry asking ``looper.remote run`` for these limits on its host


def request() -> dict[str, str]:
    """The daemon's limits as an environment entry for a run on an ssh host (none when off), with the names of
    those ``[limits]`` left at 0 (``derive``): the host derives them from its own machine (:func:`from_request`).
    With no limits (``run_limits = false``) it still carries the runs at a time (the host's share of its cores
    for each run, looper.remote ``cmd_run``), and nothing else."""
    s = current()
    if s.caps == core.Caps():
        return {REQUEST: json.dumps({"runs": s.runs})} if s.runs > 1 else {}
    return {REQUEST: json.dumps({**dataclasses.asdict(s.caps), "oom_score_adj": s.oom_score_adj,
                                 "min_free_bytes": s.min_free_bytes, "derive": list(s.derived), "runs": s.runs},
                                sort_keys=True)}


def from_request(env: dict[str, str], out_dir: Path | None) -> Box:
    """The host's side of :func:`request` (taken out of ``env``): a Box with those limits, none when absent; the
    limits the daemon's ``[limits]`` left at 0 from this host's memory, cores and pid_max, shared by the runs at a
    time the daemon puts here (``runs``: its workers; looper.core.run.limits.on_host). A request it cannot read
    raises ValueError with the words (looper.remote run refuses the run: never one with fewer limits than asked)."""
    raw = env.pop(REQUEST, "")
    if not raw:
        return Box(core.Caps(), out_dir)
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"LOOPER_LIMITS is not JSON ({exc})") from None
    asked = core.read_request(parsed)
    m = machine()
    caps = core.on_host(asked.caps, asked.derive, core.derived(m["memory"], m["cores"], m["pid_max"], asked.runs), asked.runs)
    return Box(caps, out_dir, asked.oom_score_adj, asked.min_free_bytes, max(1, asked.runs))


def box(out_dir: Path | None = None) -> Box:
    """A :class:`Box` with the daemon's settings; ``out_dir``: the run's ``$LOOPER_OUT`` (its quota)."""
    s = current()
    return Box(s.caps, out_dir, s.oom_score_adj, s.min_free_bytes)


@dataclass
class Box:
    """The limits of one run (training or evaluation): make its cgroups, wrap its argv, watch its
    ``$LOOPER_OUT``, say what it saw, remove the cgroups. ``out_dir`` None: no quota (evaluation's
    output folder is the harness's)."""

    caps: core.Caps
    out_dir: Path | None = None
    oom_score_adj: int = 1000
    min_free_bytes: int = 0
    runs: int = 1  # the runs at a time that share the machine (an ssh host's: the daemon's request)

    def __post_init__(self) -> None:
        self.cgroups: dict[str, Path] = {}
        self.quota = 0
        self.stopped = ""
        self.label = "$LOOPER_OUT"  # what the quota's words call ``out_dir``
        self.leader = 0  # the run's first process (started): its tree is searched for deleted files it holds
        self.free0 = 0  # the disk's free bytes when the run started
        self.polls = 0
        if self.out_dir is not None and self.caps.out_max_bytes:
            free = self.free0 = shutil.disk_usage(self.out_dir).free
            self.quota = core.quota(self.caps.out_max_bytes, free, self.min_free_bytes)

    @property
    def on(self) -> bool:
        return self.caps != core.Caps()

    def __enter__(self) -> Box:
        if not self.on:
            return self
        name = f"looper-run-{os.getpid()}-{next(_COUNTER)}"
        for controller, parent in cgroup_parents().items():
            value = self.caps.memory_max_bytes if controller == "memory" else self.caps.pids_max
            if not value:
                continue
            folder = parent / name
            try:
                folder.mkdir()
                knob = "memory.limit_in_bytes" if controller == "memory" else "pids.max"
                (folder / knob).write_text(str(value))
            except OSError:
                self._remove(folder)
                continue
            self.cgroups[controller] = folder
        return self

    def __exit__(self, *exc: object) -> None:
        for folder in self.cgroups.values():
            self._remove(folder)

    @staticmethod
    def _remove(folder: Path) -> None:
        try:
            folder.rmdir()
        except OSError:
            pass  # processes still in it (they are being killed) or already gone

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` with its limits: its cgroups joined, ``oom_score_adj`` set, rlimits (``prlimit``)."""
        if not self.on:
            return list(argv)
        rl = []
        if self.caps.memory_max_bytes:
            rl.append(f"--data={self.caps.memory_max_bytes}:{self.caps.memory_max_bytes}")
        if self.quota:
            rl.append(f"--fsize={self.quota}:{self.quota}")
        if self.caps.pids_max and "pids" not in self.cgroups and os.getuid() != 0:
            n = _count_user_processes(os.getuid()) + self.caps.pids_max
            rl.append(f"--nproc={n}:{n}")
        prefix: list[str] = []
        if self.caps.pids_max and "pids" not in self.cgroups and "memory" not in self.cgroups and systemd_scope():
            prefix = ["systemd-run", *_user(), "--scope", "--quiet", "--collect",
                      "-p", f"TasksMax={self.caps.pids_max}", "-p", f"MemoryMax={self.caps.memory_max_bytes}"]
        joins = [str(f / "cgroup.procs") for f in self.cgroups.values()]
        limited = [shutil.which("prlimit") or "prlimit", *rl, "--core=0:0", "--", *argv]
        return [*prefix, "/bin/sh", "-c", JOIN, "sh", str(self.oom_score_adj), *joins, "--", *limited]

    def started(self, pid: int) -> None:
        """The run's first process (``looper.proc.supervise``'s ``on_start``)."""
        self.leader = pid

    def _pids(self) -> list[int]:
        for folder in self.cgroups.values():  # every process of the run, wherever it moved
            try:
                return [int(x) for x in (folder / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                continue
        return _descendants(self.leader) if self.leader else []

    def check(self) -> str | None:
        """The quota watch (polled by looper.proc while the run runs): words once ``$LOOPER_OUT`` is over,
        counting the files its processes deleted but hold open on that disk."""
        if self.out_dir is None or not (self.quota or self.caps.out_max_files):
            return None
        used, entries, deep = _folder_usage(self.out_dir, self.caps.out_max_files + 1)
        held, self.polls = 0, self.polls + 1
        try:  # the run's deleted files are looked for when the disk lost over half the quota since it started
            # (what they hold is part of that loss), and every HELD_EVERY polls whatever the disk says (another
            # process freeing space on a shared disk could hide the loss)
            lost = self.free0 - shutil.disk_usage(self.out_dir).free
            if self.quota and (lost > self.quota // 2 or self.polls % HELD_EVERY == 0):
                held = held_deleted(self._pids(), os.stat(self.out_dir).st_dev)
        except OSError:
            held = 0
        self.stopped = core.over_quota(used, entries, self.quota, self.caps.out_max_files, held, deep,
                                       trees.MAX_DEPTH, self.label) or ""
        return self.stopped or None

    def _counter(self, controller: str, file: str, key: str) -> int:
        folder = self.cgroups.get(controller)
        try:
            for line in (folder / file).read_text().splitlines() if folder else ():
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
        except (OSError, ValueError):
            pass
        return 0

    def seen(self, log_error: str = "", stopped: str = "") -> core.Seen:
        """What the harness saw of this run, read after it ended (before the cgroups are removed)."""
        used, free = 0, -1
        if self.out_dir is not None and self.out_dir.is_dir():
            used = _folder_usage(self.out_dir, self.caps.out_max_files + 1)[0]
            free = shutil.disk_usage(self.out_dir).free
        return core.Seen(stopped=stopped, oom_kills=self._counter("memory", "memory.oom_control", "oom_kill"),
                         pids_refused=self._counter("pids", "pids.events", "max"),
                         log_full="No space left" in log_error or "Errno 28" in log_error,
                         out_bytes=used, disk_free=free, min_free_bytes=self.min_free_bytes)
