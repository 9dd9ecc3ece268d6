"""Benchmark: time from an injected harness fault to the page arriving.

The fault: the prepared data folder vanishes from the host while a candidate trains (a disk
unmounted, a cleanup job; the harness must notice it in the post-run integrity check, record an
`error`, halt and page). train.py cannot do it itself: its sandbox holds the data read-only (that
attempt is the candidate's crash, tests/security). The candidate prints a mark and trains 2 s;
this script, watching the run logs from outside, deletes the folder at the mark and notes the
wall-clock instant; a real HTTP endpoint on loopback (apprise json://) notes when the page arrives. Each run is a fresh fixture workspace with the real daemon
(`python -m looper.cli run`) as a subprocess; the baseline is measured first and is not
part of the figure.

    .venv/bin/python bench/bench_fault_to_page.py [--runs 5]

Prints one line per run, then median, min, max and spread. Goal: under 5 s (the figure holds the 2 s the
candidate still trains after the fault: the harness checks the data once the run has ended).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "fixture_ws"
sys.path.insert(0, str(HERE.parent / "tests"))

MARK = "bench: the fault window is open"


def delete_at_mark(root: Path, done: threading.Event) -> list[float]:
    """A thread that deletes ``root/data`` once a run log of ``root`` shows :data:`MARK`; [the instant]."""
    at: list[float] = []

    def watch() -> None:
        while not done.is_set():
            if any(MARK in f.read_text(errors="replace") for f in (root / "runs").rglob("train.log")):
                shutil.rmtree(root / "data")
                at.append(time.time())
                return
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True).start()
    return at


def one_run(tmp: Path, i: int) -> dict:
    from harness import WS, PageSink, write_config

    from looper.workspace.create import init_workspace

    sink = PageSink()
    arrived: list[float] = []

    class Stamped(list):
        def append(self, page: dict) -> None:  # the sink's handler thread calls this on arrival
            arrived.append(time.time())
            super().append(page)

    sink.pages = Stamped()
    try:
        root = init_workspace(tmp / f"ws{i}")
        for name in ("train.py", "evaluate.py", "prepare.py"):
            shutil.copy(FIXTURE / name, root / name)
        queue = tmp / f"queue{i}"
        queue.mkdir()
        write_config(root, sink.url, f"{sys.executable} {FIXTURE / 'agent.py'}")
        subprocess.run(["git", "add", "-A"], cwd=root, check=True)
        subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "fixtures"],
                       cwd=root, check=True)
        ws = WS(root, queue, sink.url)
        src = (root / "train.py").read_text()
        marker = 'if SCENARIO == "vacuous":'
        src = src.replace(marker, f"print({MARK!r}, flush=True)\n" + marker, 1).replace("SLEEP = 0.0 ", "SLEEP = 2.0 ", 1)
        ws.enqueue("trains while its data vanishes (timed)", source=src)
        done = threading.Event()
        fault = delete_at_mark(root, done)
        t0 = time.monotonic()
        try:
            r = ws.looper("run", timeout=300)
        finally:
            done.set()
        wall = time.monotonic() - t0
        if r.returncode != 3:
            raise RuntimeError(f"run {i}: expected exit 3 (halt), got {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        if len(arrived) != 1:
            raise RuntimeError(f"run {i}: expected exactly one page, got {len(arrived)}")
        if not fault:
            raise RuntimeError(f"run {i}: the candidate's mark never came: the data was not deleted")
        fault_at = fault[0]
        status = ws.rows()[0]["status"]
        if status != "error":
            raise RuntimeError(f"run {i}: the experiment is {status!r}, expected 'error'")
        return {"run": i, "fault_to_page_s": arrived[0] - fault_at, "daemon_wall_s": wall,
                "page_title": json.dumps(sink.pages[0])[:80]}
    finally:
        sink.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="looper-bench-fault-"))
    try:
        results = []
        for i in range(args.runs):
            res = one_run(tmp, i)
            results.append(res)
            print(f"run {i}: fault -> page {res['fault_to_page_s']:.3f} s (daemon wall {res['daemon_wall_s']:.1f} s)",
                  flush=True)
        xs = [r["fault_to_page_s"] for r in results]
        med = statistics.median(xs)
        spread = statistics.stdev(xs) if len(xs) > 1 else 0.0
        print(f"fault (data deleted while a candidate trains) -> page at the endpoint: median {med:.3f} s, "
              f"min {min(xs):.3f} s, max {max(xs):.3f} s, stdev {spread:.3f} s over {len(xs)} runs")
        print("goal < 5 s:", "met" if max(xs) < 5 else "NOT met")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
