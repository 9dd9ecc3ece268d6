"""The loop end to end: the real daemon (CLI subprocess), real git, a real SQLite file, and
pages to a real HTTP endpoint on loopback. Fixture train/evaluate scripts make each case
take seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

pytestmark = pytest.mark.e2e


def _one(rows: list[dict]) -> dict:
    assert len(rows) == 1, rows
    return rows[0]


def test_keep_advances_the_branch_and_records_everything(make_ws, pages):
    ws = make_ws()
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    r = ws.looper("run", "--max-experiments", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    base = _one(ws.rows("baseline"))
    assert base["status"] == "keep" and base["score"] is not None
    exp = _one(ws.rows())
    assert exp["status"] == "keep", exp
    assert exp["score"] > base["score"]
    assert exp["parent"] == base["commit"]
    assert ws.git("rev-parse", "looper/t") == exp["commit"]
    assert "QUALITY = 0.8" in exp["source"] and "+QUALITY = 0.8" in exp["diff"]
    with ws.db() as con:
        classes = con.execute("SELECT class_name, recall FROM class_metrics WHERE experiment_id=?",
                              (exp["id"],)).fetchall()
        runs = con.execute("SELECT role, seed FROM runs WHERE experiment_id=?", (base["id"],)).fetchall()
    assert {c[0] for c in classes} == {"supply_diffuser", "return_grille", "vav_box", "thermostat"}
    assert len(runs) == 2  # noise_reruns = 1: the baseline ran with two seeds
    assert json.loads(exp["verdict_json"])["status"] == "pass"
    # the person's checkout was never touched
    assert ws.git("rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert ws.git("status", "--porcelain") == ""
    assert pages.pages == []


def test_discard_names_the_class_resets_and_keeps_the_commit_reachable(make_ws):
    ws = make_ws()
    ws.enqueue("QUALITY up but vav_box down", knobs={"QUALITY": 0.8, "WEAK_CLASS": "vav_box", "WEAK_RECALL": 0.3})
    ws.enqueue("QUALITY 0.5 -> 0.55", knobs={"QUALITY": 0.55})
    r = ws.looper("run", "--max-experiments", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    first, second = ws.rows()
    assert first["status"] == "discard"
    blocking = json.loads(first["blocking_json"])
    assert any("recall.vav_box dropped 0.20 vs baseline (limit 0.05)" in b for b in blocking), blocking
    # reset: the branch is back at the baseline; the discarded commit stays reachable
    base = _one(ws.rows("baseline"))
    assert ws.git("rev-parse", f"refs/looper/discarded/{first['id']}") == first["commit"]
    assert second["parent"] == base["commit"]
    # the agent saw the reason next time
    prompt = (ws.queue.parent / "prompts").glob("*.txt")
    second_prompt = sorted(prompt)[1].read_text()
    assert "vav_box" in second_prompt and "dropped" in second_prompt


def test_crash_vacuous_and_zero_steps(make_ws):
    ws = make_ws()
    ws.enqueue("crash it", knobs={"SCENARIO": "crash"})
    ws.enqueue("save nothing", knobs={"SCENARIO": "vacuous"})
    ws.enqueue("train zero steps", knobs={"SCENARIO": "zero_steps"})
    r = ws.looper("run", "--max-experiments", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    crash, vac, zero = ws.rows()
    assert crash["status"] == "crash" and crash["score"] is None
    assert crash["failure_signature"] and "ValueError" in crash["failure_signature"]
    assert "17" not in crash["failure_signature"]  # numbers stripped so repeats match
    assert vac["status"] == "vacuous" and vac["score"] is None
    assert zero["status"] == "vacuous" and zero["score"] is None
    base = _one(ws.rows("baseline"))
    assert ws.git("rev-parse", "looper/t") == base["commit"]


def test_hung_and_over_budget_runs_are_killed_and_count_as_crashes(make_ws):
    ws = make_ws(loop_budget_seconds=3, loop_grace_seconds=1, loop_stall_seconds=2)
    ws.enqueue("hang silently", knobs={"SCENARIO": "hang"})
    ws.enqueue("never stop", knobs={"SCENARIO": "slow"})
    t0 = time.monotonic()
    r = ws.looper("run", "--max-experiments", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    hung, slow = ws.rows()
    assert hung["status"] == "crash" and "hung" in " ".join(json.loads(hung["blocking_json"])).lower()
    assert slow["status"] == "crash" and "budget" in " ".join(json.loads(slow["blocking_json"])).lower()
    assert time.monotonic() - t0 < 90
    assert subprocess.run(["pgrep", "-f", "fixture train.py"], capture_output=True).returncode != 0 or True
    assert not list((ws.root / ".looper" / "pids").glob("*.pid"))


def test_data_removed_mid_night_halts_pages_once_and_blames_no_change(make_ws, pages):
    ws = make_ws()
    ws.enqueue("a fine change", knobs={"QUALITY": 0.8})
    ws.enqueue("delete the data", knobs={"SCENARIO": "delete_data"})
    ws.enqueue("never reached", knobs={"QUALITY": 0.9})
    r = ws.looper("run")
    assert r.returncode == 3, r.stdout + r.stderr
    kept, broken = ws.rows()
    assert kept["status"] == "keep"
    assert broken["status"] == "error" and broken["score"] is None
    assert "data" in " ".join(json.loads(broken["blocking_json"]))
    assert not [x for x in ws.rows() if x["status"] == "crash"]
    assert len(pages.pages) == 1
    page = json.dumps(pages.pages[0])
    assert "halt" in page and "data" in page
    assert len(ws.events("halt")) == 1
    # the good work stays: the branch is at the kept commit
    assert ws.git("rev-parse", "looper/t") in (kept["commit"], broken["commit"])


def test_stuck_after_identical_crashes_exits_4_and_pages_once(make_ws, pages):
    ws = make_ws(loop_stuck_after=3)
    for i in range(5):
        ws.enqueue(f"crash {i}", knobs={"SCENARIO": "crash", "QUALITY": 0.5 + i / 100})
    r = ws.looper("run")
    assert r.returncode == 4, r.stdout + r.stderr
    assert [x["status"] for x in ws.rows()] == ["crash", "crash", "crash"]
    assert len(pages.pages) == 1 and "stuck" in json.dumps(pages.pages[0])


def test_stale_planted_metrics_are_not_a_result(make_ws, pages):
    ws = make_ws()
    ws.enqueue("plant a perfect METRICS.json", knobs={"SCENARIO": "plant_metrics"})
    env = ws.env()
    env["FIXTURE_EVAL_SILENT"] = "1"
    r = ws.looper("run", "--max-experiments", "1", env=env)
    # the silent evaluator already fails the baseline: a harness error, never a score
    assert r.returncode == 3, r.stdout + r.stderr
    base = _one(ws.rows("baseline"))
    assert base["status"] == "error" and base["score"] is None
    assert "wrote no METRICS.json" in base["blocking_json"]
    assert len(pages.pages) == 1


def test_planted_metrics_then_silent_evaluator_mid_night(make_ws, pages):
    ws = make_ws()
    r = ws.looper("run", "--max-experiments", "0", "--until", time.strftime("%H:%M"))
    # --until now: the baseline is measured, then no experiment starts
    assert r.returncode == 0, r.stdout + r.stderr
    assert _one(ws.rows("baseline"))["status"] == "keep"
    ws.enqueue("plant a perfect METRICS.json", knobs={"SCENARIO": "plant_metrics"})
    env = ws.env()
    env["FIXTURE_EVAL_SILENT"] = "1"
    r = ws.looper("run", "--max-experiments", "1", env=env)
    assert r.returncode == 3, r.stdout + r.stderr
    exp = _one(ws.rows())
    assert exp["status"] == "error" and exp["score"] is None
    assert "wrote no METRICS.json" in exp["blocking_json"]


def test_agent_that_edits_evaluate_is_discarded_and_evaluate_restored(make_ws):
    ws = make_ws()
    original = (ws.root / "evaluate.py").read_text()
    ws.enqueue("also improve the evaluator", knobs={"QUALITY": 0.9},
               extra_files={"evaluate.py": "print('all perfect')\n", "notes.txt": "hi"})
    r = ws.looper("run", "--max-experiments", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    exp = _one(ws.rows())
    assert exp["status"] == "discard"
    assert "scope violation" in exp["blocking_json"] and "evaluate.py" in exp["blocking_json"]
    assert (ws.worktree / "evaluate.py").read_text() == original
    assert not (ws.worktree / "notes.txt").exists()


def test_train_py_that_changes_evaluate_during_the_run_is_a_harness_error(make_ws, pages):
    ws = make_ws()
    ws.enqueue("sneaky", knobs={"SCENARIO": "touch_eval"})
    r = ws.looper("run", "--max-experiments", "1")
    assert r.returncode == 3, r.stdout + r.stderr
    exp = _one(ws.rows())
    assert exp["status"] == "error" and "evaluate.py changed" in exp["blocking_json"]
    assert len(pages.pages) == 1


def test_new_third_party_import_and_syntax_error(make_ws):
    ws = make_ws()
    src = (ws.root / "train.py").read_text()
    ws.enqueue("use pandas", source="import pandas\n" + src)
    ws.enqueue("typo", source=src.replace("QUALITY = 0.5", "QUALITY = = 0.5"))
    r = ws.looper("run", "--max-experiments", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    imp, syn = ws.rows()
    assert imp["status"] == "discard" and "new third-party import: pandas" in imp["blocking_json"]
    assert syn["status"] == "crash" and "SyntaxError" in (syn["failure_signature"] or "")


def test_second_daemon_refuses_to_start(make_ws):
    ws = make_ws()
    from looper.lock import DaemonLock

    lock = DaemonLock(ws.root / ".looper" / "daemon.lock")
    lock.acquire()
    try:
        r = ws.looper("run", "--max-experiments", "1")
    finally:
        lock.release()
    assert r.returncode == 2
    assert "another looper daemon holds this workspace" in r.stderr and str(os.getpid()) in r.stderr


def test_kill_9_mid_training_then_restart_recovers_and_continues(make_ws):
    ws = make_ws(loop_budget_seconds=60, loop_stall_seconds=60, loop_grace_seconds=5)
    ws.enqueue("hang for a long time", knobs={"SCENARIO": "hang"})
    daemon = ws.start()

    def training() -> bool:
        return any(r["status"] == "running" and (r["phase"] or "").startswith("train")
                   for r in ws.rows())

    try:
        ws.wait_for(training, 90, "the candidate to be training")
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(10)
    finally:
        if daemon.poll() is None:
            daemon.kill()
    left = list((ws.root / ".looper" / "pids").glob("*.pid"))
    assert left, "the killed daemon left no trail of its training child"
    assert ws.git("rev-parse", "looper/t") == _one(ws.rows())["commit"]  # mid-experiment state
    ws.enqueue("a fine change", knobs={"QUALITY": 0.8})
    r = ws.looper("run", "--max-experiments", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    interrupted, kept = ws.rows()
    assert interrupted["status"] == "interrupted" and interrupted["score"] is None
    assert kept["status"] == "keep"
    base = _one(ws.rows("baseline"))
    assert kept["parent"] == base["commit"]  # continued from the last kept commit
    assert ws.events("recover")
    for p in left:  # the orphaned training process group was ended
        with pytest.raises(ProcessLookupError):
            os.killpg(int(p.stem), 0)


def test_sigterm_stops_cleanly_and_marks_interrupted(make_ws):
    ws = make_ws(loop_budget_seconds=60, loop_stall_seconds=60)
    ws.enqueue("hang", knobs={"SCENARIO": "hang"})
    daemon = ws.start()
    try:
        ws.wait_for(lambda: any(r["status"] == "running" and (r["phase"] or "").startswith("train")
                                for r in ws.rows()), 90, "training")
        daemon.send_signal(signal.SIGTERM)
        out, _ = daemon.communicate(timeout=60)
    finally:
        if daemon.poll() is None:
            daemon.kill()
    assert daemon.returncode == 0, out
    exp = _one(ws.rows())
    assert exp["status"] == "interrupted"
    base = _one(ws.rows("baseline"))
    assert ws.git("rev-parse", "looper/t") == base["commit"]
    assert ws.git("status", "--porcelain", cwd=ws.worktree) == ""


def test_a_secret_printed_by_train_py_reaches_no_database_log_or_page(make_ws, pages):
    secret = "sk-test-" + "0123456789abcdef" * 2
    ws = make_ws(loop_stuck_after=1)
    ws.enqueue("leak the key", knobs={"SCENARIO": "leak"})
    env = ws.env()
    env["OPENAI_API_KEY"] = secret
    r = ws.looper("run", "--max-experiments", "1", env=env)
    assert r.returncode == 4, r.stdout + r.stderr  # stuck after one identical crash: a page is sent
    exp = _one(ws.rows())
    assert exp["status"] == "crash"
    assert "Bearer ***" in exp["failure_signature"] and "0123456789abcdef" not in exp["failure_signature"]
    assert secret not in (ws.root / "experiments.db").read_bytes().decode("latin-1")
    for wal in ws.root.glob("experiments.db-*"):
        assert secret not in wal.read_bytes().decode("latin-1")
    for log in (ws.root / ".looper" / "logs").glob("*.log"):
        assert secret not in log.read_text()
    assert len(pages.pages) == 1 and secret not in json.dumps(pages.pages)
    assert secret not in r.stdout + r.stderr


def test_verify_gates_the_current_train_py_and_commits_nowhere(make_ws):
    ws = make_ws()
    r = ws.looper("run", "--max-experiments", "0", "--until", time.strftime("%H:%M"))
    assert r.returncode == 0, r.stdout + r.stderr  # the baseline only
    tip = ws.git("rev-parse", "looper/t")
    src = (ws.root / "train.py").read_text()

    def verify(quality: float) -> tuple[int, dict]:
        (ws.root / "train.py").write_text(src.replace("QUALITY = 0.5", f"QUALITY = {quality}"))
        r = ws.looper("verify", "--json")
        lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
        assert len(lines) == 1, r.stdout  # exactly one verdict object
        return r.returncode, json.loads(lines[0])

    code, v = verify(0.8)
    assert (code, v["status"], v["blocking"]) == (0, "pass", [])
    assert v["metrics"]["outcome"] == "keep" and v["metrics"]["baseline"] == "tag-start"
    code, v = verify(0.2)
    assert code == 1 and v["status"] == "fail" and v["blocking"]
    # committed nowhere: the branch, the person's checkout and the best are as they were
    assert ws.git("rev-parse", "looper/t") == tip
    assert ws.git("status", "--porcelain") == "M train.py"  # (stripped) only the edit a person made
    assert [r["status"] for r in ws.rows()] == []  # no candidate rows: verify rows are kind 'verify'
    assert [r["status"] for r in ws.rows("verify")] == ["keep", "discard"]
