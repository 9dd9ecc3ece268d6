"""The gate's decisions under intensification on synthetic scores: A/A error rates, power, seeds spent.

Pure: the real looper.core.keep.gate.decide and looper.core.keep.race (schedule, seeds, the look's share of
alpha, the stopping rule with its 2-seed discard), no training. One row per (baseline seeds, cap,
procedure, noise); every row ``--draws`` decisions per effect.

score(seed k) = 0.5 + effect + sqrt(rho) s_k + sqrt(1 - rho) e: s_k shared by both sides of a pair,
e the run's own; s_k and e each have sd 1, so ``effect`` is in seed sds. Noise:

- ``normal``: s_k and e standard normal;
- ``pool``: s_k and e drawn from the real seed scores of the unchanged train.py in ``--pool-json``
  (bench/calibration/*-pool.json, labels baseline and noop), standardised: the real shape, its low
  tail included (about 1 seed in 6 lands 2 to 3 sds below the rest at 150 steps).

A/A rows use rho 0 (the same code on other seeds shares nothing with the best's seeds); effects use
``--rho``. Procedures: ``pooled`` (the gate told no seeds: the pooled t alone) and ``paired`` (seeds
known: the paired t where its band is narrower, each test at half the look's alpha). The best gains the
seeds it never ran; "runs" counts the candidate's and the best's gained runs.

    python bench/sim_paired.py --draws 1000 --configs 3:2,3:4,3:8 --noise normal,pool
    python bench/sim_paired.py --draws 1000 --configs 3:2,3:4,5:4,3:8 --noise normal,pool \
        --md bench/calibration/sim-paired.md --json bench/calibration/sim-paired.json
    python bench/sim_paired.py --draws 1000 --configs 3:2,3:4,3:8 --noise pool --effects '' --discard-seeds 1 \
        --md bench/calibration/sim-paired-discard1.md     # the rule before: a discard on one seed
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from looper.core.keep import race as core_race  # noqa: E402
from looper.core.keep.gate import GateConfig, GateInput, decide  # noqa: E402

CLASSES = {"a": {"tp": 5, "fp": 1, "fn": 5, "support": 10, "recall": 0.5}}  # never moves: no class gate fires
POOL = HERE / "calibration" / "pretrained-150-pool.json"


def metrics(score: float) -> dict:
    return {"pages": 1, "predictions": 10, "weighted_f1": score, "classes": CLASSES}


def pool_noise(path: Path) -> list[float]:
    """The unchanged train.py's seed scores in a pool file, standardised (mean 0, sd 1)."""
    runs = json.loads(path.read_text())
    scores = [r["weighted_f1"] for r in runs if r["label"] in ("baseline", "noop")]
    if len(scores) < 5:
        raise SystemExit(f"sim_paired: {path} holds {len(scores)} unchanged runs; 5 at least are needed")
    mu, sd = statistics.mean(scores), statistics.stdev(scores)
    return [(x - mu) / sd for x in scores]


def rng_draw(rng: random.Random, noise: str, emp: list[float]) -> Callable[[], float]:
    """One noise draw: standard normal, or a standardised real seed score (``pool``)."""
    if noise == "normal":
        return lambda: rng.gauss(0.0, 1.0)
    return lambda: rng.choice(emp)


def judge(rng: random.Random, draw: Callable[[], float], rho: float, effect: float, cap: int, n_base: int,
          paired: bool, discard_seeds: int = core_race.DISCARD_SEEDS) -> tuple[str, int]:
    """One decision as the loop makes it (looper.night.race.measure_and_gate): (outcome, runs it took)."""
    shared: dict[int, float] = {}

    def score(k: int, eff: float) -> float:
        if k not in shared:
            shared[k] = draw()
        return 0.5 + eff + rho ** 0.5 * shared[k] + (1 - rho) ** 0.5 * draw()

    base = {k: score(k, 0.0) for k in range(n_base)}
    cand: dict[int, float] = {}
    race = core_race.Race(cap, 0, discard_seeds=discard_seeds)
    while True:
        batch = race.batch(list(base))
        for k in batch.candidate:
            if k in batch.best:  # the best gains the seed first
                base[k] = score(k, 0.0)
            cand[k] = score(k, effect)
            race.ran(k)
        ks, bs = list(cand), list(base)
        inp = GateInput([metrics(cand[k]) for k in ks], [], metrics(0.5), "tag-start",
                        baseline_runs=[metrics(base[k]) for k in bs],
                        candidate_seeds=ks if paired else [], baseline_seeds=bs if paired else [])
        d = decide(inp, GateConfig(), race.reruns_left, looks=race.looks, share=race.share)
        if race.look(d.outcome.value, d.needs_reruns > 0).stops:
            return d.outcome.value, len(ks) + len(base) - n_base


def row(rng: random.Random, draw: Callable[[], float], rho: float, effect: float, cap: int, n_base: int,
        paired: bool, draws: int, discard_seeds: int = core_race.DISCARD_SEEDS) -> dict[str, float]:
    out = [judge(rng, draw, rho, effect, cap, n_base, paired, discard_seeds) for _ in range(draws)]
    return {"keep": sum(o == "keep" for o, _ in out) / draws, "discard": sum(o == "discard" for o, _ in out) / draws,
            "runs": sum(r for _, r in out) / draws}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--configs", default="3:2,3:4,3:8", help="BASELINE_SEEDS:CAP, comma separated")
    ap.add_argument("--noise", default="normal,pool", help="normal | pool, comma separated")
    ap.add_argument("--pool-json", type=Path, default=POOL)
    ap.add_argument("--procedures", default="pooled,paired")
    ap.add_argument("--effects", default="1,2,3", help="planted effects in seed sds")
    ap.add_argument("--rho", type=float, default=0.06, help="pairing correlation of a planted change "
                    "(0.06: LR0 0.003 from the pretrained start, bench/RESULTS.md)")
    ap.add_argument("--discard-seeds", type=int, default=core_race.DISCARD_SEEDS,
                    help="the seeds a discard stands on (1: the rule before this wave's, a discard on one seed)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--md", type=Path, default=None, help="also write the table here")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    effects = [float(e) for e in args.effects.split(",") if e]
    emp = pool_noise(args.pool_json) if "pool" in args.noise.split(",") else []
    cols = ["noise", "baseline seeds / cap", "procedure", "A/A false keep", "A/A false discard", "A/A runs",
            *(f"{e:g} sd kept (runs)" for e in effects)]
    head = "| " + " | ".join(cols) + " |"
    title = (f"sim_paired: {args.draws} decisions a cell, seed {args.seed}, a discard stands on {args.discard_seeds} "
             f"seed(s), planted effects at pairing correlation {args.rho:g}")
    lines = [title + (f"; pool noise from {args.pool_json.name} ({len(emp)} runs)" if emp else ""), "", head, "| " + " | ".join(["---"] * len(cols)) + " |"]
    print("\n".join(lines), flush=True)
    results = []
    t0 = time.monotonic()
    for noise in args.noise.split(","):
        for cfg in args.configs.split(","):
            n_base, cap = (int(x) for x in cfg.split(":"))
            for proc in args.procedures.split(","):
                rng = random.Random(args.seed)
                draw = rng_draw(rng, noise, emp)
                paired = proc == "paired"
                aa = row(rng, draw, 0.0, 0.0, cap, n_base, paired, args.draws, args.discard_seeds)
                hits = {e: row(rng, draw, args.rho, e, cap, n_base, paired, args.draws, args.discard_seeds)
                        for e in effects}
                cells = [noise, f"{n_base} / {cap}", proc, f"{aa['keep']:.1%}", f"{aa['discard']:.1%}", f"{aa['runs']:.1f}",
                         *(f"{h['keep']:.0%} ({h['runs']:.1f})" for h in hits.values())]
                line = "| " + " | ".join(cells) + " |"
                print(line, flush=True)
                lines.append(line)
                results.append({"noise": noise, "baseline_seeds": n_base, "cap": cap, "procedure": proc, "aa": aa,
                                "effects": {f"{e:g}": h for e, h in hits.items()}})
    lines.append(f"\n({time.monotonic() - t0:.0f} s)")
    if args.md:
        args.md.write_text("\n".join(lines) + "\n")
    if args.json:
        args.json.write_text(json.dumps({"draws": args.draws, "seed": args.seed, "rho": args.rho,
                                         "discard_seeds": args.discard_seeds,
                                         "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
