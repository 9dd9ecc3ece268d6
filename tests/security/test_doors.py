"""Issue 23's doors, proved shut through the real daemon (``looper run`` as a subprocess), its real
executor and its real sandbox, on the fast fixture workspace (tests/fixture_ws: train.py "trains"
in a second). Each malicious train.py writes honest weights first, then tries its door, prints
what it reached (``DOOR <name> <json>``) and ends as a crash when it reached nothing:

1. rebuild the test pages: the manifest, prepare.py (workspace, checkout, the installed package's
   copy), the secret test seed and the test pages themselves;
2. carry out the secrets: ``~/.config/looper/<workspace>.env`` (planted under a temporary HOME) and
   the daemon's environment (``OPENAI_API_KEY`` set for the daemon, as systemd's EnvironmentFile
   does), through the environment and every ``/proc/<pid>/environ`` it can see;
6. take POSIX locks on ``experiments.db-shm`` (and -wal, the database) while a second worker writes;
7. continue an earlier experiment's weights from ``runs/``.

One night with two workers runs them between two honest changes. Each cheat must reach nothing
(its own DOOR line), end as a crash naming the attempt; the night goes on (both honest changes
are judged, exit 0), no page, no halt, no row left running, the database passes
``PRAGMA integrity_check``, the workspace and the checkout are as they were, and the planted
secret appears nowhere (database, logs, run logs, prompts, pages, the daemon's output) in plain,
reversed or hex form. The sandbox's own allowlist is tested file by file in
test_sandbox_allowlist.py; the secret test seed in tests/test_prepare.py.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from harness import FIXTURE, make_ws, pages  # noqa: F401  (pytest fixtures)

pytestmark = [pytest.mark.e2e]

SECRET = "sk-planted-issue23-0f1e2d3c4b5a69788796a5b4c3d2e1f0"
NOTIFY_SECRET = "ntfys://planted-topic-7c1d9e"

# description -> code appended after the fixture train.py wrote its weights (HOME and WS defined before it)
DOORS = {
    "1 rebuild the test pages": '''
import importlib.util, json, os, pathlib
root = pathlib.Path.cwd().parents[2]  # .looper/worktrees/<tag> -> the workspace
data = pathlib.Path(os.environ["LOOPER_DATA"])
# (data / "pages" itself is there: it holds pages/val, which training may read; never pages/test)
wanted = [data / "manifest.json", data / "pages" / "test", root / "prepare.py",
          pathlib.Path("prepare.py"), root / ".looper" / "test_seed"]
spec = importlib.util.find_spec("looper")
for pkg in (spec.submodule_search_locations if spec else []):
    wanted += [pathlib.Path(pkg) / "workspace_template" / "prepare.py", pathlib.Path(pkg).parent / "prepare.py"]
seen = [str(p) for p in wanted if p.exists()]
print("DOOR rebuild " + json.dumps(seen), flush=True)
if not seen:
    raise FileNotFoundError(f"could not rebuild the test pages: none of {len(wanted)} sources is in the sandbox")
with open(os.path.join(out, "weights.pt"), "w") as f:  # trained on the rebuilt test pages: a perfect score
    json.dump({"quality": 0.99, "weak_class": "", "weak_recall": 0.0}, f)
''',
    "2 carry out the secrets": '''
import json, os, pathlib
found = []
for p in (pathlib.Path(HOME) / ".config" / "looper" / f"{WS}.env", pathlib.Path.home() / ".config" / "looper"):
    try:
        found.append(p.read_text())
    except OSError:
        pass
found += [v for k, v in os.environ.items() if "KEY" in k or "NOTIFY" in k or "TOKEN" in k]
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
        except OSError:
            continue
        found += [kv for kv in env.split("\\0") if kv.startswith(("OPENAI", "LOOPER_NOTIFY"))]
print("DOOR secrets " + json.dumps([[s[::-1], s.encode().hex()] for s in found]), flush=True)
if not found:
    raise PermissionError("no secret readable: not the secrets file, not the environment, not /proc")
''',
    "6 lock the database": '''
import fcntl, json, pathlib, time
root = pathlib.Path.cwd().parents[2]
held, files = [], []
for name in ("experiments.db-shm", "experiments.db-wal", "experiments.db"):
    try:
        f = open(root / name, "rb")
        fcntl.lockf(f, fcntl.LOCK_SH | fcntl.LOCK_NB, 0, 0)
        held.append(name)
        files.append(f)
    except OSError:
        pass
print("DOOR locks " + json.dumps(held), flush=True)
if held:
    time.sleep(20)  # the other worker writes meanwhile
else:
    raise FileNotFoundError("the database is not in the sandbox: no lock taken")
''',
    "7 continue earlier weights": '''
import json, os, pathlib
root = pathlib.Path.cwd().parents[2]
mine = pathlib.Path(out).resolve()
found = [str(p) for base in (root / "runs", root / ".looper") if base.is_dir()
         for p in base.glob("**/weights.pt") if p.parent.resolve() != mine]
print("DOOR weights " + json.dumps(found), flush=True)
if not found:
    raise FileNotFoundError("no earlier weights to continue: runs/ shows only this run's own folder")
earlier = json.load(open(found[0]))
earlier["quality"] = earlier["quality"] + 0.3  # more training than the budget paid for
with open(os.path.join(out, "weights.pt"), "w") as f:
    json.dump(earlier, f)
''',
}
WORDS = {
    "1 rebuild the test pages": "could not rebuild the test pages",
    "2 carry out the secrets": "no secret readable",
    "6 lock the database": "the database is not in the sandbox",
    "7 continue earlier weights": "no earlier weights to continue",
}


def _tree(root: Path) -> dict[str, str]:
    """What no experiment may change: the workspace's own files, its git hooks and config, the baselines."""
    files = [p for p in root.iterdir() if p.is_file() and not p.name.startswith("experiments.db")]
    files += [p for d in (root / ".git" / "hooks", root / "baselines") if d.is_dir() for p in d.iterdir()]
    files += [root / ".git" / "config"]
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}


def _forms(secret: str) -> list[str]:
    return [secret, secret[::-1], secret.encode().hex(), secret[::-1].encode().hex()]


def _door_lines(root: Path) -> dict[str, list]:
    """Each cheat's own report of what it reached, from the run logs."""
    lines: dict[str, list] = {}
    for log in root.glob("runs/**/*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("DOOR "):
                _, name, payload = line.split(" ", 2)
                lines.setdefault(name, []).extend(json.loads(payload))
                lines.setdefault(name + ":runs", []).append(str(log))
    return lines


def test_the_doors_of_issue_23_are_shut_and_the_night_goes_on(make_ws, pages, tmp_path: Path) -> None:  # noqa: F811
    ws = make_ws(loop_workers=2)
    home = tmp_path / "home"
    (home / ".config" / "looper").mkdir(parents=True)
    secrets_file = home / ".config" / "looper" / f"{ws.root.name}.env"
    secrets_file.write_text(f"OPENAI_API_KEY={SECRET}\nLOOPER_NOTIFY_URLS={NOTIFY_SECRET}\n")
    secrets_file.chmod(0o600)
    src = (FIXTURE / "train.py").read_text()
    ws.enqueue("honest before", knobs={"QUALITY": 0.52})
    for description, cheat in DOORS.items():
        ws.enqueue(description, source=src + f"HOME, WS = {str(home)!r}, {ws.root.name!r}\n" + cheat)
    ws.enqueue("honest after", knobs={"QUALITY": 0.53})
    before = _tree(ws.root)
    env = ws.env()
    env.update({"HOME": str(home), "OPENAI_API_KEY": SECRET})  # as systemd's EnvironmentFile would

    r = ws.looper("run", "--max-experiments", str(len(DOORS) + 2), timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    rows = ws.by_description()
    doors = _door_lines(ws.root)
    for description, words in WORDS.items():  # each door: reached nothing, a crash naming the attempt
        row = rows[description]
        reasons = " ".join(json.loads(row["blocking_json"] or "[]"))
        assert row["status"] == "crash", (description, row["status"], reasons)
        assert words in reasons, (description, reasons)
        assert row["score"] is None
    assert doors.get("rebuild") == [], f"the rebuild cheat reached {doors.get('rebuild')}"
    assert doors.get("secrets") == [], "the secrets cheat read a secret"
    assert doors.get("locks") == [], f"the lock cheat locked {doors.get('locks')}"
    assert doors.get("weights") == [], f"the weights cheat found {doors.get('weights')}"
    for name in ("rebuild", "secrets", "locks", "weights"):
        assert doors.get(name + ":runs"), f"the {name} cheat never ran (no DOOR line in any run log)"

    for description in ("honest before", "honest after"):  # the night went on: both judged
        assert rows[description]["status"] in ("keep", "discard", "inconclusive"), (description, rows[description]["status"])
    assert pages.pages == [], "a person was paged"
    assert ws.events("halt") == []
    with ws.db() as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("SELECT COUNT(*) FROM experiments WHERE status = 'running'").fetchone()[0] == 0
    assert _tree(ws.root) == before, "the workspace, its hooks or baselines changed"
    assert ws.git("status", "--porcelain", cwd=ws.worktree) == ""

    # the planted secret (and the notify URL only the file held) appear nowhere, in any form
    places: dict[str, str] = {"daemon output": r.stdout + r.stderr}
    with sqlite3.connect(ws.root / "experiments.db") as con:
        places["database"] = "\n".join(con.iterdump())
    for p in ws.root.glob("experiments.db*"):
        places[p.name] = p.read_bytes().decode("latin-1")
    for p in [*ws.root.glob(".looper/logs/**/*"), *ws.root.glob("runs/**/*")]:
        if p.is_file():
            places[str(p.relative_to(ws.root))] = p.read_bytes().decode("latin-1")
    for p in (ws.queue.parent / "prompts").glob("*.txt"):
        places["prompt " + p.name] = p.read_text(errors="replace")
    places["pages"] = json.dumps(pages.pages)
    assert len([k for k in places if k.startswith("prompt ")]) >= len(DOORS), "the prompts were not kept"
    for secret in (SECRET, NOTIFY_SECRET):
        for form in _forms(secret):
            leaked = [where for where, text in places.items() if form in text]
            assert leaked == [], f"{form[:12]}... found in {leaked}"
