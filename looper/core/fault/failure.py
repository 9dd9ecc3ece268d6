"""Crash or harness error? Failure signatures, and when the loop is stuck.

A *crash* counts against the change (the loop resets and goes on); an *error* means the
harness broke (the loop halts and pages a person). :func:`classify_failure` decides from
what a failed run left behind, in this order:

1. the transport failed (ssh exit 255 or any non-zero transport code) -> error;
2. a path the harness needs is missing (``missing_paths``) -> error;
3. the run was stopped from outside: over budget or hung (log silent) -> crash, unless the
   log shows a harness cause (below), which makes it an error;
4. the training sandbox's own lines (looper/executors/sandbox.py) -> crash: train.py tried what the
   sandbox forbids: a write outside ``$LOOPER_OUT`` (read-only file system), a read of the
   test pages (not mounted), processes left running after it exited;
5. a Python exception in the log:
   - harness causes in its message -> error: "CUDA error: unknown error", device lost /
     fallen off the bus, NVML errors, no CUDA device, disk full (ENOSPC, "No space left"),
     read-only file system, connection refused, FileNotFoundError under the data dir;
   - out of memory (CUDA OOM, cuBLAS or cuDNN allocation failures, MemoryError, ENOMEM) -> crash;
   - ImportError / ModuleNotFoundError: a module outside the declared dependency set (and
     outside the standard library) -> crash; a declared one that will not import -> error;
     a missing submodule or name of a declared package asked for by train.py -> crash;
   - SyntaxError / IndentationError / NameError -> crash (error when the bad syntax is
     inside an installed library);
   - otherwise the innermost *relevant* frame decides (library frames in site-packages,
     the standard library and ``<frozen ...>`` are not relevant): ``train.py`` -> crash;
     looper's own code -> error; anything else -> unknown;
6. no exception: harness causes anywhere in the log -> error; OOM text or "Killed" ->
   crash; killed by SIGKILL (signal 9, exit -9 or 137) -> crash (the kernel's OOM killer);
7. a run that exited 0 and was not stopped is not a failed run -> error (caller bug);
8. anything else is unknown: ``needs_canary=True`` and a provisional crash. The caller
   reruns the last kept train.py (the canary) and asks again with ``canary_failed``:
   True -> error (the known-good code fails too), False -> crash.

A canary that failed turns any crash into an error: when the last kept train.py cannot
run either, the harness is what broke.
"""

from __future__ import annotations

import posixpath
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from looper.core.verdicts.verdict import Outcome

#: Third-party top-level modules the workspace declares (torch, ultralytics and theirs).
#: The standard library is always declared.
DECLARED_DEPENDENCIES: frozenset[str] = frozenset({
    "torch", "torchvision", "ultralytics", "ultralytics_thop", "thop", "numpy", "PIL", "cv2",
    "yaml", "scipy", "matplotlib", "polars", "pandas", "psutil", "requests", "tqdm",
    "pydantic", "nvidia", "pynvml",
})

_SIGKILL = 9


@dataclass(frozen=True)
class FailureEvidence:
    exit_code: int | None  # the child's exit status; None when a signal ended it
    signal: int | None = None
    timed_out: bool = False  # stopped at budget + grace
    stalled: bool = False  # stopped because the log was silent for stall_seconds
    log_tail: str = ""
    transport_exit_code: int | None = None  # ssh's own status (255: ssh itself failed)
    canary_failed: bool | None = None  # None: no canary ran
    missing_paths: list[str] = field(default_factory=list)
    data_dir: str | None = None  # FileNotFoundError under it is a harness error
    declared: frozenset[str] = DECLARED_DEPENDENCIES


@dataclass(frozen=True)
class Classification:
    outcome: Outcome  # CRASH | ERROR
    reason: str
    signature: str
    needs_canary: bool = False
    kind: str = ""  # short tag: transport, missing-path, over-budget, hung, oom, import, ...


# -- reading a traceback ----------------------------------------------------------------------

_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+?))?\s*$')
_EXC = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Iteration))(?::\s?(?P<msg>.*))?$"
)
_HEADER = "Traceback (most recent call last):"


@dataclass(frozen=True)
class _Frame:
    path: str
    func: str

    @property
    def is_library(self) -> bool:
        p = self.path.replace("\\", "/")
        return (p.startswith("<") or "site-packages/" in p or "dist-packages/" in p
                or bool(re.search(r"/lib/python3(\.\d+)?/", p)))

    @property
    def name(self) -> str:
        return self.path.replace("\\", "/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class _Exc:
    type: str
    message: str
    frames: tuple[_Frame, ...]

    @property
    def short_type(self) -> str:
        return self.type.rsplit(".", 1)[-1]

    def innermost_relevant(self) -> _Frame | None:
        for frame in reversed(self.frames):
            if not frame.is_library:
                return frame
        return None

    def innermost_real(self) -> _Frame | None:
        """The innermost frame that is a real file (not ``<frozen importlib...>``)."""
        for frame in reversed(self.frames):
            if not frame.path.startswith("<"):
                return frame
        return None

    def innermost_train(self) -> _Frame | None:
        for frame in reversed(self.frames):
            if frame.name == "train.py":
                return frame
        return None


def _frames(lines: Sequence[str]) -> tuple[_Frame, ...]:
    out = []
    for line in lines:
        m = _FRAME.match(line)
        if m:
            out.append(_Frame(m.group("path"), (m.group("func") or "").strip()))
    return tuple(out)


def _last_exception(log_tail: str) -> _Exc | None:
    """The exception the log ends with: the last traceback's, else the last bare one."""
    lines = log_tail.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == _HEADER]
    if starts:
        body = lines[starts[-1] + 1:]
        for j, line in enumerate(body):
            m = _EXC.match(line)
            if m:
                return _Exc(m.group("type"), (m.group("msg") or "").strip(), _frames(body[:j]))
    # No header (a script's SyntaxError has none; or the tail cut it off): the last bare line.
    for j in range(len(lines) - 1, -1, -1):
        m = _EXC.match(lines[j])
        if m:
            return _Exc(m.group("type"), (m.group("msg") or "").strip(), _frames(lines[:j]))
    return None


# -- signatures -----------------------------------------------------------------------------

_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:~|\.{1,2})?(?:[/\\][\w.\-+@~]+)+[/\\]?")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
_NUM = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_UNIT = re.compile(r"<n>\s?(?:[KMGTP]i?B|bytes)\b")  # sizes differ between repeats, units too
_MAX_SIG = 200


def normalise(text: str) -> str:
    """Strip what varies between repeats of one failure: quoted strings, paths, hex, numbers
    (sizes with their units)."""
    text = _QUOTED.sub("<str>", text)
    text = _PATH.sub("<path>", text)
    text = _HEX.sub("<hex>", text)
    text = _NUM.sub("<n>", text)
    text = _UNIT.sub("<size>", text)
    text = " ".join(text.split())
    return text[:_MAX_SIG]


def signature_of(log_tail: str) -> str:
    """A stable fingerprint of the failure a log ends with, so that repeats match.

    ``Type: normalised message @ train.py:function`` when the log holds an exception (the
    function of the innermost train.py frame, when there is one); otherwise ``log: `` and
    the normalised last non-empty line; ``no output`` for an empty log.
    """
    exc = _last_exception(log_tail)
    if exc is not None:
        sig = f"{exc.short_type}: {normalise(exc.message)}".rstrip(": ").rstrip()
        frame = exc.innermost_train()
        if frame is not None and frame.func:
            sig += f" @ train.py:{frame.func}"
        return sig
    for line in reversed(log_tail.splitlines()):
        if line.strip():
            return f"log: {normalise(line)}"
    return "no output"


# -- harness and crash causes in text ----------------------------------------------------------

_HARNESS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE | re.MULTILINE), why) for p, why in (
        (r"CUDA error: unknown error", "the GPU failed ('CUDA error: unknown error')"),
        (r"device (?:was |is )?lost|GPU is lost|fallen off the bus|CUDA error: (?:an illegal "
         r"instruction|uncorrectable ECC)", "the GPU was lost"),
        (r"NVMLError|NVML_ERROR|Failed to initialize NVML|nvmlInit\w* failed|Driver/library version "
         r"mismatch", "NVML (the GPU driver interface) failed"),
        (r"no CUDA-capable device is detected|CUDA driver version is insufficient",
         "no usable CUDA device"),
        (r"No space left on device|ENOSPC|\[Errno 28\]|Disk quota exceeded", "the disk is full"),
        (r"Read-only file system|\[Errno 30\]", "the file system is read-only"),
        (r"cannot open shared object file", "a shared library is missing (broken install or driver)"),
        (r"is killed by signal: Bus error|insufficient shared memory", "shared memory (/dev/shm) ran out"),
        (r"ssh: connect to host|Could not resolve hostname|Connection closed by .* port|"
         r"client_loop: send disconnect", "the ssh connection failed"),
    ))

_OOM = re.compile(
    r"out of memory|OutOfMemoryError|\bMemoryError\b|Cannot allocate memory|can't allocate memory"
    r"|\[Errno 12\]|^Killed\s*$"
    r"|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED",  # cuBLAS or cuDNN could not get its GPU memory
    re.IGNORECASE | re.MULTILINE,
)

def out_of_memory(text: str) -> bool:
    """Whether a run's log says it ran out of memory: CUDA's, cuBLAS's or cuDNN's allocation, or the host's.

    >>> out_of_memory("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"), out_of_memory("ok")
    (True, False)
    """
    return bool(_OOM.search(text))


_NO_MODULE = re.compile(r"No module named '?(?P<mod>[\w.]+)'?")
_NO_NAME = re.compile(r"cannot import name '?(?P<name>[\w.]+)'? from '?(?P<mod>[\w.]+)'?")


#: Only outside a Python exception: an executor's refused connection. Inside train.py a
#: refused connection is the change's own download attempt (no network by design).
_REFUSED = re.compile(r"Connection refused", re.IGNORECASE)


def _harness_cause(text: str, *, in_exception: bool = False) -> str | None:
    for pattern, why in _HARNESS:
        if pattern.search(text):
            return why
    if not in_exception and _REFUSED.search(text):
        return "a connection was refused (host or service unreachable)"
    return None


# The training sandbox's own lines (looper/executors/sandbox.py WATCH): a write outside $LOOPER_OUT, a
# read of the test pages and a process left running are the change's doing there, never the harness's.
_SANDBOX_EXIT = re.compile(r"^looper sandbox: train\.py exited -?\d+; writable were only (?P<out>\S+) and",
                           re.MULTILINE)
_SANDBOX_LEFT = re.compile(r"^looper sandbox: train\.py exited \(status -?\d+\) but left (?P<n>\d+) process",
                           re.MULTILINE)
_READ_ONLY = re.compile(r"Read-only file system|\[Errno 30\]")
_READ_ONLY_PATH = re.compile(r"Read-only file system: '(?P<path>[^']*)'")


def _sandboxed(tail: str, exc: _Exc | None, sig: str, data_dir: str | None = None) -> Classification | None:
    """What the training sandbox's lines say about a failed run; None when they decide nothing."""
    left = _SANDBOX_LEFT.search(tail)
    if left:
        return _crash(f"train.py left {left.group('n')} process(es) running after it exited; its sandbox "
                      "ended them", "left processes running", "sandbox-survivor")
    ran = _SANDBOX_EXIT.search(tail)
    if ran is None or exc is None:
        return None
    text = f"{exc.type}: {exc.message}"
    if _READ_ONLY.search(text):
        out = posixpath.normpath(ran.group("out"))
        named = _READ_ONLY_PATH.search(text)
        path = posixpath.normpath(named.group("path")) if named else ""  # out/../x is not in out
        if path and (path == out or path.startswith(out + "/")):
            return None  # its own output folder is read-only: not the change's doing
        return _crash(f"train.py tried to write outside $LOOPER_OUT, which its sandbox does not allow "
                      f"({_short(text)})", sig, "sandbox-write")
    if exc.short_type == "FileNotFoundError" and "/pages/test" in exc.message:
        return _crash(f"train.py tried to read the test pages, which its sandbox does not mount ({_short(text)})",
                      sig, "sandbox-read")
    if exc.short_type == "FileNotFoundError" and _missing_data(exc, data_dir):  # the data was verified intact
        return _crash("train.py tried to read a part of the data folder its sandbox does not show (it sees only "
                      f"dataset.yaml, tiles/ and pages/val/: not the manifest) ({_short(text)})", sig, "sandbox-read")
    return None


def _missing_data(exc: _Exc, data_dir: str | None) -> bool:
    if not data_dir or exc.short_type not in ("FileNotFoundError", "OSError", "IOError"):
        return False
    root = data_dir.rstrip("/\\")
    return bool(root) and root in exc.message


def _is_declared(module: str, declared: frozenset[str]) -> bool:
    top = module.split(".", 1)[0]
    return top in declared or top in sys.stdlib_module_names


# -- classification ---------------------------------------------------------------------------


def _crash(reason: str, signature: str, kind: str, needs_canary: bool = False) -> Classification:
    return Classification(Outcome.CRASH, reason, signature, needs_canary, kind)


def _error(reason: str, signature: str, kind: str) -> Classification:
    return Classification(Outcome.ERROR, reason, signature, False, kind)


def _from_exception(exc: _Exc, ev: FailureEvidence, sig: str) -> Classification | None:
    where = exc.innermost_relevant()
    text = f"{exc.type}: {exc.message}"
    cause = _harness_cause(text, in_exception=True)
    if cause is not None:
        return _error(f"harness error: {cause} ({_short(text)})", sig, "harness")
    if _missing_data(exc, ev.data_dir):
        return _error(f"harness error: a data path is missing ({_short(text)})", sig, "missing-data")
    if _OOM.search(text):
        return _crash(f"out of memory ({_short(text)})", sig, "oom")
    if exc.short_type in ("ModuleNotFoundError", "ImportError"):
        return _import_failure(exc, ev, sig)
    if exc.short_type in ("SyntaxError", "IndentationError", "TabError"):
        culprit = exc.frames[-1] if exc.frames else None
        if culprit is not None and culprit.is_library:
            return _error(f"harness error: an installed library does not parse ({_short(text)} in "
                          f"{culprit.path})", sig, "broken-install")
        name = culprit.name if culprit is not None else "train.py"
        return _crash(f"{name} does not parse: {_short(text)}", sig, "syntax")
    if exc.short_type in ("NameError", "UnboundLocalError"):
        return _crash(f"train.py uses an undefined name: {_short(text)}", sig, "name")
    if where is None:
        return None
    if where.name == "train.py":
        func = f" in {where.func}()" if where.func and where.func != "<module>" else ""
        return _crash(f"train.py raised {_short(text)}{func}", sig, "traceback")
    if "/looper/" in where.path.replace("\\", "/"):
        return _error(f"harness error: looper's own code raised {_short(text)} ({where.path})", sig,
                      "harness-bug")
    return None


def _import_failure(exc: _Exc, ev: FailureEvidence, sig: str) -> Classification:
    text = f"{exc.type}: {exc.message}"
    m = _NO_MODULE.search(exc.message) or _NO_NAME.search(exc.message)
    module = m.group("mod") if m else ""
    importer = exc.innermost_real()  # the file whose import statement failed
    from_train = importer is not None and importer.name == "train.py"
    if not module:
        return _crash(f"train.py's import failed ({_short(text)})", sig, "import")
    if not _is_declared(module, ev.declared):
        return _crash(f"train.py imports '{module}', which is not in the declared dependency set "
                      f"({_short(text)})", sig, "import")
    top = module.split(".", 1)[0]
    if _NO_MODULE.search(exc.message) and module == top:
        return _error(f"harness error: declared dependency '{top}' is not importable ({_short(text)})",
                      sig, "dependency")
    if from_train:
        return _crash(f"train.py asks for something the installed '{top}' does not have "
                      f"({_short(text)})", sig, "import")
    return _error(f"harness error: declared dependency '{top}' fails to import ({_short(text)})",
                  sig, "dependency")


def _short(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def classify_failure(ev: FailureEvidence) -> Classification:
    """Crash (the change broke the run) or error (the harness broke), with the reason in words."""
    result = _classify(ev)
    if ev.canary_failed and result.outcome is Outcome.CRASH:
        return _error(f"{result.reason}; but the last kept train.py (canary) failed too, so the "
                      "harness is what broke", result.signature, result.kind or "canary")
    return result


def _classify(ev: FailureEvidence) -> Classification:
    tail = ev.log_tail or ""
    if ev.transport_exit_code not in (None, 0):
        how = "ssh itself failed" if ev.transport_exit_code == 255 else "the executor transport failed"
        return _error(f"harness error: {how} (transport exit code {ev.transport_exit_code})",
                      f"transport exit {ev.transport_exit_code}", "transport")
    if ev.missing_paths:
        paths = ", ".join(ev.missing_paths[:5])
        return _error(f"harness error: required paths are missing: {paths}", "missing path",
                      "missing-path")
    if ev.timed_out or ev.stalled:
        cause = _harness_cause(tail)
        if cause is not None:
            return _error(f"harness error: {cause} (the run was stopped; its log shows it)",
                          signature_of(tail), "harness")
        if ev.timed_out:
            return _crash("over budget: the run did not finish within budget + grace and was stopped",
                          "over budget", "over-budget")
        return _crash("hung: the log did not move for stall_seconds and the run was stopped",
                      "hung", "hung")
    exc = _last_exception(tail)
    sig = signature_of(tail)
    sandboxed = _sandboxed(tail, exc, sig, ev.data_dir)
    if sandboxed is not None:
        return sandboxed
    if exc is not None:
        decided = _from_exception(exc, ev, sig)
        if decided is not None:
            return decided
    else:
        cause = _harness_cause(tail)
        if cause is not None:
            return _error(f"harness error: {cause}", sig, "harness")
        if _OOM.search(tail):
            return _crash("out of memory (the log says so)", "out of memory", "oom")
    if ev.signal == _SIGKILL or ev.exit_code in (-_SIGKILL, 128 + _SIGKILL):
        return _crash("killed by SIGKILL without being stopped by looper (the kernel's OOM killer)",
                      "killed by SIGKILL", "oom")
    if ev.exit_code == 0 and ev.signal is None:
        return _error("classify_failure was asked about a run that exited 0 and was not stopped; "
                      "that is not a failed run", "not a failure", "not-a-failure")
    how = f"signal {ev.signal}" if ev.signal is not None else f"exit code {ev.exit_code}"
    unknown = f"the run failed ({how}) and the log does not say whether train.py or the harness broke"
    if exc is not None:
        unknown += f" (last exception: {_short(exc.type + ': ' + exc.message)})"
    if ev.canary_failed is None:
        return _crash(f"{unknown}; rerun the last kept train.py (canary) to decide", sig, "unknown",
                      needs_canary=True)
    return _crash(f"{unknown}; the last kept train.py (canary) still runs, so the change broke it",
                  sig, "unknown")


# -- stuck -----------------------------------------------------------------------------------


def is_stuck(signatures: Sequence[str | None], stuck_after: int) -> str | None:
    """Why the loop is stuck, or None. ``signatures``: the latest experiments, oldest first;
    None or "" for one that did not fail (it breaks any streak).

    - the same signature ``stuck_after`` times in a row -> stuck;
    - two signatures alternating (A B A B ...) over the last ``2 * stuck_after`` experiments,
      i.e. each one ``stuck_after`` times, with no other result between -> stuck too.
    """
    if stuck_after < 1:
        raise ValueError(f"stuck_after must be >= 1, got {stuck_after}")
    recent = list(signatures)
    tail = recent[-stuck_after:]
    if len(tail) == stuck_after and tail[0] and all(s == tail[0] for s in tail):
        return f"the same failure {stuck_after} times in a row: {tail[0]}"
    window = recent[-2 * stuck_after:]
    if len(window) == 2 * stuck_after and all(window):
        a, b = window[0], window[1]
        if a != b and all(s == (a if i % 2 == 0 else b) for i, s in enumerate(window)):
            return (f"two failures alternating {stuck_after} times each: {a} / {b}")
    return None
