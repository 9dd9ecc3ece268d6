"""Issue 39, findings 3 to 6, through the real daemon (``looper run`` as a subprocess) and its real
sandbox: a run that fills the disk, its memory, its private /tmp or /dev/shm, or its process table,
a train.json that is a link to an earlier run's evidence, and a train.json that lies about its
steps. Each is the fast fixture train.py (tests/fixture_ws) plus one attack after it wrote its
weights and train.json. Each must end as the candidate's ``crash`` naming the limit (or the link,
or both step counts), its out/ removed where a limit was hit, and the night must go on: a control
change after the attacks is kept, ``looper run`` exits 0 at its stop rule, no page, no halt, the
database intact (SQLite's integrity check, no row left running), the checkout clean, the next
experiment started within 30 s of each attack's end, the daemon's own resident memory stayed under
300 MiB throughout (sampled every 0.2 s), and a restart judges an honest change.

The full disk is real: the attack's experiment folder is a 48 MiB tmpfs (root only), so its
train.log and out/ meet ENOSPC together, as on a disk the run filled (before issue 39: "internal
error in looper", exit 3, the experiment left ``running``). The memory and process rows use the
cgroups this machine gives root (cgroup v1 memory and pids); without them the test is skipped
naming what is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime

import pytest
from faults.faultkit import assert_nothing_lost, patch_config
from harness import FIXTURE, make_ws, pages  # noqa: F401  (pytest fixtures)

from looper.executors import limits

pytestmark = [pytest.mark.e2e]

SRC = (FIXTURE / "train.py").read_text()
MIB = 1 << 20

ATTACKS = {
    "fills the disk": ('''
i = 0
try:
    while True:  # 4 MiB files until the disk says no
        with open(os.path.join(out, f"fill{i}.bin"), "wb") as f:
            f.write(os.urandom(4 << 20))
        i += 1
except OSError:
    for n in range(200):  # then 200 KiB of output: train.log (on the same disk) needs blocks it cannot get
        print(f"disk full after {i} files, line {n}: " + "x" * 1000, flush=True)
    raise
''', "train.py filled the disk"),
    "fills its /tmp": ('''
with open("/tmp/big.bin", "wb") as f:
    for _ in range(64):
        f.write(b"t" * (1 << 20))
''', "filled its private /tmp ([limits] tmp_max_bytes = 8388608)"),
    "fills its /dev/shm": ('''
with open("/dev/shm/big.bin", "wb") as f:
    for _ in range(64):
        f.write(b"s" * (1 << 20))
''', "filled its private /dev/shm ([limits] tmp_max_bytes = 8388608)"),
    "asks for 4 GiB": ('''
hog = bytearray(4 << 30)
''', "ran out of memory at [limits] memory_max_bytes = 402653184"),
    "three children of 300 MiB": ('''
kids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        hog = bytearray(300 << 20)
        hog[::4096] = b"m" * len(hog[::4096])  # touched: real pages
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
sys.exit(1)
''', "at its memory limit ([limits] memory_max_bytes = 402653184)"),
    "forks 200 sleepers": ('''
for _ in range(200):
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
''', "more than [limits] pids_max = 48 processes and threads"),
    "writes past its quota": ('''
for i in range(400):  # 1 MiB files, slowly enough for the watch (polled each second)
    with open(os.path.join(out, f"q{i}.bin"), "wb") as f:
        f.write(b"q" * (1 << 20))
    time.sleep(0.02)
''', "grew past its quota, [limits] out_max_bytes = 67108864"),
    "train.json links to an earlier run's MATCHES.json": ('''
os.remove(os.path.join(out, "train.json"))
os.symlink(EARLIER, os.path.join(out, "train.json"))
''', "train.json is a symbolic link"),
    "train.json lies about its steps": ('''
info = json.load(open(os.path.join(out, "train.json")))
info["steps"] = 5
json.dump(info, open(os.path.join(out, "train.json"), "w"))
''', "train.json says 5 optimizer steps but the run's log showed steps=10 (LOOPER_SUMMARY)"),
}
LIMITS = ("fills the disk", "fills its /tmp", "fills its /dev/shm", "asks for 4 GiB", "three children of 300 MiB",
          "forks 200 sleepers", "writes past its quota")
TRUTH = "TEST-TRUTH-BOXES-7f3a"  # what the earlier run's MATCHES.json holds: it must reach no database row


DAEMON_RSS_MAX = 300 * MIB  # the daemon alone (no torch in it); the attacks ask for 4 GiB and 3 x 300 MiB


def _sample_rss(pid: int) -> list[int]:
    """The process's resident set (VmRSS, bytes) every 0.2 s until it ends, gathered by a thread into the
    list returned (read it after the process ended)."""
    import threading
    import time

    got: list[int] = []

    def watch() -> None:
        while True:
            try:
                text = open(f"/proc/{pid}/status").read()
            except OSError:
                return
            if "VmRSS:" not in text:  # a zombie: ended
                return
            got.append(int(text.split("VmRSS:")[1].split()[0]) * 1024)
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True).start()
    return got


def _needs() -> str:
    missing = [c for c in ("memory", "pids") if c not in limits.cgroup_parents()]
    if os.getuid() != 0:
        missing.append("root (to mount a small tmpfs as the full disk)")
    return ", ".join(missing)


@pytest.mark.skipif(bool(_needs()), reason=f"needs cgroup v1 memory and pids and root here; missing: {_needs()}")
def test_a_run_that_hits_its_limits_is_the_candidates_crash_and_the_night_goes_on(make_ws, pages):  # noqa: F811
    ws = make_ws(loop_stuck_after=20)
    patch_config(ws, "limits", memory_max_bytes=384 * MIB, pids_max=48, tmp_max_bytes=8 * MIB,
                 out_max_bytes=64 * MIB, min_free_bytes=0)  # the 48 MiB disk's quota: all of it
    ws.baseline_only()
    (base,) = ws.rows("baseline")
    earlier = ws.root / "runs" / "t" / f"{base['id']:05d}" / "baseline-s0" / "MATCHES.json"
    earlier.write_text(json.dumps({"format": "looper-matches/1", "pages": [{"truth": TRUTH}]}))
    first = base["id"] + 1  # the attacks' ids follow in the order enqueued
    disk = ws.root / "runs" / "t" / f"{first:05d}"
    disk.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(disk)], check=True)
    try:
        for description, (attack, _) in ATTACKS.items():
            source = SRC + "\nimport time\nEARLIER = " + repr(str(earlier)) + "\n" + attack
            ws.enqueue(description, source=source)
        ws.enqueue("a fine change", knobs={"QUALITY": 0.9})
        daemon = ws.start("--max-experiments", str(len(ATTACKS) + 1))
        rss = _sample_rss(daemon.pid)
        out, _ = daemon.communicate(timeout=900)
        assert daemon.returncode == 0, out[-8000:]  # the stop rule's, never 3 (a halt)
        # the daemon's own memory (VmRSS, sampled every 0.2 s) stayed its own: no attack's bytes reached it
        assert len(rss) > 10 and max(rss) < DAEMON_RSS_MAX, (max(rss), len(rss))
        rows = ws.by_description()
        assert rows["fills the disk"]["id"] == first
        for description, (_, words) in ATTACKS.items():
            row = rows[description]
            reasons = " ".join(json.loads(row["blocking_json"]))
            assert row["status"] == "crash", (description, row["status"], reasons)
            assert words in reasons, (description, reasons)
            assert row["failure_signature"] and row["score"] is None, description
            assert "internal error" not in reasons and "canary" not in reasons, (description, reasons)
            out = ws.root / "runs" / "t" / f"{row['id']:05d}" / "main-s0" / "out"
            assert not out.exists() if description in LIMITS else True, (description, "out/ was not removed")
        assert rows["a fine change"]["status"] == "keep"  # the night went on past every attack
        assert ws.events("halt") == [] and pages.pages == []
        with ws.db() as con:
            assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            stored = [r[0] or "" for r in con.execute("SELECT train_json FROM runs")]
        assert not any(TRUTH in s for s in stored)  # nothing of the link's target reached the database
        assert ws.git("status", "--porcelain", cwd=ws.worktree) == ""
        assert_nothing_lost(ws)
        order = sorted(rows.values(), key=lambda row: row["id"])
        gaps = [(datetime.fromisoformat(b["started_at"]) - datetime.fromisoformat(a["finished_at"])).total_seconds()
                for a, b in zip(order, order[1:], strict=False)]
        assert max(gaps) < 30, gaps  # the next experiment started within 30 s of each attack's end
        # a restart works: the next night judges an honest change
        ws.enqueue("a change after the restart", knobs={"QUALITY": 0.95})
        again = ws.looper("run", "--max-experiments", "1", timeout=300)
        assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
        assert ws.by_description()["a change after the restart"]["status"] in ("keep", "discard", "inconclusive")
        print("limits night:", {d: rows[d]["status"] for d in rows}, "gaps (s):", [round(g, 1) for g in gaps],
              "daemon RSS MiB (min, max):", min(rss) >> 20, max(rss) >> 20)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_real_training_and_evaluation_run_under_the_default_limits(tiny_data, tmp_path):  # noqa: ANN001
    """The repo's train.py (torch, Ultralytics) and evaluate.py, in the real sandboxes, under the limits a
    user gets by default (derived from this machine): a few real steps, weights that evaluate, and the
    run's argv carrying the limits (cgroups joined where this machine gives them, prlimit, oom_score_adj)."""
    import shutil
    import sys
    from pathlib import Path

    from looper.config import LimitsConfig
    from looper.executors.base import EvalJob, TrainJob
    from looper.executors.local import LocalExecutor

    repo = Path(__file__).resolve().parents[2]
    before = limits.current()
    settings = limits.configure(LimitsConfig())
    try:
        ck = tmp_path / "ck"
        ck.mkdir()
        for name in ("train.py", "evaluate.py"):
            shutil.copy(repo / name, ck / name)
        shutil.copytree(repo / "looper" / "pretrained", tmp_path / "pretrained")  # what `looper init` copies
        ex = LocalExecutor(tmp_path, python=sys.executable)
        ex.use_data(str(tiny_data))
        job = TrainJob(checkout=ck, out_dir=tmp_path / "run" / "out", seed=0, budget_seconds=120, grace_seconds=30,
                       stall_seconds=120, log_path=tmp_path / "run" / "train.log", max_steps=4)
        argv = ex.train_argv(job)
        assert "--size" in argv and str(settings.caps.tmp_max_bytes) in argv  # the tmpfs sizes
        r = ex.train(job, None, None)
        assert r.clean_exit and r.limit == "", (r, r.log_tail[-3000:])
        assert json.loads((job.out_dir / "train.json").read_text())["steps"] == 4
        metrics = tmp_path / "run" / "METRICS.json"
        e = ex.evaluate(EvalJob(checkout=ck, weights=job.out_dir / "weights.pt", metrics_path=metrics,
                                log_path=tmp_path / "run" / "eval.log", timeout_seconds=300, stall_seconds=120), None, None)
        assert e.clean_exit, (e, e.log_tail[-3000:])
        assert json.loads(metrics.read_text())["pages"] > 0
        print("default limits:", settings.caps, "applied through", limits.backend())
    finally:
        limits._SETTINGS[0] = before


@pytest.mark.parametrize("mode", ["bwrap", "none"])
def test_the_limits_hold_with_and_without_the_sandbox(mode, tmp_path):  # noqa: ANN001
    """Through the local executor alone: the run's processes carry oom_score_adj 1000 and the memory and
    file-size limits, with the bwrap sandbox and with ``sandbox = "none"`` (the limits wrap the command,
    not the sandbox); only with bwrap is /tmp a size-limited tmpfs."""
    import sys

    from looper.core.run.limits import Caps
    from looper.executors.base import TrainJob
    from looper.executors.local import LocalExecutor
    from looper.executors.sandbox import SandboxPolicy

    before = limits.current()
    limits._SETTINGS[0] = limits.Settings(Caps(memory_max_bytes=256 * MIB, pids_max=64, tmp_max_bytes=4 * MIB,
                                               out_max_bytes=8 * MIB, out_max_files=100))
    try:
        ck = tmp_path / "ck"
        ck.mkdir()
        (ck / "train.py").write_text(
            "import os, resource, shutil\nout = os.environ['LOOPER_OUT']\n"
            "facts = {'adj': open('/proc/self/oom_score_adj').read().strip(),\n"
            "         'data': resource.getrlimit(resource.RLIMIT_DATA)[0],\n"
            "         'fsize': resource.getrlimit(resource.RLIMIT_FSIZE)[0],\n"
            "         'tmp': shutil.disk_usage('/tmp').total}\n"
            "open(os.path.join(out, 'facts.json'), 'w').write(__import__('json').dumps(facts))\n"
            "hog = bytearray(1 << 30)\n")
        (tmp_path / "data").mkdir()
        ex = LocalExecutor(tmp_path, python=sys.executable, sandbox=SandboxPolicy(mode=mode))
        ex.use_data(str(tmp_path / "data"))
        job = TrainJob(checkout=ck, out_dir=tmp_path / "run" / "out", seed=0, budget_seconds=60, grace_seconds=5,
                       stall_seconds=60, log_path=tmp_path / "run" / "train.log")
        r = ex.train(job, None, None)
        facts = json.loads((job.out_dir / "facts.json").read_text())
        assert facts["adj"] == "1000" and facts["data"] == 256 * MIB and 0 < facts["fsize"] <= 8 * MIB, facts
        assert (facts["tmp"] == 4 * MIB) == (mode == "bwrap"), facts
        assert not r.clean_exit and "MemoryError" in r.log_tail
        from looper.night.measure import limit_hit

        assert "out of memory at [limits] memory_max_bytes = 268435456" in limit_hit(r)
    finally:
        limits._SETTINGS[0] = before
