"""The ssh transport: the ssh command line, connection sharing, one retry policy, faults in words.

The OpenSSH client and rsync do the work, so whatever the user's ``~/.ssh/config`` says
about the host (alias, user, keys, jump hosts, its own multiplexing) holds: looper passes
``host`` as written and adds an option only where the effective configuration (``ssh -G``)
left it at OpenSSH's default. What looper adds: ``BatchMode=yes`` always (a daemon cannot
answer a prompt), ``ConnectTimeout``, ``ServerAliveInterval`` (a dead link is noticed), and
connection sharing (``ControlMaster=auto``, a ``ControlPath`` under the workspace's
``.looper/ssh/``, ``ControlPersist=300``).

Short control commands and rsync are retried under one policy (:func:`looper.retry.retry_call`):
ssh's own exit status 255, a timeout, or an rsync exit code that means the link failed.
What the client said is turned into words naming the host by one table, :data:`FAULT_WORDS`.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from looper import proc
from looper.executors.common import NO_TOOL_CODE, last_lines
from looper.retry import retry_call

CONNECT_TIMEOUT = 10  # seconds, unless the ssh config sets ConnectTimeout
ALIVE_INTERVAL = 15  # seconds, unless the ssh config sets ServerAliveInterval
CONTROL_PERSIST = 300
BACKOFF = (0.5, 5.0)  # first wait and longest wait between tries, seconds

# What the ssh client's (or rsync's) words mean, first match wins: (substrings of its lowered
# stderr, words).
FAULT_WORDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("connection refused",), "cannot reach {h}: connection refused (is sshd running there?)"),
    (("permission denied", "too many authentication failures"),
     "authentication to {h} failed (key not accepted; BatchMode allows no password prompt)"),
    (("could not resolve hostname", "name or service not known"), "host name {h} does not resolve"),
    (("no route to host", "network is unreachable"), "{h} is unreachable (no route)"),
    (("host key verification failed",), "host key of {h} is not trusted (Host key verification failed)"),
    (("connection timed out", "operation timed out"), "connection to {h} timed out"),
    (("no space left on device", "disk quota exceeded"), "remote disk full on {h}"),
    (("rsync: command not found", "rsync: not found"), "rsync is not installed on {h}"),
    (("closed by remote host", "connection reset", "broken pipe", "not responding", "connection closed",
      "read header failed"), "the connection to {h} dropped"),
)
# ssh's own lines in a run log (the rest is the run's output and must not be read as a fault)
_SSH_LINE_KEYS = ("ssh", "connection", "closed by", "broken pipe", "mux_client", "timeout, server",
                  "not responding")
# rsync exit codes that mean the link, not the files, failed: worth another try
RSYNC_TRANSIENT = {5, 10, 12, 30, 35, 255}


class TransportFault(Exception):
    """The executor could not talk to the host (or the host could not do what was asked)."""

    def __init__(self, message: str, code: int = 255) -> None:
        super().__init__(message)
        self.code = code


class _Failed(Exception):
    """One try of a command failed; ``again`` says whether another try may help."""

    def __init__(self, got: proc.Completed, again: bool) -> None:
        super().__init__(got.stderr)
        self.got = got
        self.again = again


def parse_options(entries: Sequence[str] | str | None) -> list[str]:
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
        out += shlex.split(entry) if entry.startswith("-") else ["-o", entry]
    return out


class SshTransport:
    """ssh and rsync to one host, resolved once against the user's configuration."""

    def __init__(self, workspace: Path, host: str, options: Sequence[str] | str | None = None, *,
                 retries: int = 3, control_timeout: float = 120.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.workspace = Path(workspace)
        self.host = host
        self.user_options = parse_options(options)
        self.retries = max(1, retries)
        self.control_timeout = control_timeout
        self.sleep = sleep
        self.connect_timeout = CONNECT_TIMEOUT
        self.control_path: Path | None = None  # set when looper manages the shared connection
        self._argv: list[str] | None = None
        self._argv_solo: list[str] = []  # the same without looper's connection sharing

    # -- the command line -------------------------------------------------------------------
    def control_path_for(self) -> Path:
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

    def argv(self) -> list[str]:
        """``ssh`` plus the options looper adds, resolved once against the user's config."""
        if self._argv is not None:
            return self._argv
        if shutil.which("ssh") is None:
            raise TransportFault("the OpenSSH client 'ssh' is not installed on this machine", NO_TOOL_CODE)
        got = proc.run(["ssh", "-G", *self.user_options, self.host], timeout=30)
        if not got.ok:
            raise TransportFault(f"ssh cannot read its configuration for host {self.host!r}: "
                                 f"{last_lines(got.stderr) or got.exit_code}", got.exit_code or 255)
        eff: dict[str, str] = {}
        for line in got.stdout.splitlines():
            key, _, value = line.partition(" ")
            eff.setdefault(key.lower(), value.strip())
        add = ["-o", "BatchMode=yes"]
        if eff.get("connecttimeout", "none") in ("none", "0", ""):
            add += ["-o", f"ConnectTimeout={CONNECT_TIMEOUT}"]
        else:
            self.connect_timeout = int(eff["connecttimeout"])
        if eff.get("serveraliveinterval", "0") in ("0", ""):
            add += ["-o", f"ServerAliveInterval={ALIVE_INTERVAL}"]
        self._argv_solo = ["ssh", *self.user_options, *add]
        if eff.get("controlmaster", "false") == "false" and eff.get("controlpath", "none") in ("none", ""):
            path = self.control_path_for()
            value = str(path).replace("%", "%%")
            if " " in value:
                value = f'"{value}"'
            add += ["-o", "ControlMaster=auto", "-o", f"ControlPath={value}",
                    "-o", f"ControlPersist={CONTROL_PERSIST}"]
            self.control_path = path
        self._argv = ["ssh", *self.user_options, *add]
        return self._argv

    def command(self, line: str, solo: bool = False) -> list[str]:
        """argv running the shell ``line`` with /bin/sh on the host, whatever the login shell is.

        ``solo``: a connection of its own, not the shared one. A multiplexed client hands its
        stdout to the master, so killing it would not end the stream; a run's ssh must own it.
        """
        argv = self.argv()
        if solo and self.control_path is not None:
            argv = [*self._argv_solo, "-o", "ControlMaster=no", "-o", "ControlPath=none"]
        return [*argv, self.host, "sh -c " + shlex.quote(line)]

    def spec(self, remote_path: str) -> str:
        return f"{self.host}:{remote_path}"

    # -- faults in words --------------------------------------------------------------------
    def describe(self, got: proc.Completed | None, text: str = "") -> str:
        """A transport failure in words, naming the host."""
        raw = text or (got.stderr if got else "")
        low = raw.lower()
        h = self.host
        if got is not None and got.timed_out:
            why = f"ssh to {h} did not answer within {got.seconds:.0f} s"
        else:
            why = next((words.format(h=h) for needles, words in FAULT_WORDS
                        if any(n in low for n in needles)), f"ssh to {h} failed")
        detail = last_lines(raw)
        return f"{why}: {detail}" if detail else why

    def drop_words(self, log_tail: str) -> str:
        """ssh's 255 in the middle of a run in words, from ssh's own lines in the log only."""
        own = "\n".join(ln for ln in log_tail.splitlines() if any(k in ln.lower() for k in _SSH_LINE_KEYS))
        if own:
            return self.describe(None, own)
        return f"the connection to {self.host} dropped (ssh exited 255 without a message)"

    # -- commands under the one retry policy --------------------------------------------------
    def _retried(self, argv: list[str], timeout: float, tries: int,
                 again: Callable[[proc.Completed], bool]) -> proc.Completed:
        def attempt() -> proc.Completed:
            got = proc.run(argv, timeout=timeout)
            if got.ok or not (got.timed_out or again(got)):
                return got
            raise _Failed(got, True)

        return retry_call(attempt, tries=tries, retry_if=lambda exc: isinstance(exc, _Failed),
                          base_delay=BACKOFF[0], max_delay=BACKOFF[1], sleep=self.sleep)

    def control(self, line: str, timeout: float | None = None, retries: int | None = None) -> proc.Completed:
        """Run a short, idempotent remote command; ssh's own failure (255) or a timeout is retried."""
        try:
            return self._retried(self.command(line), timeout or self.control_timeout, retries or self.retries,
                                 lambda got: got.exit_code == 255)
        except _Failed as failed:
            raise TransportFault(self.describe(failed.got), 255) from None

    def rsync(self, args: list[str], what: str, timeout: float = 3600) -> None:
        """rsync over the same ssh command line; a link failure is retried, others are not."""
        if shutil.which("rsync") is None:
            raise TransportFault("rsync is not installed on this machine", NO_TOOL_CODE)
        argv = ["rsync", "-a", "--timeout=120", "-e", shlex.join(self.argv()), *args]
        try:
            got = self._retried(argv, timeout, self.retries, lambda got: got.exit_code in RSYNC_TRANSIENT)
        except _Failed as failed:
            got = failed.got
        if not got.ok:
            code = got.exit_code if got.exit_code is not None else NO_TOOL_CODE
            raise TransportFault(f"{what} failed (rsync exit {got.exit_code}): {self.describe(got)}", code)

    def close(self) -> None:
        """Close the shared connection looper opened (no-op when the user's config manages it)."""
        if self.control_path is None or self._argv is None:
            return
        proc.run([*self._argv, "-O", "exit", self.host], timeout=10)
