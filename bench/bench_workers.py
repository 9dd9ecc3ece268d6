"""Experiments per hour with 1, 2 and 4 parallel workers, the training budget dominating.

The loop tests' fixture workspace: every experiment's train.py sleeps SLEEP seconds (the
"budget"), so what limits throughput is looper: the keep lock, the shared database, git.
Goal: N workers give at least 0.9 x N times the one-worker rate.

    .venv/bin/python bench/bench_workers.py [--experiments 8] [--sleep 4]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "fixture_ws"
sys.path.insert(0, str(HERE.parent / "tests"))


def one(workers: int, n: int, sleep: float, tmp: Path) -> float:
    """Experiments per hour for one configuration (candidates only: the baseline is excluded)."""
    from harness import write_config

    from looper.workspace.create import init_workspace

    root = init_workspace(tmp / f"ws{workers}")
    for name in ("train.py", "evaluate.py", "prepare.py"):
        shutil.copy(FIXTURE / name, root / name)
    queue = tmp / f"queue{workers}"
    queue.mkdir()
    for i in range(n):  # all lose to the baseline: discards, so no keep races change the work done
        q = round(0.30 + i * 0.01, 3)
        (queue / f"{i:03d}.json").write_text(json.dumps({"knobs": {"QUALITY": q, "SLEEP": sleep},
                                                         "description": f"QUALITY -> {q}"}))
    write_config(root, "", f"{sys.executable} {FIXTURE / 'agent.py'}", loop_workers=workers,
                 loop_budget_seconds=int(sleep * 3), loop_stall_seconds=int(sleep * 3))
    text = (root / "looper.toml").read_text().replace('urls = [""]', "urls = []")
    (root / "looper.toml").write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "bench"], cwd=root,
                   check=True)
    env = {**__import__("os").environ, "FIXTURE_QUEUE": str(queue)}
    r = subprocess.run([sys.executable, "-m", "looper.cli", "run", "--max-experiments", str(n)], cwd=root,
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"looper run ({workers} workers) failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    con = sqlite3.connect(root / "experiments.db")
    rows = con.execute("SELECT status, started_at, finished_at FROM experiments WHERE kind='candidate'").fetchall()
    assert len(rows) == n and all(s == "discard" for s, _, _ in rows), rows
    start = min(datetime.fromisoformat(a) for _, a, _ in rows)
    end = max(datetime.fromisoformat(b) for _, _, b in rows)
    return n / (end - start).total_seconds() * 3600


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experiments", type=int, default=8)
    ap.add_argument("--sleep", type=float, default=4.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="looper-bench-workers-"))
    try:
        rates = {w: one(w, args.experiments, args.sleep, tmp) for w in (1, 2, 4)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = rates[1]
    print(f"experiments per hour ({args.experiments} experiments, {args.sleep:g} s budget each):")
    for w, rate in rates.items():
        ratio = rate / (w * base)
        print(f"  {w} worker(s): {rate:.0f}/h, {ratio:.2f} x {w} x the one-worker rate"
              + ("" if w == 1 else f" (goal >= 0.9: {'MET' if ratio >= 0.9 else 'NOT MET'})"))


if __name__ == "__main__":
    main()
