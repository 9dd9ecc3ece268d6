"""Issue 23, findings 3, 4 and 5 through the real daemon (``looper run`` as a subprocess) and its
real sandbox: a candidate's fault is the candidate's, and what it prints or writes costs the
daemon bounded resources.

Each malicious train.py is the fast fixture train.py (tests/fixture_ws: it "trains" by writing
JSON weights in a second) plus one attack. Each must end as a crash whose reasons name the
attempt, the night must go on (a control change after the attacks is still kept, the run exits
0 at its stop rule, never 3), no page may be sent, and the database and the checkout stay intact
(faultkit.assert_nothing_lost, SQLite's integrity check).

- words in train.py's output (a printed CUDA traceback, OSError 28, NVMLError then silence, a
  declared but missing package) once halted the night: now the canary (the last kept train.py
  re-run) runs cleanly, so each is the candidate's crash;
- the evaluator's trouble with the candidate's weights (class names in another order; weights that
  make the evaluator exit 1 while the best's weights still evaluate; a model so slow that
  evaluation runs far past the best's) is the candidate's crash;
- a flood of output, lines of 8 MiB, a 100 MB train.json and one nested 100,000 deep cost the
  daemon a bounded log, bounded time and a bounded database, and are crashes naming the limit.

tests/security/test_candidate_weights.py shows the real evaluate.py refusing class names in
another order (exit 65) on real weights; tests/faults/test_checks.py shows that a harness fault
the canary meets too (the GPU really gone, the disk really full) still halts and pages.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime

import pytest
from faults.faultkit import assert_nothing_lost, patch_config
from harness import FIXTURE, make_ws, pages  # noqa: F401  (pytest fixtures)

pytestmark = [
    pytest.mark.e2e,
]

SRC = (FIXTURE / "train.py").read_text()
CLASSES = ["supply_diffuser", "return_grille", "vav_box", "thermostat"]

# description -> (code appended after the fixture train.py wrote its weights and train.json, words in the reasons)
WORDS = {
    "prints a CUDA error traceback": ('''
import sys
print("Traceback (most recent call last):", flush=True)
print('  File "/usr/lib/python3/dist-packages/torch/cuda/__init__.py", line 300, in _lazy_init', flush=True)
print("RuntimeError: CUDA error: unknown error", flush=True)
sys.exit(1)
''', "CUDA error: unknown error"),
    "raises OSError 28": ('''
raise OSError(28, "No space left on device")
''', "No space left on device"),
    "prints NVMLError and sleeps": ('''
import time
print("pynvml.NVMLError_Unknown: NVMLError: Unknown Error", flush=True)
time.sleep(600)
''', "NVML"),
    "imports a declared but missing package": ('''
# pandas is a declared dependency and is installed here (mlflow brings it), so the import's failure is
# raised as the interpreter would raise it: the words are what the canary must see through
raise ModuleNotFoundError("No module named 'pandas'", name="pandas")
''', "declared dependency 'pandas' is not importable"),
}

WEIGHTS = {
    "class names in another order": (f'''
w = json.load(open(os.path.join(out, "weights.pt")))
w["names"] = {list(reversed(CLASSES))!r}
json.dump(w, open(os.path.join(out, "weights.pt"), "w"))
''', "weights refused: the model's classes"),
    "weights that crash the evaluator": ('''
w = json.load(open(os.path.join(out, "weights.pt")))
del w["quality"]  # the fixture evaluator raises KeyError on these: exit 1, not a refusal
json.dump(w, open(os.path.join(out, "weights.pt"), "w"))
''', "the best's weights through the same evaluator (canary) ran cleanly"),
    "a model too slow to evaluate": ('''
w = json.load(open(os.path.join(out, "weights.pt")))
w["eval_sleep"] = 300
json.dump(w, open(os.path.join(out, "weights.pt"), "w"))
''', "evaluation ran past"),
}

OUTPUT = {
    "prints 100 MiB": ('''
block = ("x" * 1023 + "\\n") * 1024
for _ in range(100):
    sys.stdout.write(block)
sys.stdout.flush()
raise ValueError("flooded 100 MiB of output")
''', "flooded 100 MiB of output"),
    "prints 100 lines of 8 MiB": ('''
line = "y" * (8 << 20) + "\\n"
for _ in range(100):
    sys.stdout.write(line)
sys.stdout.flush()
raise ValueError("printed 100 lines of 8 MiB")
''', "printed 100 lines of 8 MiB"),
    "writes a 100 MB train.json": ('''
with open(os.path.join(out, "train.json"), "w") as f:
    f.write('{"steps": 10, "pad": "' + "z" * (100 << 20) + '"}')
''', "([limits] json_max_bytes)"),
    "writes a train.json nested 100,000 deep": ('''
with open(os.path.join(out, "train.json"), "w") as f:
    f.write("[" * 100000 + "]" * 100000)
''', "nests deeper than 64 levels ([limits] json_max_depth)"),
}


def _night(ws, attacks: dict[str, tuple[str, str]], timeout: float = 600) -> dict[str, dict]:
    """Every attack, then a control change; the night's rows by description."""
    for description, (attack, _) in attacks.items():
        ws.enqueue(description, source=SRC + attack)
    ws.enqueue("a fine change", knobs={"QUALITY": 0.9})
    r = ws.looper("run", "--max-experiments", str(len(attacks) + 1), timeout=timeout)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]  # the stop rule's, never 3 (a halt)
    rows = ws.by_description()
    for description, (_, words) in attacks.items():
        row = rows[description]
        reasons = " ".join(json.loads(row["blocking_json"]))
        assert row["status"] == "crash", (description, row["status"], reasons)
        assert words in reasons, (description, reasons)
        assert row["failure_signature"] and row["score"] is None, description
        assert "internal error" not in reasons
    assert rows["a fine change"]["status"] == "keep"  # the night went on past every attack
    assert ws.events("halt") == [] and ws.events("page") == []
    with ws.db() as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert ws.git("status", "--porcelain", cwd=ws.worktree) == ""
    assert_nothing_lost(ws)
    return rows


def test_words_in_the_candidates_output_never_halt_the_night(make_ws, pages):  # noqa: F811
    ws = make_ws(loop_stuck_after=10)
    rows = _night(ws, WORDS)
    assert pages.pages == []
    for description in WORDS:  # each was proven the candidate's by a canary that ran cleanly
        reasons = " ".join(json.loads(rows[description]["blocking_json"]))
        assert "the last kept train.py (canary) ran cleanly" in reasons, reasons
    canaries = [e["message"] for e in ws.events("note") if e["message"].startswith("canary of kept")]
    assert len(canaries) == len(WORDS) and all(m.endswith(": ok") for m in canaries), canaries


def test_the_evaluators_trouble_with_the_weights_is_the_candidates_crash(make_ws, pages):  # noqa: F811
    ws = make_ws(loop_stuck_after=10)
    patch_config(ws, "limits", eval_time_floor=3)  # 5 x the best's evaluation seconds + 3 s
    t0 = time.monotonic()
    rows = _night(ws, WEIGHTS)
    assert time.monotonic() - t0 < 240  # the slow model was stopped at its limit, not after 300 s
    assert pages.pages == []
    crashed = " ".join(json.loads(rows["weights that crash the evaluator"]["blocking_json"]))
    assert "evaluate.py exited 1" in crashed  # what it looked like: once a harness error, a halt and a page
    notes = [e["message"] for e in ws.events("note") if e["message"].startswith("canary evaluation")]
    assert notes == ["canary evaluation of the best's weights: ok"], notes
    slow = " ".join(json.loads(rows["a model too slow to evaluate"]["blocking_json"]))
    assert "[limits] eval_time_factor 5 x the best's" in slow and "hung" not in slow


def test_outsized_output_costs_the_daemon_a_bounded_log_time_and_database(make_ws, pages):  # noqa: F811
    ws = make_ws(loop_stuck_after=10, loop_budget_seconds=60)
    cap = 1 << 20
    patch_config(ws, "limits", log_max_bytes=cap)
    t0 = time.monotonic()
    rows = _night(ws, OUTPUT, timeout=900)
    took = time.monotonic() - t0
    assert pages.pages == []
    for description in OUTPUT:
        run_dir = ws.root / "runs" / "t" / f"{rows[description]['id']:05d}" / "main-s0"
        log = run_dir / "train.log"
        assert log.stat().st_size <= cap + 2 * 16_384 + 1000, (description, log.stat().st_size)
    flood = (ws.root / "runs" / "t" / f"{rows['prints 100 MiB']['id']:05d}" / "main-s0" / "train.log").read_text()
    assert "of output cut here" in flood and "fixture train.py starting" in flood  # head and tail, the cut said
    assert "ValueError: flooded 100 MiB of output" in flood[-4000:]  # the tail, as the run ended
    long = rows["prints 100 lines of 8 MiB"]
    seconds = {d: (datetime.fromisoformat(r["finished_at"]) - datetime.fromisoformat(r["started_at"])).total_seconds()
               for d, r in rows.items()}
    print("experiment seconds (2 shared cores, loaded):", {d: round(x, 1) for d, x in seconds.items()})
    assert seconds["prints 100 lines of 8 MiB"] < 120  # was 9.5 minutes of daemon CPU
    with ws.db() as con:
        tail = con.execute("SELECT log_tail FROM runs WHERE experiment_id=?", (long["id"],)).fetchone()[0]
        train_rows = con.execute("SELECT COUNT(*) FROM experiments WHERE train_json IS NOT NULL").fetchone()[0]
    assert len(tail) <= 4000 and "more bytes of this line cut" in tail
    assert train_rows == 0  # train.json is stored once: with its run, not again on the experiment
    db_bytes = sum(os.path.getsize(p) for p in ws.root.glob("experiments.db*"))
    assert db_bytes < 5 << 20, db_bytes  # the 100 MB train.json never reached the database
    print(f"outsized-output night: {took:.0f} s for {len(OUTPUT) + 1} experiments (2 shared cores, loaded)")


def test_a_nearly_full_disk_refuses_the_next_run_first_naming_the_folder_and_free_bytes(make_ws, pages):  # noqa: F811
    """The harness's own resource: with less free disk than ``[limits] min_free_bytes`` the preflight
    refuses the run before it starts (a harness error: halt, one page) and says where and how much;
    the outcome is written (the reserve is given back first on a nearly full disk)."""
    ws = make_ws()
    ws.baseline_only()
    assert (ws.root / ".looper" / "reserve").stat().st_size == 16 << 20  # held while there is room
    patch_config(ws, "limits", min_free_bytes=1 << 60)
    ws.enqueue("a fine change", knobs={"QUALITY": 0.9})
    r = ws.looper("run", "--max-experiments", "1")
    assert r.returncode == 3, r.stdout + r.stderr
    (row,) = ws.rows()
    reasons = " ".join(json.loads(row["blocking_json"]))
    assert row["status"] == "error" and f"the disk of {ws.root} has " in reasons and "bytes free" in reasons
    assert "[limits] min_free_bytes = 1152921504606846976" in reasons
    assert len(pages.pages) == 1 and "min_free_bytes" in json.dumps(pages.pages[0])
    assert not list(ws.root.glob(f"runs/t/{row['id']:05d}/*/train.log")), "a run started"
