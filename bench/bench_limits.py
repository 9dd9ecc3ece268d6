"""What each run's limits (issue 39, ``[limits] run_limits``) cost: the same tiny training run in the
real bwrap sandbox through the local executor, with the limits (cgroups where this machine gives
them, prlimit, oom_score_adj, tmpfs sizes, the out/ quota watch) and without, alternated.

The run: ``python train.py`` that imports nothing heavy, writes 64 files of 64 KiB into
``$LOOPER_OUT`` and sleeps ``--sleep`` seconds (the quota watch sums out/ once a second meanwhile).
The figure is the extra wall seconds per run; a demo night's run trains for minutes.

    .venv/bin/python bench/bench_limits.py [--repeats 10] [--sleep 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

TRAIN = """import os, time
out = os.environ["LOOPER_OUT"]
for i in range(64):
    with open(os.path.join(out, f"w{i}.bin"), "wb") as f:
        f.write(os.urandom(65536))
time.sleep(float(os.environ.get("BENCH_SLEEP", "2")))
print("LOOPER_SUMMARY steps=1", flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--sleep", type=float, default=2.0)
    args = ap.parse_args()
    from looper.config import LimitsConfig
    from looper.executors import limits
    from looper.executors.base import TrainJob
    from looper.executors.local import LocalExecutor

    tmp = Path(tempfile.mkdtemp(prefix="looper-bench-limits-"))
    ck = tmp / "ck"
    ck.mkdir()
    (ck / "train.py").write_text(TRAIN)
    (tmp / "data").mkdir()
    ex = LocalExecutor(tmp, python=sys.executable, extra_env={"BENCH_SLEEP": str(args.sleep)})
    ex.use_data(str(tmp / "data"))
    on, off = LimitsConfig(), LimitsConfig(run_limits=False)
    times: dict[str, list[float]] = {"with limits": [], "without": []}
    for i in range(args.repeats * 2):
        which = "with limits" if i % 2 == 0 else "without"
        limits.configure(on if which == "with limits" else off)
        rd = tmp / f"r{i}"
        job = TrainJob(checkout=ck, out_dir=rd / "out", seed=i, budget_seconds=60, grace_seconds=5,
                       stall_seconds=60, log_path=rd / "train.log")
        t0 = time.monotonic()
        r = ex.train(job, None, None)
        times[which].append(time.monotonic() - t0)
        assert r.clean_exit, (r, r.log_tail)
    print(f"limits here: {limits.backend()}; caps {limits.caps_from(on)}")
    for which, xs in times.items():
        print(f"{which:12s}: median {statistics.median(xs):.3f} s, mean {statistics.mean(xs):.3f} s "
              f"(min {min(xs):.3f}, max {max(xs):.3f}) over {len(xs)} runs")
    extra = statistics.median(times["with limits"]) - statistics.median(times["without"])
    print(f"extra per run (median difference): {extra * 1000:+.0f} ms (looper.proc polls the child every 100 ms)")
    _parts(args.repeats * 5, rd / "out")


def _parts(n: int, out: Path) -> None:
    """The pieces alone, finer than a run's 100 ms poll: the wrapper (cgroups made and joined,
    oom_score_adj, prlimit) around /bin/true, and one quota watch of a 64-file out/."""
    from looper import proc
    from looper.executors import limits

    def median_ms(call: object) -> float:
        xs = []
        for _ in range(n):
            t0 = time.perf_counter()
            call()  # type: ignore[operator]
            xs.append(time.perf_counter() - t0)
        return statistics.median(xs) * 1000

    def wrapped() -> None:
        with limits.box(out) as b:
            assert proc.run(b.wrap(["/bin/true"]), timeout=30).ok

    plain = median_ms(lambda: proc.run(["/bin/true"], timeout=30))
    limits.configure(__import__("looper.config", fromlist=["LimitsConfig"]).LimitsConfig())
    boxed = median_ms(wrapped)
    watch = median_ms(lambda: limits.box(out).check())
    print(f"/bin/true: {plain:.1f} ms plain, {boxed:.1f} ms with the limits' wrapper and cgroups "
          f"({boxed - plain:+.1f} ms); one quota watch of a 64-file out/: {watch:.2f} ms (once a second)")


if __name__ == "__main__":
    main()
