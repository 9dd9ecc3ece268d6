"""Run training and evaluation on an SSH host, with the local supervisor in charge.

The OpenSSH client and rsync do the work, so whatever the user's ``~/.ssh/config`` says
about the host (alias, user, keys, jump hosts, its own multiplexing) holds: looper passes
``host`` as written and adds an option only where the effective configuration (``ssh -G``)
left it at OpenSSH's default. What looper adds: ``BatchMode=yes`` always (a daemon cannot
answer a prompt), ``ConnectTimeout``, ``ServerAliveInterval`` (a dead link is noticed), and
connection sharing (``ControlMaster=auto``, a ``ControlPath`` under the workspace's
``.looper/ssh/``, ``ControlPersist=300``).

Remote layout under ``remote_dir`` (one remote_dir per workspace)::

    checkout/            train.py, prepare.py, evaluate.py and the looper package (PYTHONPATH)
    <data_dir>/          the prepared data set (built there once by prepare.py)
    runs/<run id>/       run.pid (process-group id while it runs), status (exit code),
                         out/ (LOOPER_OUT: weights.pt, train.json, METRICS.json), gpu.json
    .ultralytics/        YOLO_CONFIG_DIR

A run is ``ssh host 'cd checkout && exec setsid -w sh -c "echo $$ > run.pid; ..."'`` under
:func:`looper.proc.supervise`: the budget, grace and stall limits are enforced here, and when
they fire (or the run is cancelled, or the link drops) the REMOTE process group is ended with
``kill -TERM -<pgid>`` then ``kill -KILL -<pgid>`` over a fresh connection. A run a dead
daemon left behind is found by :meth:`SshExecutor.reap` through its ``run.pid``.

Transport faults (ssh's own exit status 255, rsync failures, a remote disk that is full, a
fixed file whose remote copy differs) never look like a crash of train.py: the result
carries ``transport_exit_code`` (ssh's 255, rsync's own code, or ``-1`` where no tool
failed) and ``transport_error`` in words.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import looper
from looper import proc
from looper.adapters.executors.base import FIXED_FILES, EvalJob, LineSink, RunResult, TrainJob
from looper.core.verdict import Verdict
from looper.datahash import file_sha256
from looper.errors import ConfigError

MIN_FREE_BYTES = 1 << 30  # 1 GiB free under remote_dir, or preflight is an error
CONNECT_TIMEOUT = 10  # seconds, unless the ssh config sets ConnectTimeout
ALIVE_INTERVAL = 15  # seconds, unless the ssh config sets ServerAliveInterval
CONTROL_PERSIST = 300
KEEP_RUNS = 6  # remote run folders kept (older ones are deleted, never a live one)
NO_TOOL_CODE = -1  # transport_exit_code when the fault is not a tool's exit status

_SAMPLE_SNIPPET = "looper.adapters.gpu"

# What the ssh client's words mean, first match wins: (substrings of its lowered stderr, words).
_TRANSPORT_WORDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("connection refused",), "cannot reach {h}: connection refused (is sshd running there?)"),
    (("permission denied", "too many authentication failures"),
     "authentication to {h} failed (key not accepted; BatchMode allows no password prompt)"),
    (("could not resolve hostname", "name or service not known"), "host name {h} does not resolve"),
    (("no route to host", "network is unreachable"), "{h} is unreachable (no route)"),
    (("host key verification failed",), "host key of {h} is not trusted (Host key verification failed)"),
    (("connection timed out", "operation timed out"), "connection to {h} timed out"),
    (("no space left on device", "disk quota exceeded"), "remote disk full on {h}"),
    (("closed by remote host", "connection reset", "broken pipe", "not responding", "connection closed",
      "read header failed"), "the connection to {h} dropped"),
)
_HASH_SNIPPET = (
    "import json, sys\n"
    "from pathlib import Path\n"
    "from looper.datahash import tree_hash\n"
    "h, n = tree_hash(Path(sys.argv[1]))\n"
    "print(json.dumps({'hash': h, 'files': n}))\n"
)
# rsync exit codes that mean the link, not the files, failed: worth another try
_RSYNC_TRANSIENT = {5, 10, 12, 30, 35, 255}


class TransportFault(Exception):
    """The executor could not talk to the host (or the host could not do what was asked)."""

    def __init__(self, message: str, code: int = 255) -> None:
        super().__init__(message)
        self.code = code


def _get(section: Any, key: str, default: Any) -> Any:
    if isinstance(section, dict):
        value = section.get(key, default)
    else:
        value = getattr(section, key, default)
    return default if value is None else value


def _parse_options(entries: Sequence[str] | str | None) -> list[str]:
    """``ssh_options`` entries: ``"Key=value"`` becomes ``-o Key=value``; ``"-F file"`` is kept."""
    if not entries:
        return []
    if isinstance(entries, str):
        entries = [entries]
    out: list[str] = []
    for entry in entries:
        entry = str(entry).strip()
        if not entry:
            continue
        if entry.startswith("-"):
            out += shlex.split(entry)
        else:
            out += ["-o", entry]
    return out


def _q(value: str | Path) -> str:
    return shlex.quote(str(value))


def _last_lines(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


class SshExecutor:
    """The :class:`~looper.adapters.executors.base.Executor` for ``[executor] kind = "ssh"``."""

    name = "ssh"

    def __init__(self, workspace: Path, section: Any, *, kill_after: float = 10.0, retries: int = 3,
                 control_timeout: float = 120.0, package_dir: Path | None = None) -> None:
        self.workspace = Path(workspace)
        self.host = str(_get(section, "host", "")).strip()
        self.remote_dir = str(_get(section, "remote_dir", "")).strip()
        if not self.host:
            raise ConfigError("executor.host: kind 'ssh' needs a host (as written in ~/.ssh/config)")
        if not self.remote_dir:
            raise ConfigError("executor.remote_dir: kind 'ssh' needs a folder on the host to work in")
        self.python = str(_get(section, "python", "python3")) or "python3"
        self.require_gpu = bool(_get(section, "require_gpu", False))
        self.gpu_index = int(_get(section, "gpu_index", 0))
        self.user_options = _parse_options(_get(section, "ssh_options", []))
        self.kill_after = kill_after
        self.retries = max(1, retries)
        self.control_timeout = control_timeout
        self.package_dir = Path(package_dir) if package_dir else Path(looper.__file__).parent
        self._argv: list[str] | None = None
        self._argv_solo: list[str] = []  # the same without looper's connection sharing
        self._connect_timeout = CONNECT_TIMEOUT
        self._control_path: Path | None = None  # set when looper manages the shared connection
        self._root: str | None = None
        self._package_synced = False
        # local weights file -> (size, mtime_ns, remote path): evaluation reuses the remote copy
        self._weights: dict[str, tuple[int, int, str]] = {}

    # -- ssh argv -------------------------------------------------------------------------
    def _control_path_for(self) -> Path:
        key = hashlib.sha1(f"{self.host}\0{' '.join(self.user_options)}".encode()).hexdigest()[:16]
        folder = self.workspace / ".looper" / "ssh"
        # a unix socket path is at most ~104 bytes, and ssh appends a 17-byte suffix while binding
        if len(str(folder / key)) + 18 > 104:
            ws = hashlib.sha1(str(self.workspace.resolve()).encode()).hexdigest()[:8]
            folder = Path(tempfile.gettempdir()) / f"looper-ssh-{os.getuid()}"
            key = f"{ws}-{key}"
        folder.mkdir(parents=True, exist_ok=True)
        try:
            folder.chmod(0o700)
        except OSError:
            pass
        return folder / key

    def ssh_argv(self) -> list[str]:
        """``ssh`` plus the options looper adds, resolved once against the user's config."""
        if self._argv is not None:
            return self._argv
        if shutil.which("ssh") is None:
            raise TransportFault("the OpenSSH client 'ssh' is not installed on this machine", NO_TOOL_CODE)
        got = proc.run(["ssh", "-G", *self.user_options, self.host], timeout=30)
        if not got.ok:
            raise TransportFault(f"ssh cannot read its configuration for host {self.host!r}: "
                                 f"{_last_lines(got.stderr) or got.exit_code}", got.exit_code or 255)
        eff: dict[str, str] = {}
        for line in got.stdout.splitlines():
            key, _, value = line.partition(" ")
            eff.setdefault(key.lower(), value.strip())
        add = ["-o", "BatchMode=yes"]
        if eff.get("connecttimeout", "none") in ("none", "0", ""):
            add += ["-o", f"ConnectTimeout={CONNECT_TIMEOUT}"]
        else:
            self._connect_timeout = int(eff["connecttimeout"])
        if eff.get("serveraliveinterval", "0") in ("0", ""):
            add += ["-o", f"ServerAliveInterval={ALIVE_INTERVAL}"]
        self._argv_solo = ["ssh", *self.user_options, *add]
        if eff.get("controlmaster", "false") == "false" and eff.get("controlpath", "none") in ("none", ""):
            path = self._control_path_for()
            value = str(path).replace("%", "%%")
            if " " in value:
                value = f'"{value}"'
            add += ["-o", "ControlMaster=auto", "-o", f"ControlPath={value}",
                    "-o", f"ControlPersist={CONTROL_PERSIST}"]
            self._control_path = path
        self._argv = ["ssh", *self.user_options, *add]
        return self._argv

    def _remote(self, script: str, solo: bool = False) -> list[str]:
        """argv running ``script`` with /bin/sh on the host, whatever the login shell is.

        ``solo``: a connection of its own, not the shared one. A multiplexed client hands its
        stdout to the master, so killing it would not end the stream; a run's ssh must own it.
        """
        argv = self.ssh_argv()
        if solo and self._control_path is not None:
            argv = [*self._argv_solo, "-o", "ControlMaster=no", "-o", "ControlPath=none"]
        return [*argv, self.host, "sh -c " + _q(script)]

    def describe(self, got: proc.Completed | None, text: str = "") -> str:
        """A transport failure in words, naming the host."""
        raw = text or (got.stderr if got else "")
        low = raw.lower()
        h = self.host
        if got is not None and got.timed_out:
            why = f"ssh to {h} did not answer within {got.seconds:.0f} s"
        else:
            why = next((words.format(h=h) for needles, words in _TRANSPORT_WORDS
                        if any(n in low for n in needles)), f"ssh to {h} failed")
        detail = _last_lines(raw)
        return f"{why}: {detail}" if detail else why

    # -- control commands (short, idempotent, retried) ----------------------------------------
    def _control(self, script: str, timeout: float | None = None, retries: int | None = None) -> proc.Completed:
        """Run a short remote script; ssh's own failure (255) is retried a bounded number of times."""
        tries = retries or self.retries
        got: proc.Completed | None = None
        for attempt in range(tries):
            got = proc.run(self._remote(script), timeout=timeout or self.control_timeout)
            if not got.timed_out and got.exit_code != 255:
                return got
            if attempt + 1 < tries:
                time.sleep(min(0.5 * 2**attempt, 5.0))
        assert got is not None
        raise TransportFault(self.describe(got), 255)

    def _check(self, script: str, what: str, timeout: float | None = None) -> str:
        """A control command that must succeed; a remote failure is a fault naming ``what``."""
        got = self._control(script, timeout=timeout)
        if got.exit_code != 0:
            detail = _last_lines(got.stderr or got.stdout) or "no message"
            if "no space left on device" in detail.lower() or "disk quota exceeded" in detail.lower():
                what = f"remote disk full: {what}"
            raise TransportFault(f"{what} on {self.host} failed (exit {got.exit_code}): {detail}",
                                 got.exit_code if got.exit_code is not None else NO_TOOL_CODE)
        return got.stdout

    def _rsync(self, args: list[str], what: str, timeout: float = 3600) -> None:
        if shutil.which("rsync") is None:
            raise TransportFault("rsync is not installed on this machine", NO_TOOL_CODE)
        argv = ["rsync", "-a", "--timeout=120", "-e", shlex.join(self.ssh_argv()), *args]
        got: proc.Completed | None = None
        for attempt in range(self.retries):
            got = proc.run(argv, timeout=timeout)
            if got.ok:
                return
            if not got.timed_out and got.exit_code not in _RSYNC_TRANSIENT:
                break
            if attempt + 1 < self.retries:
                time.sleep(min(0.5 * 2**attempt, 5.0))
        assert got is not None
        code = got.exit_code if got.exit_code is not None else NO_TOOL_CODE
        raise TransportFault(f"{what} failed (rsync exit {got.exit_code}): {self.describe(got)}", code)

    def _spec(self, remote_path: str) -> str:
        return f"{self.host}:{remote_path}"

    # -- remote layout --------------------------------------------------------------------------
    def root(self) -> str:
        """The absolute remote_dir on the host (created if missing)."""
        if self._root is None:
            script = (f"d={_q(self.remote_dir)}\n"
                      'case "$d" in "~") d="$HOME";; "~/"*) d="$HOME/${d#??}";; /*) ;; *) d="$HOME/$d";; esac\n'
                      'mkdir -p -- "$d/checkout" "$d/runs" && cd -- "$d" && pwd -P\n')
            out = self._check(script, f"creating remote_dir {self.remote_dir}")
            lines = out.strip().splitlines()
            if not lines or not lines[-1].startswith("/"):
                raise TransportFault(f"could not resolve remote_dir {self.remote_dir} on {self.host}: "
                                     f"got {out.strip()!r}", NO_TOOL_CODE)
            self._root = lines[-1]
        return self._root

    @property
    def checkout(self) -> str:
        return f"{self.root()}/checkout"

    def remote_data(self, data_dir: str) -> str:
        return data_dir if data_dir.startswith("/") else f"{self.root()}/{data_dir}"

    # -- sync ------------------------------------------------------------------------------------
    def _push(self, files: list[Path]) -> None:
        """Copy files and the looper package into remote checkout/ (package mirrored exactly)."""
        pkg = str(self.package_dir).rstrip("/")
        self._rsync(["--delete", "--exclude", "__pycache__", "--exclude", "*.pyc",
                     *[str(f) for f in files], pkg, self._spec(self.checkout + "/")],
                    f"copying {', '.join(f.name for f in files) or 'the looper package'} to {self.host}")
        self._package_synced = True

    def _ensure_package(self) -> None:
        if not self._package_synced:
            self._push([])

    def _remote_hashes(self, names: list[str], then: str = "") -> dict[str, str]:
        """sha256 of files in the remote checkout; ``then`` runs in the same round trip."""
        files = " ".join(_q(n) for n in names)
        script = (f"cd {_q(self.checkout)} && "
                  f"if command -v sha256sum >/dev/null 2>&1; then sha256sum -- {files}; "
                  f"else shasum -a 256 -- {files}; fi")
        if then:
            script = f"( {script} ) && {{ {then}; }} >&2"
        got = self._control(script)
        if then and got.exit_code != 0:
            raise TransportFault(f"preparing the run on {self.host} failed (exit {got.exit_code}): "
                                 f"{_last_lines(got.stderr) or 'no message'}", got.exit_code or NO_TOOL_CODE)
        out: dict[str, str] = {}
        for line in got.stdout.splitlines():
            digest, _, name = line.strip().partition(" ")
            out[name.strip().lstrip("*")] = digest
        return out

    def _sync_checked(self, checkout: Path, run: str = "") -> list[str]:
        """Push and verify (and create ``run``'s folder); problems in words; TransportFault on a link fault."""
        checkout = Path(checkout)
        names = ["train.py", *FIXED_FILES]
        missing = [n for n in names if not (checkout / n).is_file()]
        if missing:
            return [f"missing in the local checkout {checkout}: {', '.join(missing)}"]
        self._push([checkout / n for n in names])
        remote = self._remote_hashes(names, self._prepare_script(run) if run else "")
        problems = []
        for n in names:
            local = file_sha256(checkout / n)
            if remote.get(n) != local:
                kind = "fixed file" if n in FIXED_FILES else "file"
                problems.append(f"{kind} {n} on {self.host} differs from the local copy after sync "
                                f"(remote sha256 {remote.get(n) or 'missing'}, local {local})")
        return problems

    def sync(self, checkout: Path) -> Verdict:
        """Copy train.py, the fixed files and the package; error when a remote copy differs."""
        metrics = {"host": self.host}
        try:
            problems = self._sync_checked(checkout)
            metrics["checkout"] = self.checkout
        except TransportFault as fault:
            return Verdict.errored(str(fault), metrics=metrics)
        return Verdict.errored(*problems, metrics=metrics) if problems else Verdict.passed(metrics)

    # -- env and the remote run wrapper -------------------------------------------------------
    def _env(self, **values: str) -> dict[str, str]:
        env = {
            "YOLO_OFFLINE": "1",
            "YOLO_CONFIG_DIR": f"{self.root()}/.ultralytics",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": self.checkout,
        }
        env.update(values)
        return env

    def _wrapper(self, run: str, argv: list[str], env: dict[str, str], sample_gpu: bool) -> str:
        """The remote command: a new session whose id is written to run.pid before anything runs."""
        lines = [f"echo $$ > {_q(run)}/run.pid"]
        lines += [f"export {k}={_q(v)}" for k, v in env.items()]
        if sample_gpu:
            lines.append(f"{_q(self.python)} -m {_SAMPLE_SNIPPET} sample --out {_q(run)}/gpu.json "
                         f"--index {self.gpu_index} </dev/null >/dev/null 2>{_q(run)}/gpu.err & sampler=$!")
            # let the sampler open the device before the run starts (at most 5 s)
            lines.append(f'i=0; while [ ! -s {_q(run)}/gpu.json ] && [ $i -lt 50 ] && kill -0 "$sampler" 2>/dev/null; '
                         'do sleep 0.1; i=$((i+1)); done')
        lines.append(" ".join(_q(a) for a in argv))
        lines.append("rc=$?")
        if sample_gpu:
            lines.append('kill -TERM "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null')
        # run.pid stays: the executor (or reap) removes it after ending what is left of the group
        lines += [f"echo $rc > {_q(run)}/status", "exit $rc"]
        inner = "\n".join(lines)
        return (f"mkdir -p {_q(run)}/out && cd {_q(self.checkout)} && "
                f"exec setsid -w sh -c {_q(inner)}")

    def _new_run(self, kind: str) -> str:
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}-{uuid.uuid4().hex[:6]}"
        return f"{self.root()}/runs/{run_id}"

    def _prepare_script(self, run: str) -> str:
        """Create the run folder and prune old ones (never one with a run.pid still there)."""
        return (f"mkdir -p {_q(run)}/out && cd {_q(self.root())}/runs && "
                f"ls -1t | tail -n +{KEEP_RUNS + 1} | while read -r d; do "
                '[ -f "$d/run.pid" ] || rm -rf -- "$d"; done')

    def _prepare_run(self, run: str, extra: str = "") -> str:
        return self._check(f"{self._prepare_script(run)}; {extra or 'true'}", f"creating run folder {run}")

    def _kill_script(self, run: str, wait_for_pid: bool) -> str:
        ticks = max(1, int(self.kill_after / 0.2))
        wait = ('i=0; while [ ! -s "$f" ] && [ $i -lt 10 ]; do sleep 0.2; i=$((i+1)); done; '
                if wait_for_pid else "")
        return (f"f={_q(run)}/run.pid; {wait}"
                f"st=$(cat {_q(run)}/status 2>/dev/null); echo \"STATUS=$st\"; "
                '[ -s "$f" ] || { echo GONE; exit 0; }; pg=$(cat "$f"); '
                'case "$pg" in ""|*[!0-9]*) rm -f "$f"; echo GONE; exit 0;; esac; '
                'kill -TERM -"$pg" 2>/dev/null || { rm -f "$f"; echo GONE; exit 0; }; '
                f'i=0; while kill -0 -"$pg" 2>/dev/null && [ $i -lt {ticks} ]; do sleep 0.2; i=$((i+1)); done; '
                'if kill -KILL -"$pg" 2>/dev/null; then echo KILLED; else echo TERMINATED; fi; rm -f "$f"')

    def end_remote_run(self, run: str, wait_for_pid: bool = True) -> tuple[str, str]:
        """SIGTERM then SIGKILL the run's remote process group; returns (what happened, exit status)."""
        out = self._check(self._kill_script(run, wait_for_pid), f"ending remote run {run}",
                          timeout=self.kill_after + 30)
        status = ""
        what = "GONE"
        for line in out.splitlines():
            if line.startswith("STATUS="):
                status = line[len("STATUS="):].strip()
            elif line.strip() in ("GONE", "KILLED", "TERMINATED"):
                what = line.strip()
        return what, status

    # -- supervised remote runs ---------------------------------------------------------------
    def _supervised(self, run: str, argv: list[str], env: dict[str, str], local_cwd: Path, log_path: Path,
                    limits: proc.Limits, on_line: LineSink | None, cancel: threading.Event | None,
                    sample_gpu: bool) -> tuple[RunResult, bool]:
        """Run ``argv`` remotely under ``limits``; returns the result and whether the host still answers."""
        wrapper = self._wrapper(run, argv, env, sample_gpu)
        s = proc.supervise(self._remote(wrapper, solo=True), cwd=local_cwd, env=None, log_path=log_path, limits=limits,
                           on_line=on_line, cancel=cancel)
        result = RunResult(exit_code=s.exit_code, signal=s.signal, timed_out=s.timed_out, stalled=s.stalled,
                           cancelled=s.stopped_by == "cancel", seconds=s.seconds, log_tail=s.log_tail)
        ssh_failed = not s.stopped_by and (s.exit_code == 255 or s.signal is not None)
        # Always end the remote process group: after a limit fired the local ssh is gone but the
        # remote group lives on; after a normal exit, children train.py left behind must go too
        # (as locally, nothing of the group outlives its leader). The status file it leaves tells
        # a real exit status from ssh's own 255.
        try:
            what, status = self.end_remote_run(run)
        except TransportFault as fault:
            result.transport_exit_code = 255
            if s.stopped_by:
                result.transport_error = (f"could not end the remote run after {s.stopped_by}: {fault} "
                                          "(looper reap will end it at the next start)")
            elif ssh_failed:
                result.transport_error = (f"{self._drop_words(s.log_tail)}; and reconnecting failed: {fault} "
                                          "(the remote run may still be alive; looper reap will end it)")
            else:
                result.transport_error = f"the run finished but its remote process group was not checked: {fault}"
            return result, False
        if s.stopped_by:
            # what the remote run died of, not what ended the local ssh client
            result.exit_code = None
            result.signal = 9 if what == "KILLED" else 15
            result.log_tail += f"\n[looper] remote process group ended ({what.lower()}) after {s.stopped_by}"
            return result, True
        if ssh_failed:
            if status == "255":
                return result, True  # the remote command itself exited 255: a real exit status
            result.transport_exit_code = 255
            alive = "; the remote run was still alive and was ended" if not status else ""
            result.transport_error = f"{self._drop_words(s.log_tail)} during the run{alive}"
            return result, True
        code = s.exit_code
        if code is not None and 128 < code < 128 + 65:
            result.exit_code, result.signal = None, code - 128  # sh reports a signal death as 128+N
        if code not in (0, None) and "no space left on device" in s.log_tail.lower():
            result.transport_exit_code = NO_TOOL_CODE
            result.transport_error = f"remote disk full on {self.host} (the run hit 'No space left on device')"
        return result, True

    def _drop_words(self, log_tail: str) -> str:
        """ssh's 255 in the middle of a run in words, from ssh's own lines in the log only."""
        keys = ("ssh", "connection", "closed by", "broken pipe", "mux_client", "timeout, server", "not responding")
        own = "\n".join(ln for ln in log_tail.splitlines() if any(k in ln.lower() for k in keys))
        if own:
            return self.describe(None, own)
        return f"the connection to {self.host} dropped (ssh exited 255 without a message)"

    def _fault(self, message: str, code: int, seconds: float = 0.0) -> RunResult:
        return RunResult(exit_code=None, seconds=seconds, transport_exit_code=code, transport_error=message)

    def _read_gpu(self, run: str) -> dict:
        try:
            got = self._control(f"cat {_q(run)}/gpu.json 2>/dev/null || true", timeout=60)
        except TransportFault as fault:
            return {"available": False, "problem": f"remote GPU summary not read: {fault}"}
        try:
            data = json.loads(got.stdout) if got.stdout.strip() else None
        except json.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            return {"available": False, "problem": f"the GPU sampler on {self.host} wrote nothing"}
        if data.get("lost"):
            data["lost_reason"] = f"on {self.host}: {data.get('lost_reason', 'GPU lost mid-run')}"
        return data

    def _sample_gpu(self, device: str) -> bool:
        return self.require_gpu or bool(device and device != "cpu")

    # -- Executor -------------------------------------------------------------------------------
    def preflight(self, require_gpu: bool) -> Verdict:
        metrics: dict[str, Any] = {"executor": self.name, "host": self.host}
        for tool in ("ssh", "rsync"):
            if shutil.which(tool) is None:
                return Verdict.errored(f"{tool} is not installed on this machine (needed for executor 'ssh')",
                                       metrics=metrics)
        try:
            t0 = time.monotonic()
            got = proc.run(self._remote("true"), timeout=self._connect_timeout + 20)
            metrics["connect_seconds"] = round(time.monotonic() - t0, 3)
            if not got.ok:
                return Verdict.errored(self.describe(got), metrics=metrics)
            root = self.root()
            metrics["remote_dir"] = root
            py = _q(self.python)
            out = self._check(
                f"echo FREE=$(df -Pk {_q(root)} | tail -n 1 | awk '{{print $4}}'); "
                "for t in rsync setsid; do command -v $t >/dev/null 2>&1 && echo HAVE=$t; done; "
                f"echo PY=$({py} -c 'import sys; print(sys.version.split()[0])' 2>&1 | tail -n 1)",
                "checking the remote host")
        except TransportFault as fault:
            return Verdict.errored(str(fault), metrics=metrics)
        problems: list[str] = []
        facts = {}
        have = set()
        for line in out.splitlines():
            key, _, value = line.partition("=")
            if key == "HAVE":
                have.add(value.strip())
            else:
                facts[key] = value.strip()
        try:
            free = int(facts.get("FREE", "")) * 1024
            metrics["disk_free_gb"] = round(free / 2**30, 2)
            if free < MIN_FREE_BYTES:
                problems.append(f"remote disk nearly full on {self.host}: {free / 2**20:.0f} MiB free under "
                                f"{root} (need 1024 MiB)")
        except ValueError:
            problems.append(f"could not read free disk space under {root} on {self.host}")
        version = facts.get("PY", "")
        if not version[:1].isdigit():
            problems.append(f"remote python {self.python!r} does not run on {self.host}: {version or 'no output'}")
        else:
            metrics["python"] = version
        for tool in ("rsync", "setsid"):
            if tool not in have:
                problems.append(f"{tool} is not installed on {self.host}")
        if require_gpu and not problems:
            metrics["gpu"], problem = self._remote_gpu()
            if problem:
                problems.append(problem)
        return Verdict.errored(*problems, metrics=metrics) if problems else Verdict.passed(metrics)

    def _remote_gpu(self) -> tuple[dict, str]:
        """One NVML reading on the host, through the synced looper package and pynvml there."""
        try:
            self._ensure_package()
            got = self._control(f"cd {_q(self.checkout)} && PYTHONPATH={_q(self.checkout)} {_q(self.python)} "
                                f"-m {_SAMPLE_SNIPPET} read --index {self.gpu_index}", timeout=120)
        except TransportFault as fault:
            return {}, f"require_gpu is set but the GPU on {self.host} could not be checked: {fault}"
        try:
            reading = json.loads(got.stdout.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            return {}, (f"require_gpu is set but the NVML check on {self.host} failed (exit {got.exit_code}): "
                        f"{_last_lines(got.stderr or got.stdout)}")
        if not reading.get("ok"):
            return reading, (f"require_gpu is set but {self.host} has no usable GPU: "
                             f"{reading.get('problem', 'unknown')}")
        return reading, ""

    def ensure_data(self, prepare_py: Path, data_dir: str, scale: str, seed: int) -> Verdict:
        prepare_py = Path(prepare_py)
        try:
            data = self.remote_data(data_dir)
            self._push([prepare_py])
            state = self._check(
                f"d={_q(data)}; if [ -f \"$d/manifest.json\" ]; then echo present; "
                'elif [ -d "$d" ] && [ -n "$(ls -A "$d")" ]; then echo dirty; else echo missing; fi',
                f"looking at the data folder {data}").strip()
            if state == "dirty":
                return Verdict.errored(f"data folder {data} on {self.host} exists but has no manifest.json: "
                                       "move it away or finish preparing it")
            if state != "present":
                env = " ".join(f"{k}={_q(v)}" for k, v in self._env().items())
                script = (f"cd {_q(self.checkout)} && env {env} {_q(self.python)} {_q(prepare_py.name)} "
                          f"--out {_q(data)} --scale {_q(scale)} --seed {int(seed)}")
                got = proc.run(self._remote(script), timeout=3600)
                if got.exit_code == 255 or got.timed_out:
                    return Verdict.errored(f"prepare.py on {self.host}: {self.describe(got)}")
                if got.exit_code != 0:
                    return Verdict.errored(f"prepare.py failed on {self.host} (exit {got.exit_code}): "
                                           f"{_last_lines(got.stderr or got.stdout, 5)}")
        except TransportFault as fault:
            return Verdict.errored(str(fault), metrics={"host": self.host})
        return self.data_hash(data_dir)

    def data_hash(self, data_dir: str) -> Verdict:
        """The same hash as :func:`looper.datahash.tree_hash`, computed on the host."""
        try:
            data = self.remote_data(data_dir)
            self._ensure_package()
            script = (f"d={_q(data)}; [ -f \"$d/manifest.json\" ] || {{ echo MISSING; exit 0; }}; "
                      f"cd {_q(self.checkout)} && PYTHONPATH={_q(self.checkout)} "
                      f"{_q(self.python)} -c {_q(_HASH_SNIPPET)} \"$d\"")
            got = self._control(script, timeout=3600)
        except TransportFault as fault:
            return Verdict.errored(str(fault), metrics={"host": self.host})
        text = got.stdout.strip()
        if text == "MISSING":
            return Verdict.errored(f"data missing on {self.host}: {data}/manifest.json does not exist")
        try:
            found = json.loads(text.splitlines()[-1])
            return Verdict.passed({"hash": str(found["hash"]), "files": int(found["files"]),
                                   "host": self.host, "path": data})
        except (json.JSONDecodeError, IndexError, KeyError, TypeError, ValueError):
            return Verdict.errored(f"hashing the data on {self.host} failed (exit {got.exit_code}): "
                                   f"{_last_lines(got.stderr or got.stdout)}")

    def train(self, job: TrainJob, on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        job.out_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        try:
            run = self._new_run("train")
            problems = self._sync_checked(job.checkout, run)
            if problems:
                return self._fault("; ".join(problems), NO_TOOL_CODE, time.monotonic() - t0)
            env = self._env(
                LOOPER_BUDGET_SECONDS=str(int(job.budget_seconds)),
                LOOPER_DATA=self.remote_data(self._data_dir),
                LOOPER_OUT=f"{run}/out",
                LOOPER_SEED=str(job.seed),
                LOOPER_DEVICE=job.device or "cpu",
            )
        except TransportFault as fault:
            return self._fault(str(fault), fault.code, time.monotonic() - t0)
        limits = proc.Limits(budget_seconds=job.budget_seconds + job.grace_seconds,
                             stall_seconds=job.stall_seconds, kill_after=self.kill_after)
        sample = self._sample_gpu(job.device)
        result, reachable = self._supervised(run, [self.python, "train.py"], env, job.checkout, job.log_path,
                                             limits, on_line, cancel, sample)
        if not reachable:
            return result  # nothing more can be fetched from a host that does not answer
        try:
            # train.py's own scratch (a linked view of the data, Ultralytics' caches) stays there
            self._rsync(["--exclude", "/data/", "--exclude", "*.cache", self._spec(f"{run}/out/"),
                         str(job.out_dir) + "/"], f"fetching the run output from {run}")
        except TransportFault as fault:
            if not result.transport_error:
                result.transport_exit_code, result.transport_error = fault.code, str(fault)
        weights = job.out_dir / "weights.pt"
        if weights.is_file():
            st = weights.stat()
            self._weights[str(weights.resolve())] = (st.st_size, st.st_mtime_ns, f"{run}/out/weights.pt")
        if sample:
            result.gpu = self._read_gpu(run)
        return result

    def evaluate(self, job: EvalJob, on_line: LineSink | None, cancel: threading.Event | None) -> RunResult:
        job.metrics_path.unlink(missing_ok=True)  # a result not written by this run does not exist
        t0 = time.monotonic()
        try:
            run = self._new_run("eval")
            problems = self._sync_checked(job.checkout)
            if problems:
                return self._fault("; ".join(problems), NO_TOOL_CODE, time.monotonic() - t0)
            remote_weights = self._remote_weights(job.weights, run)
            argv = [self.python, "evaluate.py", "--weights", remote_weights,
                    "--data", self.remote_data(self._data_dir), "--out", f"{run}/out/METRICS.json"]
            if job.device:
                argv += ["--device", job.device]
            env = self._env(LOOPER_DEVICE=job.device or "cpu")
        except TransportFault as fault:
            return self._fault(str(fault), fault.code, time.monotonic() - t0)
        limits = proc.Limits(budget_seconds=job.timeout_seconds, stall_seconds=job.stall_seconds,
                             kill_after=self.kill_after)
        result, reachable = self._supervised(run, argv, env, job.checkout, job.log_path, limits, on_line,
                                             cancel, False)
        if not reachable:
            return result
        staging = Path(tempfile.mkdtemp(prefix=".metrics-", dir=job.metrics_path.parent))
        try:
            self._rsync([self._spec(f"{run}/out/"), str(staging) + "/"], f"fetching METRICS.json from {run}")
            if (staging / "METRICS.json").is_file():
                os.replace(staging / "METRICS.json", job.metrics_path)
        except TransportFault as fault:
            if not result.transport_error:
                result.transport_exit_code, result.transport_error = fault.code, str(fault)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return result

    def _remote_weights(self, weights: Path, run: str) -> str:
        """The weights' path on the host: the copy training left there, else an upload."""
        weights = Path(weights)
        known = self._weights.get(str(weights.resolve())) if weights.exists() else None
        if known is not None:
            st = weights.stat()
            if (st.st_size, st.st_mtime_ns) == known[:2]:
                out = self._prepare_run(run, f"test -f {_q(known[2])} && echo CACHED || true")
                if "CACHED" in out:
                    return known[2]
        if not weights.is_file():
            # let evaluate.py meet the missing file and say so; the path names what was asked for
            self._prepare_run(run)
            return f"{run}/weights-missing-locally/{weights.name}"
        self._prepare_run(run)
        self._rsync([str(weights), self._spec(f"{run}/{weights.name}")], f"copying {weights.name} to {self.host}")
        return f"{run}/{weights.name}"

    def reap(self) -> list[str]:
        """End remote runs a previous daemon left behind (live process groups under runs/)."""
        try:
            root = self.root()
        except TransportFault:
            return []  # preflight reports the unreachable host; nothing could be ended from here
        ticks = max(1, int(self.kill_after / 0.2))
        script = (f"cd {_q(root)}/runs 2>/dev/null || exit 0; co={_q(self.checkout)}; "
                  'for f in */run.pid; do [ -f "$f" ] || continue; pg=$(cat "$f" 2>/dev/null); '
                  'case "$pg" in ""|*[!0-9]*) rm -f "$f"; continue;; esac; '
                  'if kill -0 -"$pg" 2>/dev/null; then '
                  'cwd=$(readlink "/proc/$pg/cwd" 2>/dev/null || echo "$co"); '
                  'if [ "$cwd" = "$co" ]; then kill -TERM -"$pg" 2>/dev/null; '
                  f'i=0; while kill -0 -"$pg" 2>/dev/null && [ $i -lt {ticks} ]; do sleep 0.2; i=$((i+1)); done; '
                  'kill -KILL -"$pg" 2>/dev/null; echo "ENDED $pg ${f%/run.pid}"; fi; fi; rm -f "$f"; done')
        try:
            got = self._control(script, timeout=self.kill_after * 20 + 60)
        except TransportFault:
            return []
        ended = []
        for line in got.stdout.splitlines():
            parts = line.split(maxsplit=2)
            if len(parts) == 3 and parts[0] == "ENDED":
                ended.append(f"ended a run left behind on {self.host}: {root}/runs/{parts[2]} "
                             f"(process group {parts[1]})")
        return ended

    def close(self) -> None:
        """Close the shared connection looper opened (no-op when the user's config manages it)."""
        if self._control_path is None or self._argv is None:
            return
        proc.run([*self._argv, "-O", "exit", self.host], timeout=10)

    # The data folder is set once per loop; kept here so jobs stay small (as LocalExecutor).
    _data_dir: str = "data"

    def use_data(self, data_dir: str) -> None:
        self._data_dir = data_dir
