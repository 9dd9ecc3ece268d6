"""Threads of runs that train at the same time on one machine: each on every core, or each on its share.

Two workers' runs (``[loop] workers = 2``), or two pytest-xdist workers' test nights, train at once. Before,
each such run set torch to every core the machine has, so two of them oversubscribed the cores; now the
daemon gives each run its share (looper.night.cores.run_threads) and the test session each worker's
(tests/conftest.py). The real train.py on the tiny data, from the shipped checkpoint, a fixed number of steps:

- one run alone on every core;
- two at once, each on every core (the old regime);
- two at once, each on its share (``LOOPER_THREADS`` = cores // 2, as the daemon now sets it).

    .venv/bin/python bench/bench_threads.py [--steps 26] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def one(folder: Path, data: Path, steps: int, threads: int, seed: int) -> subprocess.Popen:
    out = folder / f"out-{seed}-{time.monotonic_ns()}"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LOOPER_THREADS")}
    env.update(LOOPER_DATA=str(data), LOOPER_OUT=str(out), LOOPER_SEED=str(seed), LOOPER_DEVICE="cpu",
               LOOPER_MAX_STEPS=str(steps), LOOPER_BUDGET_SECONDS="900", YOLO_OFFLINE="1",
               YOLO_CONFIG_DIR=str(folder / "ultralytics"), LOOPER_PRETRAINED_DIR=str(REPO / "looper" / "pretrained"))
    if threads:
        env.update(LOOPER_THREADS=str(threads), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return subprocess.Popen([sys.executable, str(REPO / "train.py")], cwd=folder, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def timed(folder: Path, data: Path, steps: int, threads: int, at_once: int, seed: int) -> list[float]:
    """Seconds of each of ``at_once`` runs started together."""
    t0 = time.monotonic()
    runs = [one(folder, data, steps, threads, seed + i) for i in range(at_once)]
    took = []
    for r in runs:
        if r.wait() != 0:
            raise SystemExit(f"train.py exited {r.returncode}")
        took.append(time.monotonic() - t0)
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=26)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    import prepare

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data = folder / "data"
        prepare.build(data, "tiny", 0, test_seed=0)
        timed(folder, data, 2, 0, 1, 0)  # warm the page cache and the bytecode
        regimes = (("one alone, every core", 0, 1), ("two at once, each every core", 0, 2),
                   (f"two at once, each {max(1, cores // 2)} thread(s)", max(1, cores // 2), 2))
        for label, threads, at_once in regimes:
            took = [s for k in range(args.repeats) for s in timed(folder, data, args.steps, threads, at_once, 10 * k)]
            print(f"{label}: median {statistics.median(took):.1f} s a run ({min(took):.1f}-{max(took):.1f}, "
                  f"{len(took)} runs of {args.steps} steps, {cores} cores)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
