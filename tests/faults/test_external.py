"""Fault matrix, part 3: things outside looper go away -- the database is locked by another
process, the agent's HTTP endpoint disappears, the SSH host disappears."""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from faultkit import (
    assert_nothing_lost,
    integrity_ok,
    patch_config,
    procs_with_env,
    runs_rows,
    wrapped_daemon,
)

pytestmark = pytest.mark.e2e


def _thinking(ws) -> bool:  # noqa: ANN001
    return bool(procs_with_env("FIXTURE_QUEUE", str(ws.queue), "agent.py")) and not list(ws.queue.glob("*.json"))


# ---------------------------------------------------------------- the database locked
def test_db_locked_briefly_the_daemon_waits_and_continues(make_ws, pages):
    """Another process holds BEGIN EXCLUSIVE for 3 s while the daemon must write (busy
    timeout 30 s in looper/store/repo.py): it waits, then goes on; nothing is corrupted."""
    ws = make_ws()
    ws.baseline_only()
    ws.enqueue("a fine change", knobs={"QUALITY": 0.8}, sleep=1)
    daemon = ws.start("--max-experiments", "1")
    con = sqlite3.connect(ws.root / "experiments.db", timeout=10, isolation_level=None)
    try:
        ws.wait_for(lambda: _thinking(ws), 60, "the agent to think")
        con.execute("BEGIN EXCLUSIVE")
        time.sleep(3.0)  # the agent answers after 1 s: the daemon's next write waits on the lock
        assert ws.rows() == [], "the daemon wrote through an exclusive lock"
        con.execute("COMMIT")
        out, _ = daemon.communicate(timeout=90)
    finally:
        con.close()
        if daemon.poll() is None:
            daemon.kill()
    assert daemon.returncode == 0, out
    assert [x["status"] for x in ws.rows()] == ["keep"]
    assert pages.pages == []
    integrity_ok(ws.root / "experiments.db")
    assert_nothing_lost(ws)


def _lock_past_timeout(ws) -> tuple[int, str]:  # noqa: ANN001
    daemon = wrapped_daemon(ws, "import looper.store.values as v\nv.BUSY_TIMEOUT_MS = 1500", "--max-experiments", "1")
    con = sqlite3.connect(ws.root / "experiments.db", timeout=10, isolation_level=None)
    try:
        ws.wait_for(lambda: _thinking(ws), 60, "the agent to think")
        con.execute("BEGIN EXCLUSIVE")
        try:
            out, _ = daemon.communicate(timeout=60)
        finally:
            con.execute("COMMIT")
    finally:
        con.close()
        if daemon.poll() is None:
            daemon.kill()
    return daemon.returncode, out


def test_db_locked_past_the_busy_timeout_still_pages_a_person(make_ws, pages):
    ws = make_ws()
    ws.baseline_only()
    ws.enqueue("a fine change", knobs={"QUALITY": 0.8}, sleep=1)
    code, out = _lock_past_timeout(ws)
    assert code == 3, out
    assert len(pages.pages) == 1, (pages.pages, out)


def test_db_locked_past_the_busy_timeout_halts_with_an_error(make_ws, pages):
    """The lock outlasts the busy timeout (shortened to 1.5 s for the test through a wrapper
    that sets looper.store.values.BUSY_TIMEOUT_MS; no looper code changed): the daemon must
    halt with exit 3 and say why, the database must stay intact, and a restart must go on.
    (The page is the test above.)"""
    ws = make_ws()
    ws.baseline_only()
    ws.enqueue("a fine change", knobs={"QUALITY": 0.8}, sleep=1)
    code, out = _lock_past_timeout(ws)
    integrity_ok(ws.root / "experiments.db")
    assert code == 3, out
    assert "database is locked" in out and "experiments.db" in out, out
    # after the lock is gone, a restart recovers and goes on
    ws.enqueue("after the lock", knobs={"QUALITY": 0.85})
    r = ws.looper("run", "--max-experiments", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ws.rows()[-1]["status"] == "keep"
    integrity_ok(ws.root / "experiments.db")
    assert_nothing_lost(ws)


# ---------------------------------------------------------------- the agent endpoint goes away
class ChatServer:
    """An OpenAI-compatible chat-completions endpoint on loopback that serves ``replies``,
    then goes away: every later request is accepted and the connection dropped without a
    reply (what a client sees of a proxy whose upstream died). The instant of every request
    is recorded, so the test sees each retry and the backoff between them."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.requests = 0
        self.times: list[float] = []  # time.monotonic() of every request, answered or dropped
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                srv.requests += 1
                srv.times.append(time.monotonic())
                if not srv.replies:  # gone: no status line, the connection just closes
                    self.close_connection = True
                    return
                content = srv.replies.pop(0)
                body = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.closed = threading.Event()
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            self.server.shutdown()
            self.server.server_close()


def test_agent_endpoint_going_away_halts_after_retries_and_pages_once(make_ws, pages):
    """Row 16: one reply, then the endpoint drops every request. The agent tries 4 times with
    2, 4, 8 s of backoff between tries (OpenAIAgent defaults), then the loop halts and pages."""
    ws = make_ws()
    src = (ws.root / "train.py").read_text().replace("QUALITY = 0.5", "QUALITY = 0.8")
    chat = ChatServer([f"DESCRIPTION: QUALITY 0.5 -> 0.8\n\n```python\n{src}```\nBecause higher is better.\n"])
    patch_config(ws, "agent", kind="openai", base_url=f"http://127.0.0.1:{chat.port}/v1", model="fixture-model",
                 api_key_env="FAULT_TEST_KEY")
    env = ws.env()
    env["FAULT_TEST_KEY"] = "sk-faulttest0123456789"
    t0 = time.monotonic()
    try:
        r = ws.looper("run", env=env)
    finally:
        chat.close()
    took = time.monotonic() - t0
    assert r.returncode == 3, r.stdout + r.stderr
    # one answered request, then the second proposal's 4 tries, each one observed by the server
    assert chat.requests == 1 + 4, chat.times
    gaps = [b - a for a, b in zip(chat.times[1:], chat.times[2:], strict=False)]
    for gap, backoff in zip(gaps, (2.0, 4.0, 8.0), strict=True):
        assert backoff - 0.1 <= gap <= backoff + 3.0, f"backoff {backoff} s, observed gaps {gaps}"
    exp = ws.rows()
    assert [x["status"] for x in exp] == ["keep"] and exp[0]["description"] == "QUALITY 0.5 -> 0.8"
    assert len(pages.pages) == 1
    page = json.dumps(pages.pages[0])
    assert "agent endpoint" in page and "failed 4 times" in page, page
    assert "sk-faulttest0123456789" not in page + r.stdout + r.stderr
    assert took < 60  # 4 tries with 2+4+8 s of backoff (defaults; not configurable, see RELIABILITY.md)
    assert_nothing_lost(ws, halted="halt")


# ---------------------------------------------------------------- the SSH host goes away
def _ssh_kit():  # noqa: ANN202
    path = Path(__file__).resolve().parents[1] / "executors" / "ssh" / "conftest.py"
    spec = importlib.util.spec_from_file_location("faults_ssh_kit", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _procs_under(folder: Path) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if str(Path(f"/proc/{entry}/cwd").resolve()).startswith(str(folder)):
                    found.append(int(entry))
            except OSError:
                continue
    return found


def test_ssh_host_going_away_mid_night_halts_and_pages_once(make_ws, pages, tmp_path):
    kit = _ssh_kit()
    kit._require_tools()
    server = kit.SshServer(tmp_path / "sshd")
    server.start()
    remote = tmp_path / "remote"
    try:
        ws = make_ws(loop_budget_seconds=30, loop_stall_seconds=30)
        patch_config(ws, "executor", kind="ssh", host=kit.HOST, remote_dir=str(remote), python=sys.executable,
                     ssh_options=[f"-F {server.ssh_config}"])
        ws.enqueue("a fine change", knobs={"QUALITY": 0.8})
        ws.enqueue("a long run", knobs={"SCENARIO": "hang"})
        daemon = ws.start()
        try:
            ws.wait_for(lambda: len(ws.rows()) == 2 and ws.rows()[1]["status"] == "running"
                        and (ws.rows()[1]["phase"] or "").startswith("train"), 120, "the second run to train")
            time.sleep(1.0)
            server.kill_all()  # the host goes away: listener and open sessions
            out, _ = daemon.communicate(timeout=120)
        finally:
            if daemon.poll() is None:
                daemon.kill()
        assert daemon.returncode == 3, out
        kept, lost = ws.rows()
        assert kept["status"] == "keep"
        assert lost["status"] == "error" and lost["score"] is None, lost["status"]
        assert not [x for x in ws.rows() if x["status"] == "crash"]
        assert len(pages.pages) == 1
        assert_nothing_lost(ws, halted="halt")
        # the host comes back: a restart ends the run the dead link left behind, and recovers
        server.start()
        ws.baseline_only()
        assert not _procs_under(remote / "checkout"), "the orphaned remote run survived the restart"
        assert ws.events("recover")
        assert len(runs_rows(ws)) >= 3
    finally:
        for pid in _procs_under(remote):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        server.kill_all()
