"""The whole loop over ssh (a real sshd on 127.0.0.1): a keep and a discard, then sshd
stopped mid-night is an error halt with exactly one page and no change blamed."""

from __future__ import annotations

import json
import sys
import time

import pytest
from harness import make_ws, pages  # noqa: F401  (pytest fixtures)

pytestmark = pytest.mark.e2e


def _ssh_ws(make_ws, sshd, tmp_path, **over):  # noqa: F811
    return make_ws(exec_kind="ssh", exec_host="looper-test", exec_remote_dir=str(tmp_path / "remote"),
                   exec_python=sys.executable, exec_ssh_options=[f"-F {sshd.ssh_config}"], **over)


def test_loop_over_ssh_keeps_and_discards(make_ws, sshd, tmp_path, pages):  # noqa: F811
    ws = _ssh_ws(make_ws, sshd, tmp_path)
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    ws.enqueue("QUALITY 0.8 -> 0.3", knobs={"QUALITY": 0.3})
    r = ws.looper("run", "--max-experiments", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    keep, discard = ws.rows()
    assert (keep["status"], discard["status"]) == ("keep", "discard")
    assert ws.git("rev-parse", "looper/t") == keep["commit"]
    # it really ran there: the remote run folders hold the runs' outputs
    assert list((tmp_path / "remote" / "runs").glob("*/out/train.json"))
    assert (tmp_path / "remote" / "data" / "manifest.json").is_file()
    assert pages.pages == []


def test_sshd_stopped_mid_night_is_an_error_halt_with_one_page(make_ws, sshd, tmp_path, pages):  # noqa: F811
    ws = _ssh_ws(make_ws, sshd, tmp_path, loop_budget_seconds=60, loop_stall_seconds=60)
    ws.enqueue("slow but fine", knobs={"QUALITY": 0.8, "SLEEP": 20.0})
    daemon = ws.start()
    try:
        ws.wait_training(90, "training over ssh")
        time.sleep(1.0)
        sshd.kill_all()
        out, _ = daemon.communicate(timeout=120)
    finally:
        if daemon.poll() is None:
            daemon.kill()
        sshd.start()
    assert daemon.returncode == 3, out
    exp = ws.rows()[0]
    assert exp["status"] == "error" and exp["score"] is None, exp
    assert not [r for r in ws.rows() if r["status"] == "crash"]
    assert len(pages.pages) == 1 and "halt" in json.dumps(pages.pages[0])


def test_a_night_over_ssh_with_seeds_and_workers_side_by_side_decides_every_change(
        make_ws, sshd, tmp_path, pages):  # noqa: F811
    """Two workers on one host, two seeds each side by side (``seed_jobs`` > 1 was refused off the local executor):
    four runs at a time there, each candidate's beside the other's. Before, their syncs into the host's checkout/ at
    once failed (a halt) or left a run another candidate's train.py (tests/executors/ssh/test_ssh_executor_race.py)."""
    ws = _ssh_ws(make_ws, sshd, tmp_path, loop_workers=2, loop_seed_jobs=2)
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    ws.enqueue("QUALITY 0.5 -> 0.3", knobs={"QUALITY": 0.3})
    r = ws.looper("run", "--max-experiments", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = ws.rows()
    assert len(rows) == 2 and not [x for x in rows if x["status"] in ("error", "crash")], rows
    assert pages.pages == []
    import sqlite3

    with sqlite3.connect(ws.root / "experiments.db") as con:  # the seeds of a look trained at once on the host
        spans = con.execute("SELECT experiment_id, started_at, train_ended_at FROM runs WHERE train_ended_at IS NOT "
                            "NULL ORDER BY experiment_id, started_at").fetchall()
    assert any(a[0] == b[0] and b[1] < a[2] for a, b in zip(spans, spans[1:], strict=False)), spans
