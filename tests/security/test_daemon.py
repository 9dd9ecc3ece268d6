"""Issue 13's attacks through the real daemon (``looper run`` as a subprocess) and its real sandbox.

The fast fixture workspace (tests/fixture_ws: its train.py "trains" by writing JSON weights
in a second) keeps this to seconds per experiment; tests/security/test_attacks.py runs the
same attacks after real (tiny) training. Each malicious train.py writes its weights first,
then cheats; each experiment must end as a crash that names the attempt, the night goes on,
and the database, the workspace, the baselines and the venv stay as they were, with no
process left.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from harness import FIXTURE, make_ws, pages  # noqa: F401  (pytest fixtures)

pytestmark = [
    pytest.mark.e2e,
]

SITE = Path(next(p for p in sys.path if p.endswith("site-packages")))
MARK = "looper-security-daemon"

# description -> (code appended after the fixture train.py wrote its weights, words in the reason)
CHEATS = {
    "post-commit hook": ('''
import pathlib
root = pathlib.Path.cwd().parents[2]  # .looper/worktrees/<tag> -> the workspace
(root / ".git" / "hooks" / "post-commit").write_text("#!/bin/sh\\ntouch /tmp/hooked\\n")
''', "No such file or directory"),  # .git is not in the sandbox (issue 23: deny by default)
    "rewrite own row": ('''
import pathlib, sqlite3
db = sqlite3.connect(pathlib.Path.cwd().parents[2] / "experiments.db")
db.execute("UPDATE experiments SET status = 'keep', score = 0.97")
db.commit()
''', "no such table: experiments"),  # nor is the database: sqlite finds an empty one
    "survivor": (f'''
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sh", ["sh", "-c", "sleep 30; true {MARK}"])
    os._exit(0)
time.sleep(0.5)
''', "process(es) running after it exited"),
    "pth in the venv": (f'''
open({str(SITE / "zz_looper_boost.pth")!r}, "w").write("import looper_boost\\n")
''', "tried to write outside $LOOPER_OUT"),
}


def _tree(root: Path) -> dict[str, str]:
    """What no experiment may change: the workspace's own files, its git hooks and config, the baselines."""
    files = [p for p in root.iterdir() if p.is_file() and not p.name.startswith("experiments.db")]
    files += [p for d in (root / ".git" / "hooks", root / "baselines") if d.is_dir() for p in d.iterdir()]
    files += [root / ".git" / "config"]
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}


def test_each_attack_is_a_crash_naming_it_and_the_night_goes_on(make_ws) -> None:  # noqa: F811
    ws = make_ws()
    src = (FIXTURE / "train.py").read_text()
    for description, (cheat, _) in CHEATS.items():
        ws.enqueue(description, source=src + cheat)
    before_tree = _tree(ws.root)
    venv_before = sorted(os.listdir(SITE))

    r = ws.looper("run", "--max-experiments", str(len(CHEATS)), timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr

    rows = ws.by_description()
    for description, (_, words) in CHEATS.items():
        row = rows[description]
        reasons = " ".join(json.loads(row["blocking_json"]))
        assert row["status"] == "crash", (description, row["status"], reasons)
        assert words in reasons, (description, reasons)
    with sqlite3.connect(ws.root / "experiments.db") as con:  # nothing rewrote a row behind the daemon
        assert con.execute("SELECT COUNT(*) FROM experiments WHERE status='keep' AND score=0.97").fetchone()[0] == 0
    assert _tree(ws.root) == before_tree, "the workspace, its hooks or baselines changed"
    assert sorted(os.listdir(SITE)) == venv_before, "the venv changed"
    assert not Path("/tmp/hooked").exists()
    time.sleep(0.3)
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and MARK.encode() in _cmdline(p)]
    assert left == [], "a process outlived its run"
    assert ws.git("status", "--porcelain", cwd=ws.worktree) == ""


def _cmdline(p: Path) -> bytes:
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""


def test_pickled_weights_are_a_crash_of_the_change_and_never_loaded(make_ws) -> None:  # noqa: F811
    """A train.py that hands over a pickle instead of data: the evaluator refuses it (exit 65, as
    the real evaluate.py does; tests/security/test_attacks.py shows that one on real weights) and
    the loop records a crash of the change, not a harness error: the night goes on."""
    ws = make_ws()
    src = (FIXTURE / "train.py").read_text() + '''
import os, pickle
out = os.environ["LOOPER_OUT"]
with open(os.path.join(out, "weights.pt"), "wb") as f:
    pickle.dump({"model": "anything", "payload": ("os", "system")}, f)
'''
    ws.enqueue("pickled weights", source=src)
    r = ws.looper("run", "--max-experiments", "1", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    row = ws.by_description()["pickled weights"]
    reasons = " ".join(json.loads(row["blocking_json"]))
    assert row["status"] == "crash", (row["status"], reasons)
    assert "the weights train.py wrote are not data" in reasons and "weights refused" in reasons
    assert row["failure_signature"] and row["score"] is None


def test_a_planted_baseline_file_halts_before_it_is_used(make_ws) -> None:  # noqa: F811
    """A baselines/ file the database never recorded (planted by anything but `looper baseline
    approve`) is a harness error naming it, before any candidate is gated against it."""
    ws = make_ws()
    ws.enqueue("a change", source=(FIXTURE / "train.py").read_text() + "\n# a change\n")
    (ws.root / "baselines").mkdir(exist_ok=True)
    planted = ws.root / "baselines" / "2999-12-31.json"
    planted.write_text(json.dumps({"metrics": {"weighted_f1": 0.0, "classes": {}}, "score": 0.0}))
    r = ws.looper("run", "--max-experiments", "1", timeout=300)
    assert r.returncode == 3, r.stdout + r.stderr
    with ws.db() as con:
        rows = [dict(x) for x in con.execute("SELECT * FROM experiments ORDER BY id")]
        halts = [x["message"] for x in con.execute("SELECT message FROM events WHERE kind = 'halt'")]
    assert len(halts) == 1 and "baselines/2999-12-31.json was not approved through looper" in halts[0], halts
    assert "baselines/2999-12-31.json" in r.stdout + r.stderr
    assert not [row for row in rows if row["kind"] == "candidate" and row["status"] in ("keep", "discard")]
