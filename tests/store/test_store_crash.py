"""A writer SIGKILLed in the middle of a transaction leaves a consistent database."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from looper.store import Store

CHILD = textwrap.dedent(
    """
    import sys, time
    from sqlalchemy import event
    from looper.store import Store

    store = Store(sys.argv[1])
    exp_id = int(sys.argv[2])

    def stall(conn, cursor, statement, params, context, executemany):
        # the experiments UPDATE already ran inside this transaction; stop before the
        # class_metrics rows and wait to be killed
        if statement.lstrip().upper().startswith("INSERT INTO CLASS_METRICS"):
            print("MID-TRANSACTION", flush=True)
            time.sleep(60)

    event.listen(store.engine, "before_cursor_execute", stall)
    classes = {"damper": {"tp": 1, "fp": 0, "fn": 0, "support": 1,
                          "precision": 1.0, "recall": 1.0, "f1": 1.0, "count_error": 0.0}}
    store.record_outcome(exp_id, outcome="keep", score=0.9, metrics={"weighted_f1": 0.9}, class_metrics=classes,
                         commit="feed", phase="written by the doomed child")
    print("FINISHED (should not happen)", flush=True)
    """
)


@pytest.mark.timeout(60)
def test_kill_9_mid_finish_leaves_the_row_as_it_was(tmp_path: Path) -> None:
    store = Store(tmp_path)
    exp_id = store.start_experiment(tag="t", kind="candidate", parent="p0", seed=0, config={})
    store.set_phase(exp_id, "evaluating")
    before = store.experiment(exp_id)
    store.close()

    script = tmp_path / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    child = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "experiments.db"), str(exp_id)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = child.stdout.readline() if child.stdout else ""
        assert line.strip() == "MID-TRANSACTION", (line, child.stderr.read() if child.stderr else "")
        # while the child holds its write transaction, a reader still sees the old row
        peek = sqlite3.connect(tmp_path / "experiments.db")
        assert peek.execute("SELECT status FROM experiments WHERE id = ?", (exp_id,)).fetchone() == ("running",)
        peek.close()
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream:
                stream.close()

    reopened = Store(tmp_path)
    with reopened.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
        assert conn.exec_driver_sql("PRAGMA foreign_key_check").all() == []
    assert reopened.experiment(exp_id) == before
    assert reopened.class_scores(exp_id) == {}
    # the dead writer's lock is gone: the daemon that restarts can carry on
    assert reopened.mark_interrupted(exp_id, "daemon killed") is True
    assert reopened.experiment(exp_id).status == "interrupted"
    reopened.close()
