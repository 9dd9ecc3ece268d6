"""A real OpenSSH server on 127.0.0.1 for the SSH executor tests.

Throw-away host and user keys in a temporary folder, an sshd_config listening on a free
port, and an ssh config file with a ``looper-test`` alias that the executor is pointed at
through ``ssh_options = ["-F <file>"]``. Without sshd, ssh or rsync the tests FAIL with the
apt line that installs them, unless the tier is skipped by name (``LOOPER_SKIP_TIERS=ssh``;
tests/tiers.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tiers

from looper.executors.ssh.executor import SshExecutor

SSHD = "/usr/sbin/sshd"
HOST = "looper-test"
CUDA1_HOST = "looper-cuda1"  # the same host, its sessions with CUDA_VISIBLE_DEVICES=1


def _require_tools() -> None:
    missing = [t for t in (SSHD,) if not os.path.exists(t)]
    missing += [t for t in ("ssh", "ssh-keygen", "rsync", "setsid") if shutil.which(t) is None]
    tiers.require("ssh", missing)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def descendants(pid: int) -> list[int]:
    kids = _children_map()
    out: list[int] = []
    todo = list(kids.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


class SshServer:
    """One sshd -D process; can be stopped the hard way and started again on the same port."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        home.mkdir(parents=True, exist_ok=True)
        for name in ("host_key", "user_key", "other_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / name)], check=True)
        (home / "authorized_keys").write_text((home / "user_key.pub").read_text())
        user = os.environ.get("USER") or subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
        (home / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {home / 'host_key'}\n"
            f"PidFile {home / 'sshd.pid'}\nAuthorizedKeysFile {home / 'authorized_keys'}\n"
            "StrictModes no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nPubkeyAuthentication yes\n"
            "MaxSessions 64\nMaxStartups 64\nLogLevel ERROR\n"
            # bash reads ~/.bashrc for commands sshd starts unless SHLVL says it is nested; a
            # heavy .bashrc (pyenv init) would add ~0.5 s to every remote command of the suite
            "SetEnv SHLVL=1\n"
            # a host whose sessions get CUDA_VISIBLE_DEVICES (the looper-cuda1 alias sends it, as a login's rc would set it)
            "AcceptEnv CUDA_VISIBLE_DEVICES\n")
        common = ("  HostName 127.0.0.1\n"
                  f"  Port {self.port}\n  User {user}\n  IdentitiesOnly yes\n"
                  "  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  LogLevel ERROR\n")
        (home / "ssh_config").write_text(
            f"Host {HOST}\n{common}  IdentityFile {home / 'user_key'}\n  ConnectTimeout 5\n\n"
            f"Host looper-badkey\n{common}  IdentityFile {home / 'other_key'}\n\n"
            f"Host {CUDA1_HOST}\n{common}  IdentityFile {home / 'user_key'}\n  SetEnv CUDA_VISIBLE_DEVICES=1\n\n"
            f"Host looper-closed\n  HostName 127.0.0.1\n  Port {_free_port()}\n  User {user}\n"
            "  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n")
        self.ssh_config = home / "ssh_config"

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation dir (Debian)
        self.proc = subprocess.Popen([SSHD, "-D", "-f", str(self.home / "sshd_config"),
                                      "-E", str(self.home / "sshd.log")])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: "
                                   f"{(self.home / 'sshd.log').read_text(errors='replace')}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd did not listen on port {self.port} within 10 s")

    def kill_all(self) -> None:
        """Kill the listener and every per-connection sshd: open sessions drop at once.

        The commands those sessions started are left alone, as on a host whose sshd died.
        """
        if self.proc is None:
            return
        victims = [p for p in descendants(self.proc.pid) if _comm(p) == "sshd"]
        for pid in [self.proc.pid, *victims]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    _require_tools()
    server = SshServer(tmp_path_factory.mktemp("sshd"))
    server.start()
    yield server
    server.kill_all()


@pytest.fixture
def cuda1_host() -> str:
    """The alias of the test host whose sessions get CUDA_VISIBLE_DEVICES=1 (its ssh client sends it)."""
    return CUDA1_HOST


@pytest.fixture
def sshd(sshd_server: SshServer) -> SshServer:
    sshd_server.start()  # a test before may have stopped it
    return sshd_server


FIXED_PREPARE = '''\
import argparse, json, pathlib
ap = argparse.ArgumentParser()
ap.add_argument("--out"); ap.add_argument("--scale"); ap.add_argument("--seed", type=int)
a = ap.parse_args()
out = pathlib.Path(a.out)
(out / "tiles").mkdir(parents=True)
for i in range(3):
    (out / "tiles" / f"t{i}.txt").write_text(f"{a.scale}-{a.seed}-{i}")
calls = pathlib.Path(__file__).resolve().parent.parent / "prepare_calls.log"
with open(calls, "a") as f:
    f.write("called\\n")
(out / "manifest.json").write_text(json.dumps({"version": 1, "scale": a.scale, "seed": a.seed}))
print("prepared", out)
'''

FIXED_EVALUATE = '''\
import argparse, json, os, pathlib
ap = argparse.ArgumentParser()
ap.add_argument("--weights"); ap.add_argument("--data"); ap.add_argument("--out"); ap.add_argument("--device")
a = ap.parse_args()
if os.environ.get("LOOPER_DEVICE") == "write-nothing" or a.device == "write-nothing":
    print("evaluated nothing"); raise SystemExit(0)
w = pathlib.Path(a.weights)
pathlib.Path(a.out).write_text(json.dumps({"schema": 1, "weights": str(w), "weights_bytes": w.stat().st_size,
                                           "data": a.data, "pages": 1}))
print("evaluated", w)
'''

TRAIN_OK = '''\
import json, os, pathlib
out = pathlib.Path(os.environ["LOOPER_OUT"])
print("env", os.environ["LOOPER_BUDGET_SECONDS"], os.environ["LOOPER_SEED"], os.environ["LOOPER_DATA"],
      os.environ["LOOPER_DEVICE"], os.getcwd(), flush=True)
(out / "weights.pt").write_bytes(b"W" * 1000)
(out / "train.json").write_text(json.dumps({"steps": 3, "epochs": 1, "seconds": 0.1}))
print("done", flush=True)
'''


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A local checkout with fixture prepare.py / evaluate.py and a quick train.py."""
    co = tmp_path / "checkout"
    co.mkdir()
    (co / "prepare.py").write_text(FIXED_PREPARE)
    (co / "evaluate.py").write_text(FIXED_EVALUATE)
    (co / "train.py").write_text(TRAIN_OK)
    return co


@pytest.fixture
def make_executor(sshd: SshServer, tmp_path: Path) -> Iterator[Callable[..., SshExecutor]]:
    made: list[SshExecutor] = []

    def make(host: str = HOST, remote: Path | None = None, **kw: Any) -> SshExecutor:
        section = {"kind": "ssh", "host": host, "remote_dir": str(remote or tmp_path / "remote"),
                   "python": kw.pop("python", sys.executable), "require_gpu": kw.pop("require_gpu", False),
                   "ssh_options": [f"-F {sshd.ssh_config}"], "gpu_index": 0,
                   "sandbox": kw.pop("sandbox", "bwrap")}
        kw.setdefault("kill_after", 1.0)
        kw.setdefault("retries", 2)
        ex = SshExecutor(tmp_path / "ws", section, **kw)
        made.append(ex)
        return ex

    (tmp_path / "ws").mkdir()
    yield make
    for ex in made:
        try:
            ex.close()
        except Exception:
            pass
