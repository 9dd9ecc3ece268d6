"""A training run's memory against the size of its data set, by train.py's CACHE (issue 47).

Runs the workspace train.py (``LOOPER_MAX_STEPS``, default 6) on each data folder given, once with each CACHE
value, and samples the proportional resident memory (PSS) of the run's whole process tree (train.py and its data loader's
worker) every 0.1 s; prints the peak, the time to the first step, and each folder's training tiles. The
figures behind looper.core.data.memory (PROCESS_MB, CACHE_BYTES_PER_PIXEL). No sandbox, no run limits.

``--index made|none`` first makes the data set's label index as a night does (looper/data/labelindex.py), or
removes it so that each run scans, as in a box whose data is read-only (a run here, outside the box, writes one
where the box could not: it is removed again after each run).

    .venv/bin/python bench/bench_memory.py --data DIR [DIR ...] [--cache auto none ram] [--steps 6] [--index made]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tree_rss_mb(pid: int) -> float:
    """Proportional resident memory (PSS: a page shared by the worker forked from train.py counted once in all)
    of ``pid`` and every descendant, MB."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            status = Path(f"/proc/{p}/smaps_rollup").read_text()
            m = re.search(r"^Pss:\s+(\d+) kB", status, re.M)
            total += int(m.group(1)) if m else 0
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return total / 1024


def index(data: Path, how: str) -> None:
    """The label index as a night leaves it (``made``), or none, each run scanning (``none``)."""
    for cache in data.glob("tiles/*/labels.cache"):
        cache.unlink()
    if how == "made":
        subprocess.run([sys.executable, str(ROOT / "looper" / "data" / "labelindex.py"), str(data)], check=True,
                       capture_output=True, env={**os.environ, "YOLO_OFFLINE": "1"})


def one(data: Path, cache: str, steps: int, how: str = "made") -> dict:
    index(data, how)
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as d:
        ck = Path(d)
        src = (ROOT / "train.py").read_text()
        (ck / "train.py").write_text(re.sub(r'^CACHE = "\w+"', f'CACHE = "{cache}"', src, count=1, flags=re.M))
        out = ck / "out"
        env = {**os.environ, "YOLO_OFFLINE": "1", "LOOPER_DATA": str(data), "LOOPER_OUT": str(out),
               "LOOPER_MAX_STEPS": str(steps), "LOOPER_SEED": "0", "LOOPER_BUDGET_SECONDS": "900",
               "LOOPER_PRETRAINED_DIR": str(ROOT / "looper" / "pretrained"), "YOLO_CONFIG_DIR": str(ck / "ycfg")}
        proc = subprocess.Popen([sys.executable, "train.py"], cwd=ck, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        peak = [0.0]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], tree_rss_mb(proc.pid))
                time.sleep(0.1)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        log = proc.communicate(timeout=1800)[0].decode(errors="replace")
        done.set()
        t.join()
        if proc.returncode != 0:
            raise SystemExit(f"{data} CACHE={cache}: exit {proc.returncode}\n{log[-2000:]}")
        info = json.loads((out / "train.json").read_text())
        shutil.rmtree(out, ignore_errors=True)
    index(data, how)  # a run that scanned wrote one here (in the box it could not): the next run scans too
    tiles = len(list((data / "tiles" / "train" / "images").glob("*")))
    return {"data": str(data), "tiles": tiles, "cache": cache, "peak_tree_mb": round(peak[0]),
            "first_step_s": (info.get("startup_phases") or {}).get("first_step"), "steps": info.get("steps")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, nargs="+", required=True)
    ap.add_argument("--cache", nargs="+", default=["auto", "none", "ram"])
    ap.add_argument("--index", choices=["made", "none"], default="made")
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args()
    for data in a.data:
        for cache in a.cache:
            r = one(data.resolve(), cache, a.steps, a.index)
            print(f"{r['tiles']:>6} tiles, index {a.index}, CACHE={cache:<4}: peak {r['peak_tree_mb']} MB (train.py and its loader "
                  f"worker), first step at {r['first_step_s']} s, {r['steps']} steps  [{r['data']}]", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
