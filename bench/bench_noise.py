"""Where the spread of one train.py's score comes from (issue 15), with real train.py + evaluate.py runs.

    .venv/bin/python bench/bench_noise.py [--scale tiny] [--steps 200] [--seeds 3]
        [--clock-runs 3] [--clock-budget 60] [--device cpu] [--out bench/out/noise]

Measures, on one data set, the unchanged train.py of this repository:

1. determinism: the same seed and the same step budget (LOOPER_MAX_STEPS) twice -> are the
   weights identical (a hash over the model's tensors, not the file: Ultralytics' checkpoint
   carries a date) and the METRICS.json scores equal?
2. seed: seeds 0..N-1 at the same step budget -> the spread that is left (initialisation and
   data order, both drawn from the seed);
3. the clock: the same seed 0 under the wall-clock budget only (no step budget), several
   times -> how many steps the budget happened to fit, the first run against the later ones,
   and the spread of the score that follows from it;
4. the test split: per class, the binomial standard error sqrt(r (1 - r) / n) of a recall r
   measured on n test instances (what the split alone adds to a class gate).

The machine's load average is recorded around every run: on a busy machine the wall-clock
runs fit fewer steps, which is the effect a step budget removes. The helpers here
(``run_once``, ``ensure_data``, ``digest``) are shared with bench_calibration.py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GRACE = 60.0  # s after the wall-clock budget before the run is killed from outside (the harness' grace)


def load() -> float:
    return round(os.getloadavg()[0], 2)


def ensure_data(scale: str, seed: int, root: Path, data: Path | None = None) -> Path:
    """The prepared data folder: ``data`` if given, else root/data-<scale>-s<seed> (built once)."""
    if data is not None:
        if not (data / "manifest.json").is_file():
            sys.exit(f"bench: --data {data} has no manifest.json (run prepare.py first)")
        return data.resolve()
    out = root / f"data-{scale}-s{seed}"
    if not (out / "manifest.json").is_file():
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([sys.executable, str(REPO / "prepare.py"), "--out", str(out), "--scale", scale,
                        "--seed", str(seed)], check=True, cwd=REPO)
    return out.resolve()


def weights_file(out: Path) -> Path | None:
    for name in ("weights.safetensors", "weights.pt"):
        if (out / name).is_file():
            return out / name
    return None


def digest(path: Path) -> str:
    """sha256 over the model's tensors (name, dtype, bytes), sorted by name: equal weights give an
    equal digest even when the file carries a date."""
    import torch

    h = hashlib.sha256()
    with open(path, "rb") as f:
        head = f.read(16)
    if path.suffix == ".safetensors" or head[8:10] == b'{"':  # safetensors: 8-byte length, then a JSON header
        from safetensors.torch import load_file

        tensors = load_file(str(path))
    else:  # an Ultralytics checkpoint (pickle)
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        model = (ckpt.get("ema") or ckpt.get("model")) if isinstance(ckpt, dict) else None
        tensors = model.state_dict() if model is not None else {}
    for name, t in sorted(tensors.items()):
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


@dataclass
class Run:
    label: str
    seed: int
    max_steps: int | None
    budget: float
    ok: bool = False
    why: str = ""
    steps: int | None = None
    epochs: int | None = None
    stopped_by: str | None = None
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    score: float | None = None
    digest: str = ""
    load_before: float = 0.0
    load_after: float = 0.0
    out: str = ""
    metrics: dict[str, Any] | None = field(default=None, repr=False)

    def brief(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("metrics")
        return d


def finished_run(label: str, root: Path, seed: int, budget: float, max_steps: int | None,
                 score_key: str = "weighted_f1") -> Run | None:
    """A run of this label and seed that an earlier invocation finished under ``root`` (its
    train.json, weights and METRICS.json all there), or None. Timing: train.json's seconds."""
    ck = root / "runs" / f"{label}-s{seed}"
    out = ck / "out"
    weights = weights_file(out)
    if weights is None or not (out / "train.json").is_file() or not (ck / "METRICS.json").is_file():
        return None
    tj = json.loads((out / "train.json").read_text())
    if (tj.get("max_steps") or None) != (max_steps or None):
        return None
    run = Run(label=label, seed=seed, max_steps=max_steps, budget=budget, ok=True, steps=tj.get("steps"),
              epochs=tj.get("epochs"), stopped_by=tj.get("stopped_by"), train_seconds=float(tj.get("seconds", 0.0)),
              out=str(out), why="reused from an earlier invocation")
    run.metrics = json.loads((ck / "METRICS.json").read_text())
    run.score = run.metrics.get(score_key)
    run.digest = digest(weights)
    return run


def run_once(source: str, label: str, data: Path, root: Path, seed: int, budget: float,
             max_steps: int | None, device: str = "cpu", score_key: str = "weighted_f1") -> Run:
    """One real train.py (``source``) + evaluate.py run in its own checkout under ``root``.

    The wall-clock limit is enforced from outside (budget + GRACE, then killed), as the harness
    does; LOOPER_MAX_STEPS is passed when ``max_steps`` is set."""
    run = Run(label=label, seed=seed, max_steps=max_steps, budget=budget)
    ck = root / "runs" / f"{label}-s{seed}"
    shutil.rmtree(ck, ignore_errors=True)
    out = ck / "out"
    out.mkdir(parents=True)
    (ck / "train.py").write_text(source)
    run.out = str(out)
    env = dict(os.environ, LOOPER_BUDGET_SECONDS=str(int(budget)), LOOPER_DATA=str(data), LOOPER_OUT=str(out),
               LOOPER_SEED=str(seed), LOOPER_DEVICE=device, YOLO_CONFIG_DIR=str(root / "ultralytics"),
               PYTHONPATH=str(REPO))
    # train.py fine-tunes PRETRAINED from this folder (the workspace's pretrained/; here the repository's copy)
    env["LOOPER_PRETRAINED_DIR"] = os.environ.get("LOOPER_PRETRAINED_DIR") or str(REPO / "looper" / "pretrained")
    env.pop("LOOPER_MAX_STEPS", None)
    if max_steps:
        env["LOOPER_MAX_STEPS"] = str(max_steps)
    run.load_before = load()
    t0 = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "train.py"], cwd=ck, env=env, capture_output=True, text=True,
                              timeout=budget + GRACE)
        rc, log = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, log = -9, f"killed at budget + grace ({budget + GRACE:.0f} s): {exc}"
    run.train_seconds = round(time.monotonic() - t0, 2)
    (ck / "train.log").write_text(log)
    weights = weights_file(out)
    if rc != 0 or weights is None or not (out / "train.json").is_file():
        run.why = f"train.py exit {rc}: " + " | ".join(log.strip().splitlines()[-3:])
        run.load_after = load()
        return run
    tj = json.loads((out / "train.json").read_text())
    run.steps, run.epochs, run.stopped_by = tj.get("steps"), tj.get("epochs"), tj.get("stopped_by")
    metrics_path = ck / "METRICS.json"
    t1 = time.monotonic()
    argv = [sys.executable, str(REPO / "evaluate.py"), "--weights", str(weights), "--data", str(data),
            "--out", str(metrics_path)]
    if device != "cpu":
        argv += ["--device", device]
    ev = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    run.eval_seconds = round(time.monotonic() - t1, 2)
    run.load_after = load()
    (ck / "eval.log").write_text(ev.stdout + ev.stderr)
    if ev.returncode != 0 or not metrics_path.is_file():
        run.why = f"evaluate.py exit {ev.returncode}: " + " | ".join((ev.stdout + ev.stderr).strip().splitlines()[-3:])
        return run
    run.metrics = json.loads(metrics_path.read_text())
    run.score = run.metrics.get(score_key)
    run.digest = digest(weights)
    run.ok = True
    return run


def spread(values: list[float]) -> dict[str, float | int | None]:
    vals = [v for v in values if v is not None]
    return {"n": len(vals), "mean": round(statistics.fmean(vals), 4) if vals else None,
            "sd": round(statistics.stdev(vals), 4) if len(vals) > 1 else None,
            "min": round(min(vals), 4) if vals else None, "max": round(max(vals), 4) if vals else None}


def split_error(metrics: dict[str, Any]) -> dict[str, Any]:
    """Per-class binomial standard error of the recall on this test split."""
    rows = {}
    for name, row in (metrics.get("classes") or {}).items():
        n, r = row.get("support") or 0, row.get("recall")
        if n > 0 and isinstance(r, (int, float)):
            rows[name] = {"support": n, "recall": r, "se": round(math.sqrt(r * (1 - r) / n), 4)}
    live = [v["se"] for v in rows.values() if 0 < v["recall"] < 1]
    supports = [v["support"] for v in rows.values()]
    return {"classes": len(rows), "min_support": min(supports) if supports else None,
            "median_support": statistics.median(supports) if supports else None,
            "worst_case_se_at_min_support": round(0.5 / math.sqrt(min(supports)), 4) if supports else None,
            "mean_se_live_classes": round(statistics.fmean(live), 4) if live else None, "per_class": rows}


def table(runs: list[Run]) -> str:
    lines = ["| run | seed | step budget | steps | epochs | stopped by | train s | eval s | load | weighted_f1 "
             "| weights |", "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in runs:
        score = f"{r.score:.4f}" if r.score is not None else f"FAILED: {r.why[:60]}"
        lines.append(f"| {r.label} | {r.seed} | {r.max_steps or '-'} | {r.steps} | {r.epochs} | {r.stopped_by} "
                     f"| {r.train_seconds:.0f} | {r.eval_seconds:.0f} | {r.load_before:.1f}-{r.load_after:.1f} "
                     f"| {score} | {r.digest[:12]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="tiny", choices=("tiny", "demo", "full"))
    ap.add_argument("--data", type=Path, default=None, help="a prepared data folder (default: built under --out)")
    ap.add_argument("--steps", type=int, default=200, help="the step budget of the step-budget runs")
    ap.add_argument("--step-wall", type=float, default=900.0,
                    help="wall-clock budget of a step-budget run (the outer limit; generous on a busy machine)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 at the step budget")
    ap.add_argument("--clock-only", action="store_true",
                    help="only the wall-clock runs (the step-budget figures come from bench_calibration.py)")
    ap.add_argument("--clock-runs", type=int, default=3, help="seed-0 runs under the wall clock only")
    ap.add_argument("--clock-budget", type=float, default=60.0, help="wall-clock budget of those runs, s")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "noise")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    data = ensure_data(args.scale, 0, args.out, args.data)
    source = (REPO / "train.py").read_text()
    t0 = time.monotonic()
    print(f"bench_noise: scale={args.scale} steps={args.steps} seeds={args.seeds} clock_runs={args.clock_runs} "
          f"clock_budget={args.clock_budget:g}s device={args.device} cpus={os.cpu_count()} load={load()}", flush=True)

    def go(label: str, seed: int, budget: float, steps: int | None) -> Run:
        r = run_once(source, label, data, args.out, seed, budget, steps, args.device)
        print(f"  {label} seed={seed} steps={r.steps} stopped_by={r.stopped_by} score={r.score} "
              f"train={r.train_seconds:.0f}s eval={r.eval_seconds:.0f}s load={r.load_before}-{r.load_after} "
              f"{r.why}", flush=True)
        return r

    same: list[Run] = []
    seeds: list[Run] = []
    if not args.clock_only:
        same = [go("steps-a", 0, args.step_wall, args.steps), go("steps-b", 0, args.step_wall, args.steps)]
        seeds = [same[0]] + [go("steps", s, args.step_wall, args.steps) for s in range(1, args.seeds)]
    clock = [go(f"clock-{i + 1}", 0, args.clock_budget, None) for i in range(args.clock_runs)]
    runs = same + seeds[1:] + clock
    if not same:  # no step-budget pair: report the clock runs only
        same = [Run("steps-a", 0, None, 0.0), Run("steps-b", 0, None, 0.0)]

    identical = same[0].ok and same[1].ok and same[0].digest == same[1].digest
    result: dict[str, Any] = {
        "config": {k: str(v) for k, v in vars(args).items()}, "load_end": load(),
        "wall_seconds": round(time.monotonic() - t0, 1),
        "determinism": {"identical_weights": identical, "scores": [same[0].score, same[1].score],
                        "digests": [same[0].digest, same[1].digest]},
        "seed_spread_step_budget": spread([r.score for r in seeds if r.ok]),
        "clock_spread_same_seed": spread([r.score for r in clock if r.ok]),
        "clock_steps": [r.steps for r in clock],
        "runs": [r.brief() for r in runs],
    }
    if same[0].metrics:
        result["test_split"] = split_error(same[0].metrics)
    (args.out / "noise.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")

    print()
    print(table(runs))
    print()
    print(f"same seed, same {args.steps} steps, twice: weights "
          f"{'IDENTICAL' if identical else 'DIFFERENT'} (tensor sha256 {same[0].digest[:12]} / "
          f"{same[1].digest[:12]}), weighted_f1 {same[0].score} / {same[1].score}")
    s = result["seed_spread_step_budget"]
    print(f"seed spread at {args.steps} steps (seeds 0..{args.seeds - 1}): sd {s['sd']} "
          f"[{s['min']}, {s['max']}] over {s['n']} runs")
    c = result["clock_spread_same_seed"]
    print(f"same seed 0 under the wall clock only ({args.clock_budget:g} s): steps {result['clock_steps']}, "
          f"weighted_f1 sd {c['sd']} [{c['min']}, {c['max']}] over {c['n']} runs")
    if "test_split" in result:
        t = result["test_split"]
        print(f"test split: {t['classes']} classes with support, min support {t['min_support']}, median "
              f"{t['median_support']}; worst-case binomial se of a recall at the min support "
              f"{t['worst_case_se_at_min_support']}; mean se over classes with 0 < recall < 1: "
              f"{t['mean_se_live_classes']}")
    print(f"load average at the end: {load()}; wall {result['wall_seconds']} s; details {args.out / 'noise.json'}")
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
