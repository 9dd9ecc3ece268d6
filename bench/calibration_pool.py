"""Real runs for a resampled calibration of the gate (issue 15, part 5): a pool of seeds.

    .venv/bin/python bench/calibration_pool.py --scale demo --steps 300 --seeds 16 --degraded 10 --paired 4 --jobs 2
    .venv/bin/python bench/calibration_pool.py --scale full --require-gpu --seeds 16 --degraded 10 --paired 4   # a GPU
    .venv/bin/python bench/calibration_pool.py --scale demo --steps 150 --budget 900 --seeds 16 --degraded 16 \
        --noop 16 --variant lrlow=0.003 --variant lrmid=0.008 --jobs 2 --out bench/out/calibration-pretrained
        # the pretrained start's calibration (bench/RESULTS.md): planted LR0 values on the baseline's own seeds

Runs, round-robin so that a pool stopped early stays balanced, under ``<out>/runs/<label>-s<seed>``:
``baseline`` (the unchanged train.py, seeds 0..), ``noop`` (train.py plus dead code, seeds 1000..)
and ``degraded`` (LR0 divided by ``--lr-factor``, seeds 2000..); with ``--paired N`` also ``noop`` and
``degraded`` on the baseline's own seeds 0..N-1 (the loop runs a candidate's seed k against the baseline's
seed k: these runs measure what that pairing does). Every run is a real train.py +
evaluate.py run under the step budget (``LOOPER_MAX_STEPS``; the wall clock is still enforced from
outside), so its result does not depend on the machine's load. ``--resume`` (default on) reuses
finished runs. ``bench/bench_calibration.py --from-pool <out>`` then judges with the real gate.
Every run fine-tunes train.py's PRETRAINED from ``looper/pretrained/`` (``LOOPER_PRETRAINED_DIR``,
bench_noise.run_once), as a workspace's runs do; each line printed names the start and the LR trained.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))
from bench_calibration import BUDGET, NOOP, STEPS, degrade  # noqa: E402
from bench_noise import REPO, ensure_data, finished_run, load, run_once  # noqa: E402

from looper.core.propose.hyperblock import rewrite_knobs  # noqa: E402

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


def plan_variants(seeds: int, variants: list[str], per_variant: int, noop: int) -> list[tuple[str, int]]:
    """With planted variants (``--variant NAME=LR0``): round-robin over index i, ``baseline`` seed i, every
    variant on the same seed i (the baseline's own seeds: true pairs), then ``noop`` seed 1000+i (the
    unchanged code, dead code appended, on seeds no other label runs)."""
    out: list[tuple[str, int]] = []
    for i in range(max(seeds, per_variant, noop)):
        if i < seeds:
            out.append(("baseline", FIRST_SEED["baseline"] + i))
        if i < per_variant:
            out += [(name, FIRST_SEED["baseline"] + i) for name in variants]
        if i < noop:
            out.append(("noop", FIRST_SEED["noop"] + i))
    return out


def set_lr0(source: str, lr0: float) -> str:
    """train.py with ``LR0 = lr0`` (a planted change of either sign)."""
    m = re.search(r"^LR0 = ([0-9.eE+-]+)", source, re.M)
    if not m:
        sys.exit("calibration_pool: train.py has no 'LR0 = <number>' line to change")
    return source[:m.start(1)] + repr(lr0) + source[m.end(1):]


def parse_variant(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[a-z][a-z0-9_.]*", name) or name in FIRST_SEED:
        raise argparse.ArgumentTypeError(f"--variant wants NAME=LR0 with a new lower-case NAME, got {text!r}")
    try:
        return name, float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: LR0 {value!r} is not a number") from exc


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
    ap.add_argument("--variant", type=parse_variant, action="append", default=[],
                    help="NAME=LR0: a planted change (train.py with that LR0) run on the baseline's seeds "
                         "0..--degraded-1 (true pairs); with any --variant the plain 'degraded' label is not run "
                         "and --seeds counts the baseline, --noop the no-op")
    ap.add_argument("--noop", type=int, default=None, help="no-op runs on seeds 1000.. (default: --seeds)")
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
    args.out = args.out.resolve()  # train.py runs in its own checkout: a relative LOOPER_OUT would land there
    args.out.mkdir(parents=True, exist_ok=True)
    data = ensure_data(args.scale, 0, args.out, args.data)
    source = (REPO / "train.py").read_text()
    if args.device == "cpu":  # parallel jobs share the cores: each gets its share of threads, not all of them
        share = max(1, len(os.sched_getaffinity(0)) // max(1, args.jobs))
        source = rewrite_knobs(source, {"THREADS": share})  # training (Ultralytics resets torch's own count)
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # evaluate.py, run_once's children inherit it:
            os.environ[var] = str(share)  # beside a training job on all cores it took 53-77 s, not 15
    sources = {"baseline": source, "noop": source + NOOP, "degraded": degrade(source, args.lr_factor)}
    sources.update({name: set_lr0(source, lr0) for name, lr0 in args.variant})
    if args.variant:
        jobs = plan_variants(args.seeds, [n for n, _ in args.variant], args.degraded,
                             args.seeds if args.noop is None else args.noop)
    else:
        jobs = plan(args.seeds, args.degraded, args.paired)

    def out_json(r: object) -> dict:
        path = Path(getattr(r, "out", "") or ".") / "train.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def one(job: tuple[str, int]) -> None:
        label, seed = job
        r = finished_run(label, args.out, seed, budget, steps or None)
        reused = r is not None
        r = r or run_once(sources[label], label, data, args.out, seed, budget, steps or None, args.device)
        tj = out_json(r)
        print(f"{label} seed={seed}: {'reused ' if reused else ''}steps={r.steps} ({r.stopped_by}) "
              f"start={tj.get('pretrained')} lr {tj.get('lr_first')}->{tj.get('lr_last')} "
              f"weighted_f1={r.score} train {r.train_seconds:.0f}s eval {r.eval_seconds:.0f}s "
              f"load {r.load_before}-{r.load_after} digest {r.digest[:16]}" + ("" if r.ok else f" FAILED {r.why}"),
              flush=True)

    print(f"calibration_pool: scale={args.scale} steps={steps} budget={budget:g}s seeds={args.seeds} "
          f"degraded={args.degraded} lr/{args.lr_factor:g} variants={args.variant} jobs={args.jobs} load={load()} out={args.out}", flush=True)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(one, jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
