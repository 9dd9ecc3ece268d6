"""Fault matrix, part 2: the daemon killed (SIGKILL) in each phase, then restarted.

Training is covered by tests/night/test_loop.py::test_kill_9_mid_training_then_restart_recovers_and_continues.
Here: the agent phase, evaluation, and recording (LOOPER_FAULT_PAUSE=record:30 pauses just
before an experiment's outcome is written). After the restart: the interrupted experiment
is `interrupted`, the worktree is back at the last kept commit, the next experiment runs."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from faultkit import assert_nothing_lost, kill_pids, procs_with_env, runs_rows

from looper.proc import group_gone

pytestmark = pytest.mark.e2e


def _sigkill(daemon) -> None:  # noqa: ANN001
    try:
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(10)
    finally:
        if daemon.poll() is None:
            daemon.kill()


def _restart_and_continue(ws) -> tuple[dict, dict]:  # noqa: ANN001
    """Restart with one fine change queued; returns (the killed experiment's row or {}, the new row)."""
    ws.enqueue("a fine change after the restart", knobs={"QUALITY": 0.8})
    r = ws.looper("run", "--max-experiments", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = ws.rows()
    new = rows[-1]
    assert new["status"] == "keep" and new["description"] == "a fine change after the restart"
    base = ws.rows("baseline")[-1]
    assert new["parent"] == base["commit"], "the next experiment did not start from the last kept commit"
    assert ws.git("rev-parse", "looper/t") == new["commit"]
    return (rows[-2] if len(rows) > 1 else {}), new


def _thinking(ws) -> bool:  # noqa: ANN001
    """The agent is running and has claimed its queue item (it sleeps after claiming)."""
    return bool(procs_with_env("FIXTURE_QUEUE", str(ws.queue), "agent.py")) and not list(ws.queue.glob("*.json"))


def _assert_interrupted(row: dict) -> None:
    assert row["status"] == "interrupted" and row["score"] is None, row["status"]
    assert row["finished_at"]


def _kill_daemon_while_the_agent_thinks(ws) -> tuple[subprocess.Popen, list[int]]:
    """Start the daemon, SIGKILL it while its (slow) agent thinks; returns it and the agent pids."""
    ws.baseline_only()
    ws.enqueue("a slow idea", knobs={"QUALITY": 0.9}, sleep=30)
    daemon = ws.start("--max-experiments", "1")
    ws.wait_for(lambda: _thinking(ws), 60, "the agent to think")
    _sigkill(daemon)
    return daemon, procs_with_env("FIXTURE_QUEUE", str(ws.queue), "agent.py")


def test_kill_9_while_the_agent_thinks(make_ws):
    ws = make_ws()
    daemon, orphans = None, []
    try:
        daemon, orphans = _kill_daemon_while_the_agent_thinks(ws)
        kill_pids(orphans)  # the orphaned agent is the subject of the next test, not this one
        assert not list(ws.queue.glob("*.json")), "the killed agent had claimed its queue item"
        assert ws.rows() == [], "an experiment row exists although the agent had not answered"
        left = list(Path(tempfile.gettempdir()).glob(f"looper-agent-{daemon.pid}-*"))
        assert len(left) == 1 and (left[0] / "io" / "prompt.md").is_file()  # the killed daemon's prompt, left
        killed, new = _restart_and_continue(ws)
        assert not left[0].exists(), "the restart left the killed daemon's agent copy and prompt in the temp folder"
    finally:
        kill_pids(orphans)
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
    assert killed == {}  # nothing was started, so nothing is interrupted
    assert_nothing_lost(ws)


def test_restart_ends_the_agent_a_killed_daemon_left_behind(make_ws):
    ws = make_ws()
    daemon, orphans = None, []
    try:
        daemon, orphans = _kill_daemon_while_the_agent_thinks(ws)
        assert orphans, "expected the killed daemon's agent to be still running"
        ws.baseline_only()  # a restart that starts no experiment: recovery only
        alive = procs_with_env("FIXTURE_QUEUE", str(ws.queue), "agent.py")
        assert not set(alive) & set(orphans), f"agent pid(s) {alive} outlived the restart"
    finally:
        kill_pids(orphans)
        if daemon is not None and daemon.poll() is None:
            daemon.kill()


def test_kill_9_during_evaluation(make_ws):
    ws = make_ws()
    ws.baseline_only()
    ws.enqueue("evaluated slowly", knobs={"QUALITY": 0.9})
    env = ws.env()
    env["FIXTURE_EVAL_SLEEP"] = "60"
    daemon = ws.start("--max-experiments", "1", env=env)
    try:
        ws.wait_for(lambda: any(r["status"] == "running" and (r["phase"] or "").startswith("evaluate")
                                for r in ws.rows()), 60, "the candidate to be evaluated")
        ws.wait_for(lambda: list((ws.root / ".looper" / "pids").glob("*.pid")), 10, "the evaluator's pid file")
        left = [int(p.stem) for p in (ws.root / ".looper" / "pids").glob("*.pid")]
        _sigkill(daemon)
    finally:
        if daemon.poll() is None:
            daemon.kill()
    assert ws.git("rev-parse", "looper/t") == ws.rows()[0]["commit"]  # mid-experiment state
    killed, _new = _restart_and_continue(ws)
    _assert_interrupted(killed)
    assert ws.events("recover")
    for pgid in left:  # the orphaned evaluator (it would sleep 60 s) was ended by the recovery
        assert group_gone(pgid, within=15), f"process group {pgid} outlived the recovery"
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, 0)
    assert_nothing_lost(ws, recovered=True)


def test_kill_9_while_recording_the_outcome(make_ws):
    ws = make_ws()
    ws.baseline_only()
    ws.enqueue("a keep, never recorded", knobs={"QUALITY": 0.9})
    env = ws.env()
    env["LOOPER_FAULT_PAUSE"] = "record:30"
    daemon = ws.start("--max-experiments", "1", env=env)
    try:
        def recording() -> bool:
            rows = ws.rows()
            return bool(rows) and rows[0]["status"] == "running" and \
                any(x["experiment_id"] == rows[0]["id"] for x in runs_rows(ws))

        ws.wait_for(recording, 60, "the candidate to be measured and about to be recorded")
        import time

        time.sleep(0.5)  # inside fault_pause("record")
        _sigkill(daemon)
    finally:
        if daemon.poll() is None:
            daemon.kill()
    exp = ws.rows()[0]
    assert exp["status"] == "running" and exp["score"] is None  # the outcome was never written
    measured = [x for x in runs_rows(ws) if x["experiment_id"] == exp["id"]]
    assert measured and measured[0]["score"] is not None  # the measurement itself was kept
    killed, _new = _restart_and_continue(ws)
    _assert_interrupted(killed)
    assert killed["id"] == exp["id"]
    assert ws.events("recover")
    assert_nothing_lost(ws, recovered=True)
