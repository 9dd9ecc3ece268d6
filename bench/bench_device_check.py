"""What the GPU check of a night's preflight costs (docs/GPU.md, "Can a run use the GPU?"): torch on the run's
device in a fresh box of its own (the real bwrap sandbox, the run limits at each run's share), through the local
executor's ``device_check``, as the preflight makes it once a night. On a CPU machine the device is ``cpu``; on a
GPU machine pass ``--device cuda:0``. Also the cost of a check that fails and takes each part away in turn
(a device torch cannot use: four attempts).

    .venv/bin/python bench/bench_device_check.py [--repeats 5] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from looper.config import LimitsConfig
    from looper.executors import limits as run_limits
    from looper.executors.local import LocalExecutor

    run_limits.configure(LimitsConfig(), 2)  # two runs at a time share the machine's memory, as a night sets it
    with tempfile.TemporaryDirectory() as tmp:
        ex = LocalExecutor(Path(tmp) / "ws", python=sys.executable)
        for label, device in (("passes", args.device), ("fails (4 attempts)", "cuda:99")):
            times, said = [], ""
            for _ in range(args.repeats if label == "passes" else max(1, args.repeats // 2)):
                t0 = time.monotonic()
                said, problem = ex.device_check(device)
                times.append(time.monotonic() - t0)
            print(f"device check {label}: median {statistics.median(times):.2f} s "
                  f"({min(times):.2f}-{max(times):.2f}, {len(times)} runs): {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
