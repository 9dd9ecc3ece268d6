"""Shared helpers of the fault-injection matrix: the "nothing was lost" check, config
patches, and finding the processes a daemon started."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from harness import WS

# Outcomes that reset the branch and must leave the commit under refs/looper/discarded/<id>.
RESET_STATUSES = ("discard", "crash", "vacuous", "inconclusive")


def patch_config(ws: WS, section: str, **values: object) -> None:
    """Set keys of one looper.toml section (adding the section when missing) and commit."""
    path = ws.root / "looper.toml"
    text = path.read_text()

    def val(v: object) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else json.dumps(v)

    header = f"[{section}]"
    if header not in text:
        text += f"\n{header}\n"
    head, _, rest = text.partition(header + "\n")
    body, sep, tail = rest.partition("\n[")
    lines = body.splitlines()
    for key, v in values.items():
        line = f"{key} = {val(v)}"
        for i, old in enumerate(lines):
            if re.match(rf"{re.escape(key)}\s*=", old):
                lines[i] = line
                break
        else:
            lines.append(line)
    path.write_text(head + header + "\n" + "\n".join(lines) + "\n" + (sep.lstrip("\n") and "\n[" + tail))
    ws.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", f"config: {section} {values}")


def all_rows(ws: WS) -> list[dict]:
    with ws.db() as con:
        return [dict(r) for r in con.execute("SELECT * FROM experiments ORDER BY id")]


def runs_rows(ws: WS) -> list[dict]:
    with ws.db() as con:
        return [dict(r) for r in con.execute("SELECT * FROM runs ORDER BY id")]


def event_kinds(ws: WS) -> list[str]:
    return [e["kind"] for e in ws.events()]


def assert_nothing_lost(ws: WS, *, halted: str | None = None, recovered: bool = False,
                        allow_running: bool = False) -> None:
    """Everything the night produced is still there and consistent.

    - every experiment row is present (ids 1..n without gaps) and none is left open
      (unless ``allow_running``: the daemon was killed and not restarted);
    - every row keeps its full train.py source; a row with a commit keeps its diff;
    - the branch tip is the last kept commit, or, after an error halt, the commit of the
      experiment that erred (left as it was for a person to look at);
    - the worktree holds exactly the tip's train.py and nothing uncommitted;
    - every reset outcome with a commit is reachable under refs/looper/discarded/<id>;
    - the journal names the halt (``halted`` = "halt" | "stuck") and the recovery.
    """
    rows = all_rows(ws)
    assert rows, "no experiment rows at all"
    ids = [r["id"] for r in rows]
    assert ids == list(range(ids[0], ids[0] + len(ids))), f"experiment ids have gaps: {ids}"
    open_rows = [r["id"] for r in rows if r["status"] in ("pending", "running")]
    if not allow_running:
        assert not open_rows, f"experiments left open: {open_rows}"
    for r in rows:
        assert r["source"], f"experiment #{r['id']} lost its train.py source"
        if r["kind"] == "candidate" and r["commit"] and r["parent"] and r["commit"] != r["parent"]:
            assert r["diff"], f"experiment #{r['id']} ({r['status']}) lost its diff"
        if r["score"] is not None:
            assert r["status"] in ("keep", "discard", "inconclusive"), f"#{r['id']} {r['status']} has a score"
    kept = [r for r in rows if r["status"] == "keep" and r["commit"] and r["kind"] in ("baseline", "candidate")]
    assert kept, "no kept commit at all (the baseline should be one)"
    last_kept = kept[-1]
    tip = ws.git("rev-parse", "looper/t")
    allowed_tips = {last_kept["commit"]}
    erred = [r for r in rows if r["status"] == "error" and r["commit"] and r["id"] > last_kept["id"]]
    if halted == "halt" and erred:
        allowed_tips.add(erred[-1]["commit"])
    assert tip in allowed_tips, f"branch looper/t at {tip[:10]}, expected one of {[c[:10] for c in allowed_tips]}"
    if tip == last_kept["commit"]:
        assert ws.git("show", f"{tip}:train.py") + "\n" == last_kept["source"] or \
            ws.git("show", f"{tip}:train.py") == last_kept["source"].rstrip("\n")
    wt_train = (ws.worktree / "train.py").read_text()
    assert wt_train.rstrip("\n") == ws.git("show", f"{tip}:train.py"), "worktree train.py is not the branch tip's"
    assert ws.git("rev-parse", "HEAD", cwd=ws.worktree) == tip, "worktree HEAD is not the branch tip"
    if not allow_running:
        assert ws.git("status", "--porcelain", cwd=ws.worktree) == "", "worktree has uncommitted changes"
    for r in rows:
        if r["status"] in RESET_STATUSES and r["commit"] and r["commit"] != r["parent"]:
            ref = ws.git("rev-parse", "--verify", "-q", f"refs/looper/discarded/{r['id']}")
            assert ref == r["commit"], f"refs/looper/discarded/{r['id']} missing or wrong for #{r['id']}"
            shown = ws.git("show", f"{r['commit']}:train.py")
            assert shown == r["source"].rstrip("\n"), f"discarded commit of #{r['id']} differs from its source"
    refs = set(ws.git("for-each-ref", "--format=%(objectname)", "refs/looper/").split())
    for r in rows:
        if r["status"] == "interrupted" and r["commit"] and r["commit"] != r["parent"]:
            on_branch = subprocess.run(["git", "merge-base", "--is-ancestor", r["commit"], "looper/t"],
                                       cwd=ws.root).returncode == 0
            assert on_branch or r["commit"] in refs, f"interrupted #{r['id']}'s commit is reachable from no ref"
    kinds = event_kinds(ws)
    assert "start" in kinds, "the journal has no start event"
    if halted:
        assert kinds.count(halted) >= 1, f"the journal has no {halted!r} event: {kinds}"
    else:
        assert "halt" not in kinds and "stuck" not in kinds, f"unexpected halt in the journal: {kinds}"
    if recovered:
        assert "recover" in kinds, f"the journal has no recover event: {kinds}"


def integrity_ok(db: Path) -> None:
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        con.close()


def procs_with_env(key: str, value: str, needle: str = "") -> list[int]:
    """Pids of live processes whose environment has key=value (and whose argv holds needle)."""
    found = []
    want = f"{key}={value}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            continue
        if want in env and needle in cmd:
            found.append(int(entry))
    return found


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def daemon_env(ws: WS, **extra: str) -> dict[str, str]:
    env = ws.env()
    env.update(extra)
    return env


def wrapped_daemon(ws: WS, prelude: str, *args: str, env: dict | None = None) -> subprocess.Popen:
    """Start the real daemon through a tiny wrapper that runs ``prelude`` first (a test-only
    tweak of a module constant, e.g. a short SQLite busy timeout); everything else is the CLI."""
    code = f"{prelude}\nimport sys\nfrom looper.cli import main\nsys.argv = ['looper', 'run', *{list(args)!r}]\nmain()"
    return subprocess.Popen([sys.executable, "-c", code], cwd=ws.root, env=env or ws.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
