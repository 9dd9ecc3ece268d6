"""The remote host as the ssh executor sees it: one ``python -m looper.remote`` command line at a time over
the transport, its run folders, its data, the files pushed and checked by hash."""

from __future__ import annotations

import json
import shlex
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from looper.executors.base import FIXED_FILES
from looper.executors.common import (
    NO_TOOL_CODE,
    last_lines,
)
from looper.executors.ssh.transport import SshTransport, TransportFault
from looper.workspace.hashes import SCORING_MODULES, file_sha256

KEEP_RUNS = 6  # remote run folders kept (older ones are deleted, never a live one)
REMOTE_BUDGET_MARGIN = 60.0  # the host ends a run on its own this long after the local limit



def _home_relative(remote_dir: str) -> str:
    """remote_dir as a path ssh and rsync both read the same way (relative = under the login's home)."""
    if remote_dir in ("~", "~/"):
        return "."
    return remote_dir[2:] if remote_dir.startswith("~/") else remote_dir


class RemoteHost:
    """``remote_dir`` on one host, through ``python -m looper.remote``: layout, sync, runs, data."""

    def __init__(self, link: SshTransport, remote_dir: str, python: str, package_dir: Path,
                 kill_after: float) -> None:
        self.link = link
        self.host = link.host
        self.remote_dir = remote_dir
        self.python = python
        self.package_dir = package_dir
        self.kill_after = kill_after
        self._root: str | None = None
        # One push-and-check at a time: the runs of a night side by side (seeds, workers) share checkout/, and
        # two rsyncs into it at once fail (files vanish under --delete) or leave one run another's train.py.
        self._pushing = threading.RLock()

    # -- talking to looper.remote on the host -------------------------------------------------------
    def line(self, *args: str, module: str = "looper.remote", checkout: str = "") -> str:
        """The one shell line: into the checkout, then ``python -m module args``."""
        return (f"cd {shlex.quote(checkout or self.checkout)} && "
                f"exec {shlex.quote(self.python)} -B -m {module} {shlex.join(args)}")

    def ask(self, *args: str, what: str, timeout: float | None = None, retries: int | None = None,
             module: str = "looper.remote", checkout: str = "") -> dict[str, Any]:
        """One remote command; its JSON answer. TransportFault naming ``what`` when it fails."""
        got = self.link.control(self.line(*args, module=module, checkout=checkout), timeout=timeout,
                                retries=retries)
        if got.exit_code != 0:
            detail = last_lines(got.stderr or got.stdout) or "no message"
            code = got.exit_code if got.exit_code is not None else NO_TOOL_CODE
            if code in (126, 127):
                raise TransportFault(f"remote python {self.python!r} does not run on {self.host} ({what}, "
                                     f"exit {code}): {detail}", code)
            if "no space left on device" in detail.lower() or "disk quota exceeded" in detail.lower():
                what = f"remote disk full: {what}"
            raise TransportFault(f"{what} on {self.host} failed (exit {code}): {detail}", code)
        try:
            answer = json.loads(got.stdout.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            answer = None
        if not isinstance(answer, dict):
            raise TransportFault(f"{what} on {self.host}: no answer from {module} "
                                 f"({last_lines(got.stdout + got.stderr) or 'no output'})", NO_TOOL_CODE)
        return answer

    # -- remote layout --------------------------------------------------------------------------
    def root(self) -> str:
        """The absolute remote_dir on the host, created with the looper package synced into it."""
        if self._root is not None:
            return self._root
        with self._pushing:  # the first runs side by side ask at once: one makes it
            if self._root is None:
                self._root = self._make_root()
            return self._root

    def _make_root(self) -> str:
        """Create remote_dir/checkout there, push the looper package into it, and resolve remote_dir."""
        rel = _home_relative(self.remote_dir)
        checkout = f"{rel}/checkout"
        mk = self.link.control(f"mkdir -p -- {shlex.quote(checkout)}")
        if mk.exit_code != 0:
            raise TransportFault(f"creating remote_dir {self.remote_dir} on {self.host} failed "
                                 f"(exit {mk.exit_code}): {last_lines(mk.stderr) or 'no message'}",
                                 mk.exit_code if mk.exit_code is not None else NO_TOOL_CODE)
        self.push([], checkout)
        return str(self.ask("root", what=f"resolving remote_dir {self.remote_dir}", checkout=checkout)["root"])

    @property
    def checkout(self) -> str:
        return f"{self.root()}/checkout"

    def data_path(self, data_dir: str) -> str:
        return data_dir if data_dir.startswith("/") else f"{self.root()}/{data_dir}"

    def new_run(self, kind: str) -> str:
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}-{uuid.uuid4().hex[:6]}"
        return f"{self.root()}/runs/{run_id}"

    # -- sync ------------------------------------------------------------------------------------
    def push(self, files: list[Path], checkout: str = "") -> None:
        """Copy files and the looper package into remote checkout/ (package mirrored exactly). rsync's quick check
        (size and time) skips a file that looks unchanged: a fixed file changed there with both kept is the hash
        check's to find (:meth:`sync_checked`)."""
        pkg = str(self.package_dir).rstrip("/")
        self.link.rsync(["--delete", "--exclude", "__pycache__", "--exclude", "*.pyc",
                         *[str(f) for f in files], pkg, self.link.spec((checkout or self.checkout) + "/")],
                        f"copying {', '.join(f.name for f in files) or 'the looper package'} to {self.host}")

    def sync_checked(self, checkout: Path, run: str = "", folders: Sequence[Path] = (), code: bool = False) -> list[str]:
        """Push and verify (and create ``run``'s folder); problems in words; TransportFault on a link fault.
        ``folders``: whole local folders (the workspace's pretrained/) pushed into checkout/ beside the files.
        ``code`` (a training): train.py and the fixed files copied into ``run/code/`` as they are checked, the
        run's own (``run --code``), and their hashes the copies'. One sync at a time (the runs side by side)."""
        checkout = Path(checkout)
        names = ["train.py", *FIXED_FILES]
        missing = [n for n in names if not (checkout / n).is_file()]
        if missing:
            return [f"missing in the local checkout {checkout}: {', '.join(missing)}"]
        inside = {f"{d.name}/{f.name}": f for d in folders for f in sorted(Path(d).iterdir()) if f.is_file()}
        extra = ["--run", run, "--keep", str(KEEP_RUNS)] if run else []
        extra += [f"--code={n}" for n in names] if run and code else []
        with self._pushing:
            self.push([checkout / n for n in FIXED_FILES] + [Path(d) for d in folders])
            # train.py by its content: two candidates' of one size written in the same second (LR0 0.003 and
            # 0.002, two workers') look alike to the quick check, which would leave the last one's there
            self.link.rsync(["--checksum", str(checkout / "train.py"), self.link.spec(self.checkout + "/")],
                            f"copying train.py to {self.host}")
            remote = self.ask("check", *names, *inside, *SCORING_MODULES, *extra,
                              what="checking the synced files")["sha256"]
        problems = []
        local_of = {**{n: checkout / n for n in names}, **inside,
                    **{m: self.package_dir.parent / m for m in SCORING_MODULES}}
        for n, path in local_of.items():
            local = file_sha256(path)
            if remote.get(n) != local:
                kind = "fixed file" if n in FIXED_FILES else "scoring module" if n in SCORING_MODULES else "file"
                problems.append(f"{kind} {n} on {self.host} differs from the local copy after sync "
                                f"(remote sha256 {remote.get(n) or 'missing'}, local {local})")
        return problems

    # -- runs ---------------------------------------------------------------------------------------
    def run_command(self, run: str, argv: list[str], env: dict[str, str], gpu_index: int | None,
                    budget_seconds: float | None, code: bool = False) -> list[str]:
        """The ssh argv (a connection of its own) that runs ``argv`` under ``looper.remote run`` (``code``: in the
        run's own copy of its files, ``sync_checked(code=True)``)."""
        args = ["run", run, *[f"--env={k}={v}" for k, v in env.items()], *([f"--code={run}/code"] if code else [])]
        if gpu_index is not None:
            args.append(f"--gpu-index={gpu_index}")
        if budget_seconds:
            args.append(f"--budget={budget_seconds + self.kill_after + REMOTE_BUDGET_MARGIN:.0f}")
        args += [f"--kill-after={self.kill_after}", "--", *argv]
        return self.link.command(self.line(*args), solo=True)

    def end_run(self, run: str, wait_for_pid: bool = True) -> dict[str, Any]:
        """SIGTERM then SIGKILL the run's process group: what happened, its status, its GPU summary."""
        extra = ["--wait-for-pid"] if wait_for_pid else []
        return self.ask("end", run, *extra, "--kill-after", str(self.kill_after),
                        what=f"ending remote run {run}", timeout=self.kill_after + 30)

    def run_dir(self, run: str, cached: str) -> bool:
        """Create the run folder (pruning old ones); whether the remote file ``cached`` exists."""
        made = self.ask("run-dir", run, "--keep", str(KEEP_RUNS), "--cached", cached,
                        what=f"creating run folder {run}")
        return bool(cached) and bool(made.get("cached"))

    def data(self, data: str, *prepare: str, timeout: float = 3600, retries: int | None = None) -> dict[str, Any]:
        """The data folder's state and hash (``prepare``: build it first when missing)."""
        return self.ask("data", data, *prepare, what=f"the data folder {data}", timeout=timeout, retries=retries)

    def reap(self) -> list[tuple[int, str]]:
        """(process group, run folder) of every run left behind that was ended."""
        got = self.ask("reap", "--kill-after", str(self.kill_after), what="ending runs left behind",
                       timeout=self.kill_after * 20 + 60)
        return [(int(pgid), str(name)) for pgid, name in got.get("ended", [])]
