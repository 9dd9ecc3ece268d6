"""The pid trail kills only what looper started: a planted or stale note ends nothing."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from looper import proc

pytestmark = pytest.mark.e2e  # the end-to-end tier: real process groups


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def _victim() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "300"], start_new_session=True)


def test_planted_note_for_an_unrelated_group_kills_nothing(tmp_path: Path) -> None:
    victim = _victim()
    try:
        trail = tmp_path / "pids"
        trail.mkdir()
        (trail / f"{victim.pid}.pid").write_text("train.py\n")  # the old format, or a planted note
        forged = {"format": proc.TRAIL_FORMAT, "pgid": victim.pid, "start": "1", "boot": "x", "cmd_sha256": "0",
                  "cmd": "python train.py"}
        said = proc.reap_trail(trail)
        assert said == [f"ignored {victim.pid}.pid: not a pid note looper wrote"]
        (trail / f"{victim.pid}.pid").write_text(json.dumps(forged))
        said = proc.reap_trail(trail)
        assert len(said) == 1 and said[0].startswith(f"left process {victim.pid} alone"), said
        time.sleep(0.2)
        assert _alive(victim.pid)
        assert not list(trail.glob("*.pid"))
    finally:
        victim.kill()
        victim.wait()


def test_a_group_looper_started_is_ended_after_a_daemon_death(tmp_path: Path) -> None:
    trail = tmp_path / "pids"
    proc.set_trail(trail)
    try:
        child = subprocess.Popen(["sleep", "301"], start_new_session=True)
        note = proc._trail_add(child.pid, ["sleep", "301"])  # what run()/supervise() note for each child
    finally:
        proc.set_trail(None)
    assert note is not None
    record = json.loads(note.read_text())
    assert record["start"] and record["boot"] and record["cmd"] == "sleep 301"
    said = proc.reap_trail(trail)  # a restarted daemon
    child.wait(timeout=10)
    assert said and said[0].startswith(f"ended a process a previous daemon left behind: group {child.pid}")
    assert not _alive(child.pid)
