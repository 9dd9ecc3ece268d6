"""Which of its resource limits a run hit (issue 39), from the harness's own evidence: pure.

A sandboxed run gets a memory limit, a process limit, size-limited private ``/tmp`` and
``/dev/shm`` and a disk quota for ``$LOOPER_OUT`` (looper/executors/limits.py applies them). Hitting any of
them is the candidate's crash, and the reason names the limit: :func:`limit_hit` decides from

- :class:`Caps`: the limits the run ran under (0: not applied);
- :class:`Seen`: what the harness measured itself (the quota watch, the cgroup counters, whether
  the daemon's own log write met a full disk, the free disk and ``$LOOPER_OUT``'s size after the run);
- the run's log tail (an ``OSError`` naming ``/tmp`` or ``/dev/shm`` full, ``File too large``, a
  refused fork, a ``MemoryError``).

A disk that is full is the run's doing only when it met ENOSPC, the disk has at most
``min_free_bytes`` free, and its ``$LOOPER_OUT`` holds what is missing: with those bytes back the
disk would have more than ``min_free_bytes`` free. Otherwise (something else filled the
disk, or train.py merely *printed* ENOSPC) nothing is decided here and the failure classification
(looper.core.fault.failure, a canary) goes on as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Caps:
    """The limits one run ran under, in bytes or counts; 0: that limit was not applied."""

    memory_max_bytes: int = 0
    pids_max: int = 0
    tmp_max_bytes: int = 0
    out_max_bytes: int = 0
    out_max_files: int = 0
    shared_by: int = 1  # memory_max_bytes is this many runs' equal share of the machine's (derived, not set)
    on_host: tuple[str, ...] = ()  # the limits an ssh host derived from its own machine ([limits] left them 0)

    def memory_words(self) -> str:
        """``[limits] memory_max_bytes = N``, and where it came from when it is a share or the host's own."""
        words = f"[limits] memory_max_bytes = {self.memory_max_bytes}"
        if "memory_max_bytes" in self.on_host:
            share = f" with {self.shared_by} runs at a time (loop.workers)" if self.shared_by > 1 else ""
            words += f", its share of 75 % of the ssh host's memory{share} (the key is 0: the host derives it)"
        elif self.shared_by > 1:
            words += (f", its share of 75 % of this machine's memory with {self.shared_by} runs at a time "
                      "(loop.seed_jobs x loop.workers, evaluations beside trainings with loop.prestart)")
        return words


#: The limits ``0`` in ``[limits]`` stands for: derived from the machine the runs run on (:func:`derived`).
DERIVED = ("memory_max_bytes", "pids_max", "tmp_max_bytes", "out_max_bytes")


def caps_of(raw: object) -> Caps:
    """The :class:`Caps` a JSON object names (an ssh host's word on what a run ran under): unknown keys and values
    that are not whole numbers left out, their defaults kept."""
    if not isinstance(raw, dict):
        return Caps()
    got: dict = {}
    for name in Caps.__dataclass_fields__:
        value = raw.get(name)
        if name == "on_host":
            if isinstance(value, (list, tuple)):
                got[name] = tuple(str(v) for v in value if v in DERIVED)
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            got[name] = value
    return Caps(**got)


@dataclass(frozen=True)
class Request:
    """What the daemon asks an ssh host for one run (``LOOPER_LIMITS``, looper/executors/limits.py ``request``):
    the caps, those its ``[limits]`` left at 0 (``derive``: the host's own), and the runs at a time there."""

    caps: Caps = Caps()
    derive: tuple[str, ...] = ()
    runs: int = 1
    oom_score_adj: int = 1000
    min_free_bytes: int = 0


_REQUEST_INTS = {**{n: 0 for n in Caps.__dataclass_fields__ if n not in ("on_host", "shared_by")},
                 "shared_by": 1, "runs": 1, "min_free_bytes": 0, "oom_score_adj": -1000}  # name -> least value


def read_request(asked: object) -> Request:
    """The :class:`Request` a parsed ``LOOPER_LIMITS`` names, strictly: an unknown key, a count that is not a
    whole number at least its least value, or a name outside :data:`DERIVED` raises ValueError naming it. The
    daemon writes the request itself, so a bad one is a harness bug; read leniently, it would become a run
    with no limits (or fewer), which says nothing of it."""
    if not isinstance(asked, dict):
        raise ValueError(f"LOOPER_LIMITS must be a JSON object, got {type(asked).__name__}")
    unknown = sorted(set(asked) - set(_REQUEST_INTS) - {"on_host", "derive"})
    if unknown:
        raise ValueError(f"LOOPER_LIMITS: unknown key(s) {', '.join(map(repr, unknown))}")
    got: dict = {}
    for name, least in _REQUEST_INTS.items():
        if name in asked:
            value = asked[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < least or (
                    name == "oom_score_adj" and value > 1000):
                bound = "-1000 to 1000" if name == "oom_score_adj" else f"at least {least}"
                raise ValueError(f"LOOPER_LIMITS: {name} must be a whole number {bound}, got {value!r}")
            got[name] = value
    names: dict[str, tuple[str, ...]] = {}
    for name in ("on_host", "derive"):
        value = asked.get(name, [])
        if not isinstance(value, list) or any(v not in DERIVED for v in value):
            raise ValueError(f"LOOPER_LIMITS: {name} must list names among {', '.join(DERIVED)}, got {value!r}")
        names[name] = tuple(value)
    caps = Caps(**{n: got[n] for n in Caps.__dataclass_fields__ if n in got}, on_host=names["on_host"])
    return Request(caps, names["derive"], **{n: got[n] for n in ("runs", "oom_score_adj", "min_free_bytes") if n in got})


def on_host(asked: Caps, derive: object, host: dict[str, int], runs: int = 1) -> Caps:
    """The caps a run gets on an ssh host: what the daemon asked, except the limits its ``[limits]`` left at 0
    (``derive``), which come from the host's own machine (``host``: :func:`derived` there for ``runs`` runs at a
    time, the night's workers): the daemon's machine, a laptop often, says nothing of a GPU host's memory."""
    names = tuple(n for n in DERIVED if isinstance(derive, (list, tuple)) and n in derive and host.get(n))
    if not names:
        return asked
    shared = max(1, runs) if "memory_max_bytes" in names else asked.shared_by  # the host's figure, its share
    return replace(asked, **{n: int(host[n]) for n in names}, shared_by=shared, on_host=names)


@dataclass(frozen=True)
class Seen:
    """What the harness measured of one run (never what train.py said)."""

    stopped: str = ""  # the quota watch stopped it, in words
    oom_kills: int = 0  # the run's memory cgroup: processes the kernel killed at the limit
    pids_refused: int = 0  # the run's pids cgroup: forks refused at the limit
    log_full: bool = False  # the daemon's write of the run's log met a full disk
    out_bytes: int = 0  # $LOOPER_OUT's size after the run
    disk_free: int = -1  # free bytes on the disk of $LOOPER_OUT after the run (-1: not measured)
    min_free_bytes: int = 0  # [limits] min_free_bytes


_NO_SPACE = re.compile(r"\[Errno 28\] No space left on device(?:: '(?P<path>[^']*)')?")
_TOO_LARGE = re.compile(r"\[Errno 27\] File too large")
_NO_FORK = re.compile(r"BlockingIOError: \[Errno 11\]|can't start new thread|Resource temporarily unavailable"
                      r"|fork: retry|pthread_create failed")
_NO_MEMORY = re.compile(r"^(?:\w+\.)*MemoryError\b|Cannot allocate memory|\[Errno 12\]", re.MULTILINE)
_GPU = re.compile(r"CUDA|cuda|GPU")
TMP_DIRS = ("/tmp", "/dev/shm")


def _disk_full(seen: Seen, tail: str) -> bool:
    return seen.log_full or bool(_NO_SPACE.search(tail))


# The training sandbox's own line (looper/executors/sandbox.py WATCH) after train.py ended: a private tmpfs is full.
_TMPFS_FULL = re.compile(r"^looper sandbox: (?P<path>/tmp|/dev/shm) is full", re.MULTILINE)


def _tmpfs_full(tail: str) -> str | None:
    for m in [*_TMPFS_FULL.finditer(tail), *_NO_SPACE.finditer(tail)]:
        path = m.group("path") or ""
        for d in TMP_DIRS:
            if path == d or path.startswith(d + "/"):
                return d
    return None


def _from_log(caps: Caps, tail: str, who: str) -> str | None:
    """What the run's own error lines show of a limit (each only where that limit was applied)."""
    tmp = _tmpfs_full(tail) if caps.tmp_max_bytes else None
    if tmp:
        return (f"{who} filled its private {tmp} ([limits] tmp_max_bytes = {caps.tmp_max_bytes}): "
                "No space left on device")
    if caps.out_max_bytes and _TOO_LARGE.search(tail):
        return (f"{who} wrote a file larger than [limits] out_max_bytes = {caps.out_max_bytes} "
                "(File too large)")
    if caps.pids_max and _NO_FORK.search(tail):
        return (f"{who} tried to run more than [limits] pids_max = {caps.pids_max} processes and threads "
                "(a fork was refused)")
    if caps.memory_max_bytes and _NO_MEMORY.search(tail) and not _GPU.search(tail):
        return f"{who} ran out of memory at {caps.memory_words()} (MemoryError)"
    return None


def limit_hit(caps: Caps, seen: Seen, tail: str, who: str = "train.py") -> str | None:
    """The limit the run hit, in words naming it; None when it hit none (as far as the evidence shows).
    ``who``: what ran (train.py, or "the agent" in its box: issue 48)."""
    if seen.stopped:
        return seen.stopped
    if seen.oom_kills and caps.memory_max_bytes:
        return (f"the kernel killed {seen.oom_kills} process(es) of the run at its memory limit "
                f"({caps.memory_words()})")
    if seen.pids_refused and caps.pids_max:
        return (f"{who} tried to run more than [limits] pids_max = {caps.pids_max} processes and threads "
                f"({seen.pids_refused} fork(s) refused)")
    by_log = _from_log(caps, tail, who)
    if by_log:
        return by_log
    if (_disk_full(seen, tail) and 0 <= seen.disk_free <= seen.min_free_bytes
            and seen.disk_free + seen.out_bytes > seen.min_free_bytes):
        return (f"{who} filled the disk: its $LOOPER_OUT holds {seen.out_bytes} bytes and the disk had "
                f"{seen.disk_free} bytes free, at most [limits] min_free_bytes = {seen.min_free_bytes} "
                "(No space left on device)")
    return None


def agent_limit_hit(caps: Caps, seen: Seen, tail: str) -> str | None:
    """The limit a boxed agent hit (issue 48), in words naming it: :func:`limit_hit`'s rules, and a bare
    ENOSPC, which in the box can only be its private ``/tmp`` or ``/dev/shm`` (its folders have a quota)."""
    hit = limit_hit(caps, seen, tail, who="the agent")
    if hit is None and caps.tmp_max_bytes and "No space left on device" in tail:
        hit = (f"the agent filled its private /tmp or /dev/shm ([limits] tmp_max_bytes = {caps.tmp_max_bytes}): "
               "No space left on device")
    return hit


def over_quota(out_bytes: int, out_files: int, max_bytes: int, max_files: int, held_bytes: int = 0,
               too_deep: int = 0, max_depth: int = 0, where: str = "$LOOPER_OUT") -> str | None:
    """The quota watch's rule: words once ``$LOOPER_OUT`` holds more than its quota, else None.
    ``held_bytes``: what the run's processes hold on that disk in files they deleted but keep open (or
    mapped): they take the disk as much as files in the folder do (issue 48). ``too_deep``: folders
    deeper than ``max_depth`` levels, which the watch does not enter (so could hide bytes): the run's limit."""
    total = out_bytes + max(0, held_bytes)
    if max_bytes and total > max_bytes:
        held = f", {held_bytes} of them in deleted files it still held open" if held_bytes > 0 else ""
        return (f"{where} grew past its quota, [limits] out_max_bytes = {max_bytes} ({total} bytes{held}): "
                "the run was stopped")
    if max_files and out_files > max_files:
        return (f"{where} holds more than [limits] out_max_files = {max_files} entries ({out_files}): "
                "the run was stopped")
    if too_deep:
        return (f"{where} holds folders more than {max_depth} levels deep ({too_deep} not entered): "
                "the run was stopped")
    return None


def quota(out_max_bytes: int, disk_free: int, min_free_bytes: int) -> int:
    """The run's ``$LOOPER_OUT`` quota: ``out_max_bytes``, never more than the disk can give while keeping
    ``min_free_bytes`` free (at least 1 byte: a quota of 0 would mean none)."""
    room = disk_free - min_free_bytes
    return max(1, min(out_max_bytes, room)) if out_max_bytes else max(1, room)


def derived(memory_bytes: int, cores: int, pid_max: int, runs: int = 1) -> dict[str, int]:
    """The limits ``0`` stands for in ``[limits]``, from this machine's memory, cores and pid_max, for ``runs``
    runs at a time on it (looper.core.run.slots.host_runs): they share 75 % of the memory (and its eighth for
    their tmpfs), each its equal part, so that together they never exhaust the machine. The kernel's OOM killer
    would take whichever run it found, blaming a candidate for the packing; at its own share a run's
    crash names the limit. The share comes from the configuration, never from how many run at the moment:
    a run alone gets what it gets beside others (packing changes a run's time, never its result)."""
    gib = 1 << 30
    pids = max(512, 128 * max(1, cores))
    share = max(1, runs)
    return {
        "memory_max_bytes": max(gib, memory_bytes * 3 // 4 // share),
        "pids_max": min(pids, pid_max // 2) if pid_max > 1024 else pids,
        "tmp_max_bytes": max(64 << 20, memory_bytes // 8 // share),
        "out_max_bytes": 16 * gib,
    }


def fetch_refused(usage: object, max_bytes: int, max_files: int) -> str | None:
    """Why a remote run's out/ is not fetched (what the host measured before: ``{"bytes", "entries",
    "sparse"}``), or None. Sparse files are refused whatever their size (rsync would write them whole)."""
    if not isinstance(usage, dict):
        return None  # an older host said nothing: rsync's --max-size still bounds each file
    sparse = usage.get("sparse") or []
    if sparse:
        return (f"$LOOPER_OUT holds sparse file(s), refused unfetched: {', '.join(str(s) for s in sparse[:3])} "
                "(their size on paper would arrive whole)")
    size, entries = int(usage.get("bytes") or 0), int(usage.get("entries") or 0)
    if max_bytes and size > max_bytes:
        return (f"$LOOPER_OUT holds {size} bytes, over [limits] out_max_bytes = {max_bytes}: refused unfetched")
    if max_files and entries > max_files:
        return (f"$LOOPER_OUT holds {entries} entries, over [limits] out_max_files = {max_files}: refused unfetched")
    return None
