"""Benchmark: time from an injected harness fault to the page arriving.

The fault: train.py deletes the prepared data folder (the harness must notice it in the
post-run integrity check, record an `error`, halt and page). train.py notes the wall-clock
instant right after the deletion; a real HTTP endpoint on loopback (apprise json://) notes
when the page arrives. Each run is a fresh fixture workspace with the real daemon
(`python -m looper.cli run`) as a subprocess; the baseline is measured first and is not
part of the figure.

    .venv/bin/python bench/bench_fault_to_page.py [--runs 5]

Prints one line per run, then median, min, max and spread. Goal: under 5 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "fixture_ws"
sys.path.insert(0, str(HERE.parent / "tests"))

FAULT_SNIPPET = '''
if SCENARIO == "delete_data_timed":
    import shutil
    import time as _t

    shutil.rmtree(os.environ["LOOPER_DATA"])
    with open({stamp!r}, "w") as _f:
        _f.write(repr(_t.time()))
'''


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
        stamp = tmp / f"fault_at{i}"
        src = (root / "train.py").read_text()
        marker = 'if SCENARIO == "vacuous":'
        src = src.replace(marker, FAULT_SNIPPET.format(stamp=str(stamp)).lstrip("\n") + marker, 1)
        src = src.replace('SCENARIO = "ok"', 'SCENARIO = "delete_data_timed"', 1)
        ws.enqueue("delete the data (timed)", source=src)
        t0 = time.monotonic()
        r = ws.looper("run", timeout=300)
        wall = time.monotonic() - t0
        if r.returncode != 3:
            raise RuntimeError(f"run {i}: expected exit 3 (halt), got {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        if len(arrived) != 1:
            raise RuntimeError(f"run {i}: expected exactly one page, got {len(arrived)}")
        if not stamp.is_file():
            raise RuntimeError(f"run {i}: train.py never recorded the fault instant")
        fault_at = float(stamp.read_text())
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
        print(f"fault (data deleted by train.py) -> page at the endpoint: median {med:.3f} s, "
              f"min {min(xs):.3f} s, max {max(xs):.3f} s, stdev {spread:.3f} s over {len(xs)} runs")
        print("goal < 5 s:", "met" if max(xs) < 5 else "NOT met")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
