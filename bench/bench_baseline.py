"""Benchmark: the baseline train.py's page-level per-class precision/recall after a budget.

    python bench/bench_baseline.py --data DATA --budget 180 [--out bench/out/baseline60] [--metrics M.json]

Builds the demo data if DATA is missing, runs the real train.py with the budget, runs
evaluate.py, and prints a markdown table per class. With --metrics it only formats an
existing METRICS.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def table(m: dict) -> str:
    rows = ["| class | support | tp | fp | precision | recall | f1 |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, c in sorted(m["classes"].items(), key=lambda kv: -kv[1]["support"]):
        rows.append(f"| {name} | {c['support']} | {c['tp']} | {c['fp']} | {c['precision']} | {c['recall']} | {c['f1']} |")
    with_recall = sum(1 for c in m["classes"].values() if c["recall"])
    supported = sum(1 for c in m["classes"].values() if c["support"])
    rows.append(f"\nweighted_f1={m['weighted_f1']} macro_f1={m['macro_f1']} pages={m['pages']} "
                f"predictions={m['predictions']} truth={m['truth']} classes with recall>0: {with_recall}/{supported}")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO / "data")
    ap.add_argument("--budget", type=int, default=180)  # s: smallest budget with >= 14 classes on 2 CPU cores
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "baseline")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--metrics", type=Path, help="only format this METRICS.json")
    args = ap.parse_args()
    if args.metrics:
        print(table(json.loads(args.metrics.read_text())))
        return 0
    py = sys.executable
    if not (args.data / "manifest.json").is_file():
        subprocess.run([py, str(REPO / "prepare.py"), "--out", str(args.data), "--scale", "demo", "--seed", "0"],
                       check=True)
    run = args.out / f"budget{args.budget}_seed{args.seed}"
    run.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, LOOPER_BUDGET_SECONDS=str(args.budget), LOOPER_DATA=str(args.data.resolve()),
               LOOPER_OUT=str(run.resolve()), LOOPER_SEED=str(args.seed), LOOPER_DEVICE="cpu")
    subprocess.run([py, str(REPO / "train.py")], env=env, check=True, cwd=REPO)
    metrics = run / "METRICS.json"
    subprocess.run([py, str(REPO / "evaluate.py"), "--weights", str(run / "weights.pt"), "--data", str(args.data),
                    "--out", str(metrics)], check=True, cwd=REPO)
    print((run / "train.json").read_text())
    print(table(json.loads(metrics.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
