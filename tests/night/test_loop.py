"""The loop end to end: the real daemon (CLI subprocess), real git, a real SQLite file, and
pages to a real HTTP endpoint on loopback. Fixture train/evaluate scripts make each case
take seconds."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from faults.faultkit import assert_nothing_lost

from looper.proc import group_gone
from looper.workspace.hashes import file_sha256

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
        weights = con.execute("SELECT weights_path, weights_sha256 FROM runs WHERE experiment_id=?",
                              (exp["id"],)).fetchall()
    # each scored run's weights, hashed when the harness recorded it (what looper export ships)
    assert weights and all(p and p.startswith(f"runs/t/{exp['id']:05d}/") and p.endswith("/out/weights.pt")
                           and file_sha256(ws.root / p) == h for p, h in weights), weights
    assert {c[0] for c in classes} == {"supply_diffuser", "return_grille", "vav_box", "thermostat"}
    assert len(runs) == 2  # noise_reruns = 1: the baseline ran with two seeds
    assert json.loads(exp["verdict_json"])["status"] == "pass"
    # the person's checkout was never touched
    assert ws.git("rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert ws.git("status", "--porcelain") == ""
    assert pages.pages == []


def test_discard_names_the_class_resets_and_keeps_the_commit_reachable(make_ws):
    ws = make_ws()
    # the score rises (weighted F1 0.67 -> 0.77) but a class is lost: recall 0.5 at baseline -> 0
    ws.enqueue("QUALITY up but supply_diffuser lost",
               knobs={"QUALITY": 0.8, "WEAK_CLASS": "supply_diffuser", "WEAK_RECALL": 0.0})
    ws.enqueue("QUALITY 0.5 -> 0.55", knobs={"QUALITY": 0.55})
    r = ws.looper("run", "--max-experiments", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    first, second = ws.rows()
    assert first["status"] == "discard"
    blocking = json.loads(first["blocking_json"])
    # the class was lost on the first seed; a discard stands on 2 seeds (noise_reruns = 1), so it ran a second
    lost = "recall.supply_diffuser: 40 of 80 found -> 0 of 80 vs baseline, p = "
    assert any(b.startswith(lost) for b in blocking), blocking
    base = _one(ws.rows("baseline"))
    assert first["score"] > base["score"]  # the class loss alone discards it
    # reset: the branch is back at the baseline; the discarded commit stays reachable
    assert ws.git("rev-parse", f"refs/looper/discarded/{first['id']}") == first["commit"]
    assert second["parent"] == base["commit"]
    # the agent saw the reason next time
    prompt = (ws.queue.parent / "prompts").glob("*.txt")
    second_prompt = sorted(prompt)[1].read_text()
    assert "recall.supply_diffuser: 40 of 80 found -> 0 of 80" in second_prompt


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
    assert_nothing_lost(ws)


def _with_grandchild(src: str, scenario: str, pid_dir: Path) -> str:
    """The fixture train.py that first records its own pid, starts a grandchild (a sleeping
    python in the same process group) that records its pid, then behaves as ``scenario``."""
    prelude = (
        "import os as _os, subprocess as _sp, sys as _sys, time as _time\n"
        f"_d = {str(pid_dir)!r}\n"
        f"open(_os.path.join(_d, {scenario + '.train'!r}), 'w').write(str(_os.getpid()))\n"
        "_sp.Popen([_sys.executable, '-c', 'import os, sys, time; '\n"
        f"          'open(sys.argv[1], \"w\").write(str(os.getpid())); time.sleep(3600)',\n"
        f"          _os.path.join(_d, {scenario + '.grandchild'!r})])\n"
        f"while not _os.path.exists(_os.path.join(_d, {scenario + '.grandchild'!r})):\n"
        "    _time.sleep(0.05)\n"
    )
    return prelude + src.replace('SCENARIO = "ok"', f"SCENARIO = {scenario!r}")


def _gone(pid: int) -> bool:
    """The process no longer runs (absent, or a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_hung_and_over_budget_runs_are_killed_and_count_as_crashes(make_ws, tmp_path):
    """Row 21: the run's whole process group is killed -- train.py and a grandchild it started."""
    # sandbox off: what looper sees of an UNconfined train.py (the sandbox's own answer: tests/security)
    ws = make_ws(exec_sandbox="none", loop_budget_seconds=3, loop_grace_seconds=1, loop_stall_seconds=2)
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    src = (ws.root / "train.py").read_text()
    ws.enqueue("hang silently", source=_with_grandchild(src, "hang", pid_dir))
    ws.enqueue("never stop", source=_with_grandchild(src, "slow", pid_dir))
    t0 = time.monotonic()
    r = ws.looper("run", "--max-experiments", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    hung, slow = ws.rows()
    assert hung["status"] == "crash" and "hung" in " ".join(json.loads(hung["blocking_json"])).lower()
    assert slow["status"] == "crash" and "budget" in " ".join(json.loads(slow["blocking_json"])).lower()
    assert time.monotonic() - t0 < 90
    pids = {f.name: int(f.read_text()) for f in pid_dir.iterdir()}
    assert set(pids) == {"hang.train", "hang.grandchild", "slow.train", "slow.grandchild"}, pids
    deadline = time.monotonic() + 5  # SIGKILL is delivered at once; reaping by init may lag a little
    while time.monotonic() < deadline and not all(_gone(p) for p in pids.values()):
        time.sleep(0.1)
    alive = {name: pid for name, pid in pids.items() if not _gone(pid)}
    for pid in alive.values():  # do not leave them behind when the assertion fails
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"still running after the run was killed: {alive}"
    assert not list((ws.root / ".looper" / "pids").glob("*.pid"))
    assert_nothing_lost(ws)


def test_data_removed_mid_night_halts_pages_once_and_blames_no_change(make_ws, pages):
    """Row 18: the harness's own data check after the run names the missing data; the
    evaluator (which would fail on the missing data too) is never reached."""
    # sandbox off: what looper sees of an UNconfined train.py (the sandbox's own answer: tests/security)
    ws = make_ws(exec_sandbox="none")
    ws.enqueue("a fine change", knobs={"QUALITY": 0.8})
    ws.enqueue("delete the data", knobs={"SCENARIO": "delete_data"})
    ws.enqueue("never reached", knobs={"QUALITY": 0.9})
    r = ws.looper("run")
    assert r.returncode == 3, r.stdout + r.stderr
    kept, broken = ws.rows()
    assert kept["status"] == "keep"
    assert broken["status"] == "error" and broken["score"] is None
    # exactly the executor's data check (local.py data_hash), not the fixture evaluator's
    # own "evaluate.py: data missing: ..." exit
    assert json.loads(broken["blocking_json"]) == ["data missing: data/manifest.json does not exist"]
    assert not list(ws.root.glob(f"runs/t/{broken['id']:05d}/*/METRICS.json")), "the evaluator ran"
    assert not [x for x in ws.rows() if x["status"] == "crash"]
    assert len(pages.pages) == 1
    page = json.dumps(pages.pages[0])
    assert "halt" in page and "data/manifest.json does not exist" in page
    assert len(ws.events("halt")) == 1
    # the good work stays: the branch is at the kept commit
    assert ws.git("rev-parse", "looper/t") in (kept["commit"], broken["commit"])
    assert_nothing_lost(ws, halted="halt")


def test_stuck_after_identical_crashes_exits_4_and_pages_once(make_ws, pages):
    ws = make_ws(loop_stuck_after=3)
    for i in range(5):
        ws.enqueue(f"crash {i}", knobs={"SCENARIO": "crash", "QUALITY": 0.5 + i / 100})
    r = ws.looper("run")
    assert r.returncode == 4, r.stdout + r.stderr
    assert [x["status"] for x in ws.rows()] == ["crash", "crash", "crash"]
    assert len(pages.pages) == 1 and "stuck" in json.dumps(pages.pages[0])
    assert_nothing_lost(ws, halted="stuck")


def _ran(ws, exp_id: int, text: str) -> bool:  # noqa: ANN001
    """Some file of experiment ``exp_id``'s run folders (its run logs) holds ``text``."""
    return any(text in f.read_text(errors="replace") for f in ws.root.glob(f"runs/t/{exp_id:05d}/**/*")
               if f.is_file() and f.suffix in (".log", ".txt", ""))


def test_stale_planted_metrics_are_not_a_result(make_ws, pages):
    """train.py writes a perfect METRICS.json where the evaluator will write; the score is the
    evaluator's (the change did nothing), never the planted 1.0."""
    # sandbox off: what looper sees of an UNconfined train.py (the sandbox's own answer: tests/security)
    ws = make_ws(exec_sandbox="none")
    ws.enqueue("plant a perfect METRICS.json", knobs={"SCENARIO": "plant_metrics"})
    r = ws.looper("run", "--max-experiments", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    base = _one(ws.rows("baseline"))
    exp = _one(ws.rows())
    assert _ran(ws, exp["id"], "fixture train.py starting plant_metrics"), "the planting candidate never ran"
    assert exp["score"] == pytest.approx(base["score"]) and exp["score"] < 1.0
    assert exp["status"] != "keep", exp
    for m in ws.root.glob(f"runs/t/{exp['id']:05d}/*/METRICS.json"):
        assert json.loads(m.read_text())["weighted_f1"] < 1.0, m
    assert pages.pages == []
    assert_nothing_lost(ws)


def test_silent_evaluator_fails_the_baseline_as_a_harness_error(make_ws, pages):
    """Row 19 at the baseline: an evaluator that exits 0 and writes nothing."""
    ws = make_ws()
    env = ws.env()
    env["FIXTURE_EVAL_SILENT"] = "1"
    r = ws.looper("run", "--max-experiments", "1", env=env)
    assert r.returncode == 3, r.stdout + r.stderr
    base = _one(ws.rows("baseline"))
    assert base["status"] == "error" and base["score"] is None
    assert "wrote no METRICS.json" in base["blocking_json"]
    assert ws.rows() == []  # no candidate is measured against a baseline that has no score
    assert len(pages.pages) == 1


def test_planted_metrics_then_silent_evaluator_mid_night(make_ws, pages):
    """Rows 19 and 20: the candidate plants a perfect METRICS.json and the evaluator writes
    nothing; the planted file is never read: a harness error, no score."""
    # sandbox off: what looper sees of an UNconfined train.py (the sandbox's own answer: tests/security)
    ws = make_ws(exec_sandbox="none")
    ws.baseline_only()  # the baseline is measured, then no experiment starts
    ws.enqueue("plant a perfect METRICS.json", knobs={"SCENARIO": "plant_metrics"})
    env = ws.env()
    env["FIXTURE_EVAL_SILENT"] = "1"
    r = ws.looper("run", "--max-experiments", "1", env=env)
    assert r.returncode == 3, r.stdout + r.stderr
    exp = _one(ws.rows())
    assert _ran(ws, exp["id"], "fixture train.py starting plant_metrics"), "the planting candidate never ran"
    assert exp["status"] == "error" and exp["score"] is None
    assert "wrote no METRICS.json" in exp["blocking_json"]
    assert len(pages.pages) == 1
    assert_nothing_lost(ws, halted="halt")


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
    assert_nothing_lost(ws)


def test_train_py_that_changes_evaluate_during_the_run_is_a_harness_error(make_ws, pages):
    # sandbox off: what looper sees of an UNconfined train.py (the sandbox's own answer: tests/security)
    ws = make_ws(exec_sandbox="none")
    ws.enqueue("sneaky", knobs={"SCENARIO": "touch_eval"})
    r = ws.looper("run", "--max-experiments", "1")
    assert r.returncode == 3, r.stdout + r.stderr
    exp = _one(ws.rows())
    assert exp["status"] == "error" and "evaluate.py changed" in exp["blocking_json"]
    assert len(pages.pages) == 1
    # the halt leaves the tampered evaluate.py for a person to see; a restart's recovery puts
    # the committed one back, and then nothing of the night was lost
    assert ws.git("status", "--porcelain", cwd=ws.worktree) == "M evaluate.py"
    ws.baseline_only()
    assert (ws.worktree / "evaluate.py").read_text() == ws.git("show", "looper/t:evaluate.py") + "\n"
    assert_nothing_lost(ws, halted="halt", recovered=True)


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
    assert_nothing_lost(ws)


def test_second_daemon_refuses_to_start(make_ws):
    """Row 28: a real first daemon is training; a second `looper run` on the same workspace is
    refused (exit 2, naming the first one's pid) and the first goes on undisturbed."""
    ws = make_ws(loop_budget_seconds=60, loop_stall_seconds=60)
    ws.enqueue("hang", knobs={"SCENARIO": "hang"})
    first = ws.start()
    try:
        ws.wait_training(90, "the first daemon to be training")
        r = ws.looper("run", "--max-experiments", "1")
        assert first.poll() is None, "the first daemon stopped when the second one started"
        running = [x for x in ws.rows() if x["status"] == "running"]
        first.send_signal(signal.SIGTERM)
        out, _ = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert r.returncode == 2, r.stdout + r.stderr
    assert "another looper daemon holds this workspace" in r.stderr and str(first.pid) in r.stderr, r.stderr
    assert len(running) == 1 and len(ws.rows()) == 1, "the second daemon started an experiment"
    assert first.returncode == 0, out
    assert _one(ws.rows())["status"] == "interrupted"
    assert_nothing_lost(ws)


def test_kill_9_mid_training_then_restart_recovers_and_continues(make_ws):
    ws = make_ws(loop_budget_seconds=60, loop_stall_seconds=60, loop_grace_seconds=5)
    ws.enqueue("hang for a long time", knobs={"SCENARIO": "hang"})
    daemon = ws.start()

    pids = ws.root / ".looper" / "pids"
    try:  # the phase turns to training before the child is spawned: wait for its trail as well
        ws.wait_for(lambda: ws.training() and any(pids.glob("*.pid")), 90, "the candidate's training child")
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(10)
    finally:
        if daemon.poll() is None:
            daemon.kill()
    left = list(pids.glob("*.pid"))
    assert left, "the killed daemon's trail of its training child is gone"
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
    for p in left:  # the orphaned training process group (it hangs for 60 s) was ended by the recovery
        assert group_gone(int(p.stem), within=15), f"process group {p.stem} outlived the recovery"
        with pytest.raises(ProcessLookupError):
            os.killpg(int(p.stem), 0)
    assert_nothing_lost(ws, recovered=True)


def test_sigterm_stops_cleanly_and_marks_interrupted(make_ws):
    ws = make_ws(loop_budget_seconds=60, loop_stall_seconds=60)
    ws.enqueue("hang", knobs={"SCENARIO": "hang"})
    daemon = ws.start()
    try:
        ws.wait_training(90, "training")
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
    assert_nothing_lost(ws)
    assert ws.git("status", "--porcelain", cwd=ws.worktree) == ""


def test_a_secret_printed_by_train_py_reaches_no_database_log_or_page(make_ws, pages):
    secret = "sk-test-" + "0123456789abcdef" * 2
    # sandbox off: what looper sees of an UNconfined train.py (the sandbox's own answer: tests/security)
    ws = make_ws(exec_sandbox="none", loop_stuck_after=1)
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
    ws.baseline_only()
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
