"""Harness overhead per experiment: wall time minus agent, training and evaluation time.

Trivial train.py / evaluate.py (the loop tests' fixtures) so that what is left is looper
itself: preflight (hashing the fixed files and data), scope check, git commit/reset, the
database, the gate. Goal: under 2 s per experiment.

The training and evaluation sandbox (``[executor] sandbox``, docs/SECURITY.md) costs time
inside the train and eval phases, not in the harness figure: compare the wall time per
experiment of ``--sandbox bwrap`` (the default) and ``--sandbox none``.

    .venv/bin/python bench/bench_overhead.py [--experiments 12] [--sandbox bwrap|none]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "fixture_ws"
sys.path.insert(0, str(HERE.parent / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experiments", type=int, default=12)
    ap.add_argument("--sandbox", choices=["bwrap", "none"], default="bwrap")
    args = ap.parse_args()
    from harness import write_config

    from looper.workspace.create import init_workspace

    tmp = Path(tempfile.mkdtemp(prefix="looper-bench-"))
    try:
        root = init_workspace(tmp / "ws")
        for name in ("train.py", "evaluate.py", "prepare.py"):
            shutil.copy(FIXTURE / name, root / name)
        queue = tmp / "queue"
        queue.mkdir()
        for i in range(args.experiments):
            # alternate keeps and discards so both git paths are measured
            q = 0.5 + (i + 1) * 0.05 if i % 2 == 0 else 0.1
            (queue / f"{i:03d}.json").write_text(json.dumps({"knobs": {"QUALITY": round(q, 3)},
                                                             "description": f"QUALITY -> {q:.2f}"}))
        write_config(root, "", f"{sys.executable} {FIXTURE / 'agent.py'}", exec_sandbox=args.sandbox)
        (root / "looper.toml").write_text((root / "looper.toml").read_text().replace('urls = [""]', "urls = []"))
        subprocess.run(["git", "add", "-A"], cwd=root, check=True)
        subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "bench"], cwd=root,
                       check=True)
        env = {**__import__("os").environ, "FIXTURE_QUEUE": str(queue)}
        r = subprocess.run([sys.executable, "-m", "looper.cli", "run", "--max-experiments", str(args.experiments)],
                           cwd=root, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"looper run failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        con = sqlite3.connect(root / "experiments.db")
        rows = con.execute("SELECT status, agent_seconds, train_seconds, eval_seconds, harness_seconds, "
                           "started_at, finished_at FROM experiments "
                           "WHERE kind='candidate' ORDER BY id").fetchall()
        harness = [r[4] for r in rows]
        from datetime import datetime

        wall = [(datetime.fromisoformat(r[6]) - datetime.fromisoformat(r[5])).total_seconds() for r in rows]
        statuses = [r[0] for r in rows]
        print(f"sandbox: {args.sandbox}")
        print(f"experiments: {len(rows)} ({', '.join(f'{s} {statuses.count(s)}' for s in sorted(set(statuses)))})")
        print(f"harness overhead per experiment: median {statistics.median(harness):.3f} s, "
              f"mean {statistics.fmean(harness):.3f} s, min {min(harness):.3f} s, max {max(harness):.3f} s, "
              f"stdev {statistics.stdev(harness):.3f} s")
        print(f"wall per experiment (incl. fixture agent/train/eval): median {statistics.median(wall):.2f} s")
        print(f"train + eval per experiment (the sandbox's cost lands here): median "
              f"{statistics.median([(r[2] or 0) + (r[3] or 0) for r in rows]):.3f} s")
        print("goal: < 2 s per experiment:", "MET" if max(harness) < 2 else "NOT MET")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
