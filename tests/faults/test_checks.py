"""Fault matrix, part 1: checks that cannot do their job, and runs that break.

Each case starts the real daemon (`python -m looper.cli run`) on a fixture workspace,
injects ONE fault, and asserts the outcome, the action (go on / halt exit 3 / page once /
no page) and that nothing was lost (faultkit.assert_nothing_lost)."""

from __future__ import annotations

import json
import socket
import time

import pytest
import tiers
from faultkit import assert_nothing_lost, patch_config, procs_with_env, runs_rows

pytestmark = pytest.mark.e2e


def _one(rows: list[dict]) -> dict:
    assert len(rows) == 1, rows
    return rows[0]


# ---------------------------------------------------------------- preflight: no GPU
# Which machine this is comes from nvidia-smi (tests/tiers.py), not from the probe under test.
NO_GPU = tiers.NEEDS_NO_GPU


@NO_GPU
def test_no_gpu_when_required_is_a_preflight_error_halt_and_nothing_trains(make_ws, pages):
    ws = make_ws()
    patch_config(ws, "executor", require_gpu=True)
    ws.enqueue("never reached", knobs={"QUALITY": 0.8})
    r = ws.looper("run", "--max-experiments", "1")
    assert r.returncode == 3, r.stdout + r.stderr
    assert len(pages.pages) == 1
    page = json.dumps(pages.pages[0])
    assert "require_gpu is set but no usable GPU" in page
    assert len(ws.events("halt")) == 1
    assert runs_rows(ws) == [], "training ran although the preflight could not find the required GPU"
    assert ws.rows("baseline") == [] and ws.rows() == [], "something was measured without the GPU"
    assert list(ws.queue.glob("*.json")), "the agent was asked although the preflight failed"


# ---------------------------------------------------------------- fixed files changed by someone
def test_evaluate_changed_between_experiments_is_an_error_halt(make_ws, pages):
    """Someone edits the worktree's evaluate.py after one experiment was recorded and before
    the next one starts (the daemon paused just before writing the outcome)."""
    ws = make_ws()
    ws.baseline_only()
    ws.enqueue("a fine change", knobs={"QUALITY": 0.8})
    ws.enqueue("never measured", knobs={"QUALITY": 0.9})
    env = ws.env()
    env["LOOPER_FAULT_PAUSE"] = "record:3"
    daemon = ws.start(env=env)
    try:
        ws.wait_for(lambda: any(r["status"] == "running" and r["commit"] for r in ws.rows())
                    and not list(ws.queue.glob("001.json")), 60, "the first experiment to be running")
        first_id = next(r["id"] for r in ws.rows() if r["status"] == "running")
        ws.wait_for(lambda: any(x["experiment_id"] == first_id for x in runs_rows(ws)), 60,
                    "the first experiment's run to be recorded")  # measured (runtime pin included), then gated
        time.sleep(0.5)  # inside the 3 s pause before the outcome is written
        with open(ws.worktree / "evaluate.py", "a") as f:
            f.write("\n# tweaked by a person at 03:12\n")
        out, _ = daemon.communicate(timeout=90)
    finally:
        if daemon.poll() is None:
            daemon.kill()
    assert daemon.returncode == 3, out
    first, second = ws.rows()
    assert first["status"] == "keep"
    assert second["status"] == "error" and second["score"] is None
    assert "evaluate.py changed" in second["blocking_json"], second["blocking_json"]
    assert len(pages.pages) == 1 and "evaluate.py" in json.dumps(pages.pages[0])
    assert [x["role"] for x in runs_rows(ws) if x["experiment_id"] == second["id"]] == []  # nothing trained
    assert list(ws.queue.glob("*.json")), "the agent was asked although the preflight failed"
    # a halt leaves everything as it is: the person's edit is still there for them to see
    assert (ws.worktree / "evaluate.py").read_text().endswith("# tweaked by a person at 03:12\n")
    assert ws.git("status", "--porcelain", cwd=ws.worktree) == "M evaluate.py"
    # the page's advice (start again) works: recovery puts the committed evaluate.py back and
    # the night goes on; then nothing of the night was lost
    r = ws.looper("run", "--max-experiments", "1")  # runs the queued "never measured" change
    assert r.returncode == 0, r.stdout + r.stderr
    assert (ws.worktree / "evaluate.py").read_text() == ws.git("show", "looper/t:evaluate.py") + "\n"
    after = ws.rows()[-1]
    assert after["description"] == "never measured" and after["score"] is not None, after
    assert_nothing_lost(ws, halted="halt", recovered=True)


def test_evaluate_changed_while_the_agent_thinks(make_ws, pages):
    """evaluate.py edited in the worktree while a slow agent works there. The loop cannot
    tell who did it; what it must do: never evaluate with the edited file, and keep
    nothing measured by it. Observed: it is treated as the agent's scope violation
    (discard, evaluate.py restored) -- see docs/RELIABILITY.md."""
    ws = make_ws()
    ws.baseline_only()
    original = (ws.worktree / "evaluate.py").read_text()
    ws.enqueue("slow thinker", knobs={"QUALITY": 0.8}, sleep=4)
    daemon = ws.start("--max-experiments", "1")
    try:
        ws.wait_for(lambda: procs_with_env("FIXTURE_QUEUE", str(ws.queue), "agent.py"), 60,
                    "the agent to be thinking")
        time.sleep(0.5)
        with open(ws.worktree / "evaluate.py", "a") as f:
            f.write("\nprint('all perfect')\n")
        out, _ = daemon.communicate(timeout=90)
    finally:
        if daemon.poll() is None:
            daemon.kill()
    exp = _one(ws.rows())
    assert exp["status"] == "discard" and exp["score"] is None, exp["status"]
    assert daemon.returncode == 0, out
    assert "scope violation" in exp["blocking_json"] and "evaluate.py" in exp["blocking_json"]
    assert (ws.worktree / "evaluate.py").read_text() == original  # restored: never evaluated with the edit
    assert not [x for x in runs_rows(ws) if x["experiment_id"] == exp["id"]]  # nothing ran with it
    assert pages.pages == []
    assert_nothing_lost(ws)


# ---------------------------------------------------------------- a check that lies
def test_evaluator_that_writes_metrics_and_exits_nonzero_is_an_error_never_a_keep(make_ws, pages):
    ws = make_ws()
    ws.baseline_only()
    ws.enqueue("a big improvement", knobs={"QUALITY": 0.95})
    env = ws.env()
    env["FIXTURE_EVAL_EXIT"] = "1"
    r = ws.looper("run", "--max-experiments", "1", env=env)
    assert r.returncode == 3, r.stdout + r.stderr
    exp = _one(ws.rows())
    assert exp["status"] == "error" and exp["score"] is None
    assert "evaluate.py exited 1" in exp["blocking_json"], exp["blocking_json"]
    assert len(pages.pages) == 1
    # the METRICS.json it wrote is not a result anywhere
    with ws.db() as con:
        n = con.execute("SELECT COUNT(*) FROM class_metrics WHERE experiment_id=?", (exp["id"],)).fetchone()[0]
    assert n == 0
    assert_nothing_lost(ws, halted="halt")


# ---------------------------------------------------------------- train.py breaks
def test_out_of_memory_is_a_crash_and_the_loop_goes_on(make_ws, pages):
    ws = make_ws()
    ws.enqueue("batch 4x", knobs={"SCENARIO": "oom"})
    ws.enqueue("a fine change", knobs={"QUALITY": 0.8})
    r = ws.looper("run", "--max-experiments", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    oom, ok = ws.rows()
    assert oom["status"] == "crash" and oom["score"] is None
    assert "out of memory" in oom["blocking_json"].lower()
    assert oom["failure_signature"]
    assert ok["status"] == "keep" and ok["parent"] == oom["parent"]
    assert pages.pages == []
    assert_nothing_lost(ws)


def test_cuda_device_lost_is_an_error_halt_never_a_crash(make_ws, pages):
    """The GPU is really gone: the candidate fails with a CUDA error and so does the canary (the last
    kept train.py re-run): the harness proved it is broken (issue 23: words alone never halt)."""
    ws = make_ws()
    ws.enqueue("a fine change", knobs={"QUALITY": 0.8, "CANARY_FAULT": "cuda_lost"})  # its canary re-run fails
    ws.enqueue("the GPU falls off", knobs={"SCENARIO": "cuda_lost"})
    ws.enqueue("never reached", knobs={"QUALITY": 0.9})
    r = ws.looper("run")
    assert r.returncode == 3, r.stdout + r.stderr
    kept, lost = ws.rows()
    assert kept["status"] == "keep"
    assert lost["status"] == "error" and lost["score"] is None
    assert "gpu" in lost["blocking_json"].lower()
    assert "(canary) failed too" in lost["blocking_json"]
    assert not [x for x in ws.rows() if x["status"] == "crash"]
    assert len(pages.pages) == 1
    assert_nothing_lost(ws, halted="halt")


def test_disk_full_during_the_run_is_an_error_halt_not_a_crash(make_ws, pages):
    """The disk is really full: the canary (the last kept train.py) fails the same way."""
    ws = make_ws()
    ws.enqueue("a fine change", knobs={"QUALITY": 0.8, "CANARY_FAULT": "disk_full"})  # its canary re-run fails
    ws.enqueue("write bigger checkpoints", knobs={"SCENARIO": "disk_full"})
    r = ws.looper("run")
    assert r.returncode == 3, r.stdout + r.stderr
    kept, exp = ws.rows()
    assert kept["status"] == "keep"
    assert exp["status"] == "error" and exp["score"] is None
    assert "disk is full" in exp["blocking_json"], exp["blocking_json"]
    assert len(pages.pages) == 1 and "disk" in json.dumps(pages.pages[0])
    assert_nothing_lost(ws, halted="halt")


# ---------------------------------------------------------------- the pager is down
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_notifier_down_at_the_halt_still_exits_3_and_says_so(make_ws, pages):
    ws = make_ws()
    patch_config(ws, "notify", urls=[f"json://127.0.0.1:{_closed_port()}/page"])
    ws.enqueue("a fine change", knobs={"QUALITY": 0.8, "CANARY_FAULT": "cuda_lost"})  # really lost: canary fails
    ws.enqueue("the GPU falls off", knobs={"SCENARIO": "cuda_lost"})
    r = ws.looper("run")
    assert r.returncode == 3, r.stdout + r.stderr
    assert [x["status"] for x in ws.rows()] == ["keep", "error"]
    failed = ws.events("page_failed")
    assert len(failed) == 1 and "NOT DELIVERED" in failed[0]["message"]
    assert ws.events("page") == []
    assert "PAGE NOT DELIVERED" in r.stderr and "halt" in r.stderr
    assert pages.pages == []  # the working sink is not configured here: nothing arrived anywhere
    assert_nothing_lost(ws, halted="halt")
