"""Where a training run's start-up goes, and whether a change to train.py moved it (issue 41).

Runs short training runs (``LOOPER_MAX_STEPS``, default 3) of two train.py files, interleaved
(before, after, before, after, ...) on the same data and seed, and prints each run's
``startup_phases`` from train.json (seconds since train.py's first line: imports, model built, data
links, trainer set-up, first optimizer step), whether torch._dynamo was imported in the run, and
whether the two files' weights are the same tensors bit for bit (safetensors), so a start-up saving
that changed what is trained shows. No sandbox: the phases are train.py's own.

    .venv/bin/python bench/bench_startup.py --before OLD_train.py --after train.py --data DIR --pairs 3

``--before`` defaults to the committed train.py (``git show HEAD:train.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# run train.py as __main__, then say whether torch._dynamo was ever imported (the last line of stdout)
PROBE = ("import runpy, sys; sys.argv = ['train.py']; code = 0\n"
         "try:\n    runpy.run_path('train.py', run_name='__main__')\n"
         "except SystemExit as e:\n    code = e.code or 0\n"
         "print('BENCH_DYNAMO', 'torch._dynamo' in sys.modules); sys.exit(code)\n")


def one_run(train_py: Path, data: Path, out: Path, steps: int, seed: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as d:
        ck = Path(d)
        (ck / "train.py").write_bytes(train_py.read_bytes())
        env = {**os.environ, "YOLO_OFFLINE": "1", "LOOPER_DATA": str(data), "LOOPER_OUT": str(out),
               "LOOPER_MAX_STEPS": str(steps), "LOOPER_SEED": str(seed), "LOOPER_BUDGET_SECONDS": "600",
               "LOOPER_PRETRAINED_DIR": str(ROOT / "looper" / "pretrained"), "YOLO_CONFIG_DIR": str(ck / "ycfg")}
        done = subprocess.run([sys.executable, "-c", PROBE], cwd=ck, env=env, capture_output=True, text=True,
                              timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{train_py}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    info = json.loads((out / "train.json").read_text())
    dynamo = done.stdout.strip().splitlines()[-1].split()[-1] == "True"
    return {"phases": info.get("startup_phases"), "startup_seconds": info.get("startup_seconds"),
            "steps": info.get("steps"), "dynamo_imported": dynamo}


def same_tensors(a: Path, b: Path) -> bool:
    from safetensors.torch import load_file

    x, y = load_file(str(a)), load_file(str(b))
    return x.keys() == y.keys() and all(bool((x[k] == y[k]).all()) and x[k].dtype == y[k].dtype for k in x)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="train.py before (default: git show HEAD:train.py)")
    ap.add_argument("--after", type=Path, default=ROOT / "train.py")
    ap.add_argument("--data", type=Path, required=True, help="a prepared data folder (prepare.py --out DIR)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="write the runs as JSON here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    before = args.before
    if before is None:
        before = work / "before_train.py"
        before.write_text(subprocess.run(["git", "show", "HEAD:train.py"], cwd=ROOT, capture_output=True,
                                         text=True, check=True).stdout)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for i in range(args.pairs):
        for name, path in (("before", before), ("after", args.after.resolve())):
            r = one_run(path, args.data.resolve(), work / f"{name}{i}", args.steps, args.seed)
            runs[name].append(r)
            print(f"{name:6} pair {i}: start-up {r['startup_seconds']} s, phases {r['phases']}, "
                  f"torch._dynamo imported: {r['dynamo_imported']}", flush=True)
    same = same_tensors(work / "before0" / "weights.pt", work / "after0" / "weights.pt")
    summary = {k: {"median_startup_seconds": statistics.median(r["startup_seconds"] for r in v),
                   "startup_seconds": [r["startup_seconds"] for r in v]} for k, v in runs.items()}
    print(json.dumps({"summary": summary, "same_weights_bit_for_bit": same}, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"runs": runs, "summary": summary, "same_weights_bit_for_bit": same},
                                       indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
