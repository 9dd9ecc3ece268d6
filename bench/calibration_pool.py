"""Real runs for a resampled calibration of the gate (issue 15, part 5): a pool of seeds.

    .venv/bin/python bench/calibration_pool.py --scale demo --steps 300 --seeds 16 --degraded 10 --paired 4 --jobs 2
    .venv/bin/python bench/calibration_pool.py --scale full --require-gpu --seeds 16 --degraded 10 --paired 4   # a GPU

Runs, round-robin so that a pool stopped early stays balanced, under ``<out>/runs/<label>-s<seed>``:
``baseline`` (the unchanged train.py, seeds 0..), ``noop`` (train.py plus dead code, seeds 1000..)
and ``degraded`` (LR0 divided by ``--lr-factor``, seeds 2000..); with ``--paired N`` also ``noop`` and
``degraded`` on the baseline's own seeds 0..N-1 (the loop runs a candidate's seed k against the baseline's
seed k: these runs measure what that pairing does). Every run is a real train.py +
evaluate.py run under the step budget (``LOOPER_MAX_STEPS``; the wall clock is still enforced from
outside), so its result does not depend on the machine's load. ``--resume`` (default on) reuses
finished runs. ``bench/bench_calibration.py --from-pool <out>`` then judges with the real gate.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))
from bench_calibration import BUDGET, NOOP, STEPS, degrade  # noqa: E402
from bench_noise import REPO, ensure_data, finished_run, load, run_once  # noqa: E402

FIRST_SEED = {"baseline": 0, "noop": 1000, "degraded": 2000}


def plan(seeds: int, degraded: int, paired: int = 0) -> list[tuple[str, int]]:
    """(label, seed) in round-robin order: baseline, noop, degraded, baseline, ...; with ``paired``, first
    the no-op and the degraded train.py on the baseline's own seeds 0..paired-1 (the loop's pairing:
    candidate seed k against baseline seed k)."""
    out: list[tuple[str, int]] = [(label, k) for k in range(paired) for label in ("noop", "degraded")]
    for i in range(max(seeds, degraded)):
        if i < seeds:
            out += [("baseline", FIRST_SEED["baseline"] + i), ("noop", FIRST_SEED["noop"] + i)]
        if i < degraded:
            out.append(("degraded", FIRST_SEED["degraded"] + i))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="demo", choices=("tiny", "demo", "full"))
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--budget", type=float, default=None)
    ap.add_argument("--seeds", type=int, default=18, help="runs of the unchanged train.py and of the no-op each")
    ap.add_argument("--degraded", type=int, default=12, help="runs of the degraded train.py")
    ap.add_argument("--paired", type=int, default=0,
                    help="also run the no-op and the degraded train.py on the baseline's seeds 0..N-1")
    ap.add_argument("--lr-factor", type=float, default=6.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--device", default=None, help="cpu | 0 | cuda (default: 0 with --require-gpu, else cpu)")
    ap.add_argument("--require-gpu", action="store_true", help="refuse to run without a CUDA GPU")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "calibration-pool")
    args = ap.parse_args(argv)
    if args.require_gpu:
        import torch

        if not torch.cuda.is_available():
            print("calibration_pool: --require-gpu but torch sees no CUDA GPU", file=sys.stderr)
            return 2
    args.device = args.device or ("0" if args.require_gpu else "cpu")
    steps = STEPS[args.scale] if args.steps is None else args.steps
    budget = BUDGET[args.scale] if args.budget is None else args.budget
    args.out.mkdir(parents=True, exist_ok=True)
    data = ensure_data(args.scale, 0, args.out, args.data)
    source = (REPO / "train.py").read_text()
    sources = {"baseline": source, "noop": source + NOOP, "degraded": degrade(source, args.lr_factor)}

    def one(job: tuple[str, int]) -> None:
        label, seed = job
        r = finished_run(label, args.out, seed, budget, steps or None)
        reused = r is not None
        r = r or run_once(sources[label], label, data, args.out, seed, budget, steps or None, args.device)
        print(f"{label} seed={seed}: {'reused ' if reused else ''}steps={r.steps} ({r.stopped_by}) "
              f"weighted_f1={r.score} train {r.train_seconds:.0f}s eval {r.eval_seconds:.0f}s "
              f"load {r.load_before}-{r.load_after} digest {r.digest[:16]}" + ("" if r.ok else f" FAILED {r.why}"),
              flush=True)

    print(f"calibration_pool: scale={args.scale} steps={steps} budget={budget:g}s seeds={args.seeds} "
          f"degraded={args.degraded} lr/{args.lr_factor:g} jobs={args.jobs} load={load()} out={args.out}", flush=True)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(one, plan(args.seeds, args.degraded, args.paired)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
