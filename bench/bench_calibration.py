"""Calibrate the keep/discard gate with real runs: A/A no-ops and planted effects (issue 15, part 5).

    .venv/bin/python bench/bench_calibration.py                       # demo data, this CPU
    .venv/bin/python bench/bench_calibration.py --scale full --require-gpu   # a lent GPU

Every judgement is the loop's own procedure on real train.py + evaluate.py runs: the candidate
trains and is scored under the same budget as the baseline, its METRICS.json objects go to
``looper.core.keep.gate.decide`` (the real gate, whatever statistics it holds today) against the
baseline's, and while the gate answers INCONCLUSIVE asking for reruns, one more seed is run, up
to ``--reruns`` (the loop's ``noise_reruns``). Then:

(a) A/A: a no-op change (dead code appended to train.py) judged ``--aa`` times against the
    baseline, each judgement with its own fresh seeds -> false-keep and false-discard rates;
    plus, with ``--paired``, one judgement on the loop's own seeds (the baseline's), where a
    deterministic train.py must reproduce the baseline's weights exactly;
(b) planted effects: train.py with the learning rate ``--lr-factor`` times too low, judged
    ``--planted`` times against the baseline (detected = DISCARD), and the repair (the
    unchanged train.py) judged against the degraded one as the current best and baseline
    (detected = KEEP) -> detection rates;
(c) cost: seeds and wall seconds per decision.

The baseline runs seeds 0..reruns (noise_reruns + 1, at least 3), like the loop's. With
``--steps N`` every run has the step budget LOOPER_MAX_STEPS=N (the wall clock, ``--budget``,
is still enforced from outside); ``--steps 0`` runs under the wall clock only (the old way).
Results go to <out>/calibration.json; a summary table is printed.

Every judgement here runs its own seeds (hours for 10 of each kind on a CPU). For thousands of
judgements from one pool of real runs, see bench/calibration_pool.py and
bench/calibration_resample.py (what bench/RESULTS.md reports for the demo data).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))
from bench_noise import REPO, Run, ensure_data, finished_run, load, run_once  # noqa: E402

from looper.core.keep import gate as core_gate  # noqa: E402

STEPS = {"tiny": 200, "demo": 400, "full": 3000}  # where the baseline finds classes (bench/RESULTS.md)
BUDGET = {"tiny": 300.0, "demo": 300.0, "full": 900.0}  # the outer wall-clock limit of a step-budget run, s

NOOP = '''

def _calibration_noop() -> int:  # dead code: never called (an A/A change for bench_calibration.py)
    return 0
'''


def mean_metrics(runs: list[dict]) -> dict:
    try:
        from looper.night.measure import mean_metrics as mm
    except ImportError:
        from looper.night.loop import mean_metrics as mm
    return mm(runs)


def degrade(source: str, factor: float) -> str:
    """train.py with its LR0 divided by ``factor`` (the planted effect)."""
    m = re.search(r"^LR0 = ([0-9.eE+-]+)", source, re.M)
    if not m:
        sys.exit("bench_calibration: train.py has no 'LR0 = <number>' line to degrade")
    lr = float(m.group(1))
    return source[:m.start(1)] + repr(round(lr / factor, 8)) + source[m.end(1):]


def build(cls: type, **values: Any) -> Any:
    """Construct a gate dataclass with the values it has fields for (the gate's inputs may grow)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.data = ensure_data(args.scale, 0, args.out, args.data)
        self.cache: dict[tuple[str, int], Run] = {}
        self.running: dict[tuple[str, int], threading.Event] = {}
        self.lock = threading.Lock()
        self.cfg = build(core_gate.GateConfig, score=args.score, max_class_drop=args.max_class_drop,
                         alpha=args.alpha)

    def run(self, label: str, source: str, seed: int) -> Run:
        """One real run per (label, seed), shared by every judgement that needs it."""
        key = (label, seed)
        with self.lock:
            done = self.running.get(key)
            mine = done is None
            if mine:
                done = self.running[key] = threading.Event()
        if not mine:
            done.wait()
            if key not in self.cache:
                raise SystemExit(f"bench_calibration: a real run failed ({label} seed {seed})")
            return self.cache[key]
        try:
            r = finished_run(label, self.args.out, seed, self.args.budget, self.args.steps or None,
                             self.args.score) if self.args.resume else None
            r = r or run_once(source, label, self.data, self.args.out, seed, self.args.budget,
                         self.args.steps or None, self.args.device, self.args.score)
            print(f"    run {label} seed={seed}: steps={r.steps} ({r.stopped_by}) {self.args.score}={r.score} "
                  f"train {r.train_seconds:.0f}s eval {r.eval_seconds:.0f}s load {r.load_before}-{r.load_after}"
                  + (f" FAILED {r.why}" if not r.ok else ""), flush=True)
            if not r.ok:
                raise SystemExit(f"bench_calibration: a real run failed ({label} seed {seed}): {r.why}")
            self.cache[key] = r
        finally:
            done.set()
        return self.cache[key]

    def many(self, jobs: list[tuple]) -> list[Any]:
        """Run ``(function, *args)`` jobs ``--jobs`` at a time; results in order."""
        with ThreadPoolExecutor(max_workers=max(1, self.args.jobs)) as pool:
            return list(pool.map(lambda job: job[0](*job[1:]), jobs))

    def reference(self, label: str, source: str, parallel: bool = True) -> dict[str, Any]:
        """The loop's baseline measurement: seeds 0..reruns of ``source``."""
        seeds = range(self.args.reruns + 1)
        runs = (self.many([(self.run, label, source, s) for s in seeds]) if parallel
                else [self.run(label, source, s) for s in seeds])
        scores = [float(r.score) for r in runs]  # type: ignore[arg-type]
        return {"label": label, "runs": runs, "metrics": [r.metrics for r in runs], "scores": scores,
                "mean": mean_metrics([r.metrics for r in runs]),  # type: ignore[misc]
                "sigma": statistics.stdev(scores) if len(scores) > 1 else None}

    def judge(self, label: str, source: str, seeds: list[int], best: dict[str, Any],
              baseline: dict[str, Any]) -> dict[str, Any]:
        """One judgement as the loop makes it: run, decide, rerun while the gate asks for it."""
        candidate: list[Run] = []
        t0 = time.monotonic()
        decision = None
        for i, seed in enumerate(seeds):
            candidate.append(self.run(label, source, seed))
            inp = build(core_gate.GateInput, candidate=[r.metrics for r in candidate], best=best["metrics"],
                        baseline=baseline["mean"], baseline_source="tag-start",
                        candidate_simpler=False, baseline_runs=baseline["metrics"],
                        noise={"sigma": baseline["sigma"], "scores": baseline["scores"]})
            decision = core_gate.decide(inp, self.cfg, len(seeds) - 1 - i)
            if decision.outcome.value != "inconclusive" or not decision.needs_reruns:
                break
        assert decision is not None
        reasons = list(decision.verdict.blocking) if hasattr(decision.verdict, "blocking") else []
        metrics = decision.verdict.metrics if hasattr(decision.verdict, "metrics") else {}
        out = {"label": label, "outcome": decision.outcome.value, "seeds": [r.seed for r in candidate],
               "scores": [r.score for r in candidate], "wall_seconds": round(time.monotonic() - t0, 1),
               "run_seconds": round(sum(r.train_seconds + r.eval_seconds for r in candidate), 1),
               "digests": [r.digest[:16] for r in candidate], "reasons": reasons[:6],
               "summary": metrics.get("summary"), "notes": (metrics.get("notes") or [])[:4]}
        print(f"  judgement {label} seeds={out['seeds']}: {out['outcome'].upper()} -- "
              f"{out['summary']}; {'; '.join(reasons[:3])}", flush=True)
        return out


def rate(judgements: list[dict[str, Any]], outcome: str) -> str:
    k = sum(j["outcome"] == outcome for j in judgements)
    return f"{k}/{len(judgements)}" + (f" ({100.0 * k / len(judgements):.0f} %)" if judgements else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="demo", choices=("tiny", "demo", "full"))
    ap.add_argument("--data", type=Path, default=None, help="a prepared data folder (default: built under --out)")
    ap.add_argument("--steps", type=int, default=None,
                    help="step budget per run (0: wall clock only; default per scale: " + str(STEPS) + ")")
    ap.add_argument("--budget", type=float, default=None,
                    help="wall-clock budget per run, s, enforced outside (default per scale: " + str(BUDGET) + ")")
    ap.add_argument("--aa", type=int, default=10, help="A/A judgements (fresh seeds each)")
    ap.add_argument("--aa-pool", type=int, default=0,
                    help="draw the A/A judgements' seeds in rotation from this many fresh seeds (0: every "
                         "judgement its own seeds); cheaper, but judgements that share a seed are correlated")
    ap.add_argument("--paired", action="store_true", help="one more A/A judgement on the baseline's own seeds")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the runs an earlier invocation finished under --out (same label, seed, steps)")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (step-budget runs do not depend on load)")
    ap.add_argument("--planted", type=int, default=3, help="judgements of the degraded and of the repair each")
    ap.add_argument("--no-repair", dest="repair", action="store_false",
                    help="skip the repair judgements (and the degraded train.py's own baseline runs)")
    ap.add_argument("--lr-factor", type=float, default=6.0, help="the planted effect: LR0 divided by this")
    ap.add_argument("--reruns", type=int, default=2, help="the loop's noise_reruns (baseline: reruns + 1 seeds)")
    ap.add_argument("--score", default="weighted_f1")
    ap.add_argument("--max-class-drop", type=float, default=0.05)
    ap.add_argument("--alpha", type=float, default=0.05, help="[gate] alpha, when the gate has it")
    ap.add_argument("--device", default=None, help="cpu | 0 | cuda (default: 0 with --require-gpu, else cpu)")
    ap.add_argument("--require-gpu", action="store_true", help="refuse to run without a CUDA GPU")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "calibration")
    args = ap.parse_args(argv)
    args.steps = STEPS[args.scale] if args.steps is None else args.steps
    args.budget = BUDGET[args.scale] if args.budget is None else args.budget
    if args.require_gpu:
        import torch

        if not torch.cuda.is_available():
            print("bench_calibration: --require-gpu but torch sees no CUDA GPU", file=sys.stderr)
            return 2
    args.device = args.device or ("0" if args.require_gpu else "cpu")
    if args.reruns < 2:
        print("bench_calibration: note: --reruns < 2 measures the baseline with fewer than 3 seeds", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    b = Bench(args)
    t0 = time.monotonic()
    print(f"bench_calibration: scale={args.scale} steps={args.steps or 'none (wall clock)'} "
          f"budget={args.budget:g}s aa={args.aa} planted={args.planted} lr/{args.lr_factor:g} "
          f"reruns={args.reruns} device={args.device} load={load()} gate={core_gate.__name__}.decide "
          f"config={b.cfg}", flush=True)

    source = (REPO / "train.py").read_text()
    noop, degraded = source + NOOP, degrade(source, args.lr_factor)
    n = args.reruns + 1
    print("baseline:", flush=True)
    base = b.reference("baseline", source)
    print(f"  baseline {args.score} {[round(s, 4) for s in base['scores']]} sigma "
          f"{base['sigma'] if base['sigma'] is None else round(base['sigma'], 4)}", flush=True)

    print(f"A/A (no-op, fresh seeds), planted (LR0 / {args.lr_factor:g} vs the baseline) and the degraded "
          "train.py's own baseline, all at once:", flush=True)
    if args.aa_pool:
        pool = [1000 + i for i in range(args.aa_pool)]
        aa_jobs = [(b.judge, "aa", noop, [pool[(j + r) % len(pool)] for r in range(n)], base, base)
                   for j in range(args.aa)]
    else:
        aa_jobs = [(b.judge, "aa", noop, [1000 + 100 * j + r for r in range(n)], base, base)
                   for j in range(args.aa)]
    worse_jobs = [(b.judge, f"degraded{j}", degraded, [2000 + 100 * j + r for r in range(n)], base, base)
                  for j in range(args.planted)]
    ref_jobs = [(b.reference, "degraded", degraded, False)] if args.planted and args.repair else []
    paired_jobs = [(b.judge, "aa-paired", noop, list(range(n)), base, base)] if args.paired else []
    done = b.many(worse_jobs + paired_jobs + aa_jobs + ref_jobs)  # the few planted ones first
    worse, done = done[:len(worse_jobs)], done[len(worse_jobs):]
    paired, done = (done[0] if paired_jobs else None), done[len(paired_jobs):]
    aa, done = done[:len(aa_jobs)], done[len(aa_jobs):]
    deg = done[0] if ref_jobs else None
    if paired is not None:
        paired["same_weights_as_baseline"] = [
            b.cache[("aa-paired", s)].digest == b.cache[("baseline", s)].digest for s in paired["seeds"]]

    better: list[dict[str, Any]] = []
    if deg is not None:
        print(f"planted: the repair judged against the degraded train.py (its {n} seeds as best and baseline):",
              flush=True)
        better = b.many([(b.judge, f"repair{j}", source, [3000 + 100 * j + r for r in range(n)], deg, deg)
                         for j in range(args.planted)])

    result = {
        "config": {k: str(v) for k, v in vars(args).items()}, "gate_config": str(b.cfg),
        "wall_seconds": round(time.monotonic() - t0, 1), "load_end": load(),
        "baseline": {"scores": base["scores"], "sigma": base["sigma"],
                     "steps": [r.steps for r in base["runs"]], "digests": [r.digest[:16] for r in base["runs"]]},
        "aa": aa, "aa_paired": paired, "degraded": worse, "repair": better,
        "runs": [r.brief() for r in b.cache.values()],
    }
    (args.out / "calibration.json").write_text(json.dumps(result, indent=1, sort_keys=True, default=str) + "\n")

    print()
    print("| judgement | n | keep | discard | inconclusive | error | seeds per decision | wall s per decision |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, js in (("A/A no-op (fresh seeds)", aa), ("A/A no-op (baseline's seeds)", [paired] if paired else []),
                     (f"LR0 / {args.lr_factor:g} vs baseline", worse), ("repair vs degraded", better)):
        if not js:
            continue
        seeds = statistics.fmean(len(j["seeds"]) for j in js)
        wall = statistics.fmean(j["run_seconds"] for j in js)
        print(f"| {name} | {len(js)} | {rate(js, 'keep')} | {rate(js, 'discard')} | {rate(js, 'inconclusive')} "
              f"| {rate(js, 'error')} | {seeds:.1f} | {wall:.0f} |")
    print()
    print(f"false keep {rate(aa, 'keep')}, false discard {rate(aa, 'discard')} (goal <= 5 % each); "
          f"planted detected: degraded discarded {rate(worse, 'discard')}, repair kept {rate(better, 'keep')} "
          f"(goal >= 80 %)")
    if paired:
        print(f"paired A/A: same weights as the baseline per seed: {paired['same_weights_as_baseline']}; "
              f"verdict {paired['outcome']}")
    spread = [r.score for r in b.cache.values() if r.label == "baseline" or (r.label.startswith("aa") and r.label != "aa-paired")]
    if len(spread) > 1:
        print(f"A/A spread of {args.score} over every run of the unchanged code (baseline + no-ops, "
              f"{len(spread)} runs): sd {statistics.stdev(spread):.4f}, range [{min(spread):.4f}, {max(spread):.4f}]")
    print(f"runs {len(b.cache)}, wall {result['wall_seconds']} s, load average at the end {load()}; "
          f"details {args.out / 'calibration.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
