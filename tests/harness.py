"""Shared harness-test fixtures: a real workspace (real git, real SQLite, the real daemon as a subprocess) with fixture
train.py / evaluate.py / prepare.py that behave as each test needs in about a second."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parent / "fixture_ws"


class PageSink:
    """A real HTTP endpoint on loopback that apprise's json:// posts pages to."""

    def __init__(self) -> None:
        self.pages: list[dict] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    sink.pages.append(json.loads(body))
                except ValueError:
                    sink.pages.append({"raw": body.decode(errors="replace")})
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.port}/page"

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def pages():
    sink = PageSink()
    yield sink
    sink.close()


class WS:
    """One fixture workspace and helpers to drive the daemon in it."""

    def __init__(self, root: Path, queue: Path, notify_url: str) -> None:
        self.root = root
        self.queue = queue
        self.notify_url = notify_url
        self._n = 0

    def enqueue(self, description: str, **item: object) -> None:
        self._n += 1
        item["description"] = description
        (self.queue / f"{self._n:03d}.json").write_text(json.dumps(item))

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"FIXTURE_QUEUE": str(self.queue), "LOOPER_NOTIFY_URLS": "", "PYTHONUNBUFFERED": "1"})
        env.pop("LOOPER_WORKSPACE", None)
        return env

    def looper(self, *args: str, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "looper.cli", *args], cwd=self.root, env=env or self.env(),
                              capture_output=True, text=True, timeout=timeout)

    def baseline_only(self, env: dict | None = None) -> None:
        """Measure the tag's baseline and start no experiment (`looper run --until` now).

        `--until HH:MM` more than a minute past means tomorrow's, so a run begun in a minute's last 10 s
        could straddle into the next one and go on proposing: wait for the next minute then."""
        if time.localtime().tm_sec >= 50:
            time.sleep(61 - time.localtime().tm_sec)
        r = self.looper("run", "--max-experiments", "0", "--until", time.strftime("%H:%M"), env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert [x["status"] for x in self.rows("baseline")] == ["keep"], r.stdout + r.stderr

    def start(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "looper.cli", "run", *args], cwd=self.root,
                                env=env or self.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def db(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.root / "experiments.db")
        con.row_factory = sqlite3.Row
        return con

    def rows(self, kind: str = "candidate") -> list[dict]:
        with self.db() as con:
            return [dict(r) for r in con.execute("SELECT * FROM experiments WHERE kind=? ORDER BY id", (kind,))]

    def events(self, kind: str | None = None) -> list[dict]:
        with self.db() as con:
            q = "SELECT * FROM events" + (" WHERE kind=?" if kind else "") + " ORDER BY id"
            return [dict(r) for r in con.execute(q, (kind,) if kind else ())]

    def git(self, *args: str, cwd: Path | None = None) -> str:
        return subprocess.run(["git", *args], cwd=cwd or self.root, capture_output=True, text=True,
                              check=True).stdout.strip()

    @property
    def worktree(self) -> Path:
        return self.root / ".looper" / "worktrees" / "t"

    def by_description(self) -> dict[str, dict]:
        return {r["description"]: r for r in self.rows()}

    def training(self) -> bool:
        """Is an experiment running and in a training phase?"""
        return any(r["status"] == "running" and (r["phase"] or "").startswith("train") for r in self.rows())

    def wait_training(self, timeout: float = 90, what: str = "training") -> None:
        """Wait until an experiment is running and training (AssertionError naming ``what`` after ``timeout``)."""
        self.wait_for(self.training, timeout, what)

    def wait_for(self, predicate, timeout: float = 60, what: str = "condition") -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if predicate():
                    return
            except sqlite3.Error:
                pass
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}")


def write_config(root: Path, notify_url: str, agent_cmd: str, **over: object) -> None:
    agent_cmd = str(over.pop("agent_command", agent_cmd))  # a test's own agent program
    loop = {"tag": "t", "budget_seconds": 6, "grace_seconds": 2, "stall_seconds": 4, "max_experiments": 0,
            "stuck_after": 3, "noise_reruns": 1,
            "baseline_seeds": 2, "confirm_seeds": 0,  # a test that confirms turns it on (loop_confirm_seeds)
            # The fixture train.py's noise is NOISE * (seed % 3 - 1): its tests read LOOPER_SEED as the seed's number.
            # The values drawn from the secret (the default) are proven in tests/security/test_secret_seeds.py.
            "secret_seeds": False}
    loop.update({k[5:]: v for k, v in over.items() if k.startswith("loop_")})
    gate = {"score": "weighted_f1", "max_class_drop": 0.05}
    gate.update({k[5:]: v for k, v in over.items() if k.startswith("gate_")})

    def val(v: object) -> str:
        return json.dumps(v) if not isinstance(v, bool) else ("true" if v else "false")

    text = "[loop]\n" + "".join(f"{k} = {val(v)}\n" for k, v in loop.items())
    text += '\n[data]\ndir = "data"\nscale = "tiny"\nseed = 0\n'
    text += "\n[gate]\n" + "".join(f"{k} = {val(v)}\n" for k, v in gate.items())
    text += f'\n[agent]\nkind = "command"\ncommand = {json.dumps(agent_cmd)}\ntimeout_seconds = 60\n'
    # The fixture agent claims its queue (a folder beside the workspace) and writes its prompts there, which
    # its box does not allow: it runs with the box's explicit opt-out unless a test asks for the box
    # (agent_sandbox = "bwrap", with agent_pass_env / agent_readable / agent_network: tests/security/test_agent_box.py).
    agent = {"sandbox": "none"}
    agent.update({k[6:]: v for k, v in over.items() if k.startswith("agent_")})
    text += "".join(f"{k} = {val(v)}\n" for k, v in agent.items())
    executor = {"kind": "local"}
    executor.update({k[5:]: v for k, v in over.items() if k.startswith("exec_")})
    text += "\n[executor]\n" + "".join(f"{k} = {val(v)}\n" for k, v in executor.items())
    text += f"\n[notify]\nurls = [{json.dumps(notify_url) if notify_url else ''}]\n"
    (root / "looper.toml").write_text(text)


def build_ws(root: Path, queue: Path, notify_url: str, **over: object) -> WS:
    """A committed fixture workspace in ``root`` (new), its agent's queue in ``queue`` (new)."""
    from looper.workspace.create import init_workspace

    init_workspace(root)
    for name in ("train.py", "evaluate.py", "prepare.py"):
        shutil.copy(FIXTURE / name, root / name)
    queue.mkdir()
    agent_cmd = f"{sys.executable} {FIXTURE / 'agent.py'}"
    write_config(root, notify_url, agent_cmd, **over)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "fixtures"],
                   cwd=root, check=True)
    return WS(root, queue, notify_url)


@pytest.fixture
def make_ws(tmp_path: Path, pages: PageSink):
    """make_ws(**config_overrides) -> WS: a committed fixture workspace."""
    made: list[WS] = []

    def make(**over: object) -> WS:
        ws = build_ws(tmp_path / f"ws{len(made)}", tmp_path / f"queue{len(made)}", pages.url, **over)
        made.append(ws)
        return ws

    yield make
    for ws in made:  # no stray children
        for p in (ws.root / ".looper" / "pids").glob("*.pid") if (ws.root / ".looper" / "pids").exists() else []:
            try:
                os.killpg(int(p.stem), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def outside_labelled_fences(prompt: str, needle: str) -> list[str]:
    """Lines of an agent's prompt holding ``needle`` that are NOT inside a fence whose label line
    says it is untrusted data (looper.core.verdicts.untrusted.LABEL)."""
    import re

    from looper.core.verdicts.untrusted import LABEL

    bad: list[str] = []
    fence, labelled, prev = "", False, ""
    for line in prompt.split("\n"):
        if fence:
            if line == fence:
                fence = ""
            elif needle in line and not labelled:
                bad.append(line)
        elif line.startswith("```"):
            fence = re.match(r"`+", line).group(0)  # type: ignore[union-attr]
            labelled = prev.endswith(LABEL)
        elif needle in line:
            bad.append(line)
        prev = line
    return bad
