"""Judge a pool of real runs with the real gate, many times over (issue 15, part 5).

    .venv/bin/python bench/calibration_pool.py --scale demo --steps 200 --seeds 20 --degraded 12 --jobs 2
    .venv/bin/python bench/calibration_resample.py --pool bench/out/calibration-pool
    .venv/bin/python bench/calibration_resample.py --pool bench/out/calibration-pretrained --procedures pooled,paired \
        --caps 1,3,5 --draws 1500 --shift-to 1,2 --scale-to 1,2 --scale-from lrlow --jobs 2

With ``--procedures pooled,paired`` (a pool made with calibration_pool.py ``--variant``) every row is judged
by both the last wave's pooled procedure and this wave's paired intensification (the real
looper.core.keep.race and gate.decide, as looper.night.race.measure_and_gate calls them; the draws and who
plays what: bench/calibration_procedures.py). What follows describes the last wave's table (no --procedures).

The pool (bench/calibration_pool.py) holds real train.py + evaluate.py runs under one step budget:
``baseline`` (the unchanged train.py), ``noop`` (train.py plus dead code) and ``degraded`` (LR0 too
low), each seed its own run. Every judgement here is the loop's procedure on those runs: a
baseline of ``--baseline-seeds`` runs, then candidate runs one seed at a time, handed with their
METRICS.json to ``looper.core.keep.gate.decide`` (the real gate) until it stops asking for seeds or
``--reruns`` are spent. The runs of one judgement are distinct seeds, drawn at random from the pool:

- A/A: baseline from ``baseline``, candidate from ``noop`` -> false-keep and false-discard rates;
- planted: baseline from ``baseline``, candidate from ``degraded`` -> discard rate (detection);
- repair: baseline (and current best) from ``degraded``, candidate from ``baseline`` + ``noop``
  (the unchanged code) -> keep rate (detection).

Why resample: a judgement costs 4 to 6 real runs; 10 independent judgements of each kind are
hours on this CPU, while a pool of a few tens of seeds supports thousands of draws. Draws share
runs, so they are not independent: the rate over ``--draws`` draws is a point estimate for this
pool, and its uncertainty is that of the pool, stated as an exact (Clopper-Pearson) interval for
the number of **disjoint** judgements the pool holds (every run used once), which is honest and
wide. ``--check-pairs`` also reports whether the no-op reproduced the baseline's weights on the
same seeds (pool runs ``noop-s0..2`` when present).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(1, str(HERE))
from scipy import stats as st  # noqa: E402

from looper.core.keep import gate as core_gate  # noqa: E402
from looper.core.keep import score as core_score  # noqa: E402
from looper.core.verdicts.verdict import Outcome  # noqa: E402
from looper.night.measure import mean_metrics  # noqa: E402


def load_pool(root: Path, score: str) -> dict[str, list[dict[str, Any]]]:
    """label -> runs (seed, metrics, steps, seconds), from ``root/runs/<label>-s<seed>``."""
    pool: dict[str, list[dict[str, Any]]] = {}
    for ck in sorted((root / "runs").glob("*-s*")):
        label, _, seed = ck.name.rpartition("-s")
        metrics_path, tj_path = ck / "METRICS.json", ck / "out" / "train.json"
        if not (metrics_path.is_file() and tj_path.is_file()):
            continue
        metrics, tj = json.loads(metrics_path.read_text()), json.loads(tj_path.read_text())
        pool.setdefault(label, []).append({"seed": int(seed), "metrics": metrics, "score": metrics.get(score),
                                           "steps": tj.get("steps"), "max_steps": tj.get("max_steps"),
                                           "seconds": tj.get("seconds")})
    return pool


def load_scores(path: Path, score: str) -> dict[str, list[dict[str, Any]]]:
    """label -> runs from a --pool-json file (scores only). Each run's METRICS.json is its score beside one
    class that every run finds alike (the gate wants per-class figures; this one never moves, so no class
    gate fires and the score test alone decides)."""
    same = {"all": {"tp": 10, "fp": 0, "fn": 0, "support": 10, "precision": 1.0, "recall": 1.0, "f1": 1.0,
                    "count_error": 0.0}}
    pool: dict[str, list[dict[str, Any]]] = {}
    for r in json.loads(path.read_text()):
        pool.setdefault(r["label"], []).append({"seed": int(r["seed"]), "metrics": {score: r[score], "classes": same},
                                                "score": r[score], "steps": r.get("steps"), "max_steps": None,
                                                "seconds": r.get("train_seconds")})
    return pool


def pool_rows(pool: dict[str, list[dict[str, Any]]], score: str) -> list[dict[str, Any]]:
    """One summary row per run of the pool (label, seed order): what a reader needs to redo the tables."""
    rows = []
    for label in sorted(pool):
        for r in sorted(pool[label], key=lambda r: r["seed"]):
            classes = r["metrics"].get("classes") or {}
            rows.append({"label": label, "seed": r["seed"], score: r["score"],
                         "classes_found": sum(1 for c in classes.values() if (c.get("recall") or 0) > 0),
                         "steps": r["steps"], "train_seconds": r["seconds"]})
    return rows


def judge(cfg: core_gate.GateConfig, baseline: list[dict], best: list[dict], candidates: list[dict]) -> tuple[str, int]:
    """The loop's judgement: one candidate seed, then one more per inconclusive look asking for it."""
    base_metrics = [r["metrics"] for r in baseline]
    reference = mean_metrics(base_metrics)
    d = None
    for i in range(len(candidates)):
        inp = core_gate.GateInput(candidate=[r["metrics"] for r in candidates[:i + 1]],
                                  best=[r["metrics"] for r in best], baseline=reference,
                                  baseline_source="tag-start", baseline_runs=base_metrics)
        d = core_gate.decide(inp, cfg, len(candidates) - 1 - i)
        if d.outcome is not Outcome.INCONCLUSIVE or d.needs_reruns <= 0:
            return d.outcome.value, i + 1
    assert d is not None
    return d.outcome.value, len(candidates)


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(st.beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(st.beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def simulate(kind: str, base_pool: list[dict], cand_pool: list[dict], draws: int, n_base: int, looks: int,
             cfg: core_gate.GateConfig, rng: random.Random) -> dict[str, Any]:
    counts: dict[str, int] = {}
    seeds_used: list[int] = []
    ids = {id(r) for r in base_pool}
    if any(id(r) in ids for r in cand_pool):  # by construction two labels of the pool: never the same run
        raise ValueError(f"{kind}: the reference and candidate pools share runs")
    if len(base_pool) < n_base or len(cand_pool) < looks:
        return {"kind": kind, "draws": 0, "counts": {}, "seeds_per_decision": 0.0, "disjoint_judgements": 0,
                "skipped": f"the pool is too small: {len(base_pool)} reference and {len(cand_pool)} candidate runs"}
    for _ in range(draws):
        base = rng.sample(base_pool, n_base)
        cand = rng.sample(cand_pool, looks)
        outcome, used = judge(cfg, base, base, cand)
        counts[outcome] = counts.get(outcome, 0) + 1
        seeds_used.append(used)
    disjoint = min(len(base_pool) // n_base, len(cand_pool) // looks)
    return {"kind": kind, "draws": draws, "counts": counts, "seeds_per_decision": statistics.fmean(seeds_used),
            "disjoint_judgements": disjoint}


def effects(unchanged: list[dict], changed: dict[str, list[dict]]) -> tuple[float, dict[str, dict[str, Any]]]:
    """The seed sd of the unchanged train.py, and per changed label its effect (mean over the seeds both
    ran of changed - unchanged, also in seed sds), the pairing correlation and the sd of the paired
    differences."""
    sd = statistics.stdev(r["score"] for r in unchanged)
    u = {r["seed"]: r["score"] for r in unchanged}
    out: dict[str, dict[str, Any]] = {}
    for label, runs in changed.items():
        pairs = [(u[r["seed"]], r["score"]) for r in runs if r["seed"] in u]
        row: dict[str, Any] = {"runs": len(runs), "mean": statistics.fmean(r["score"] for r in runs),
                               "pairs": len(pairs)}
        if len(pairs) >= 2:
            diffs = [c - b for b, c in pairs]
            row["effect"] = statistics.fmean(diffs)
            row["effect_sds"] = row["effect"] / sd
            row["sd_diff"] = statistics.stdev(diffs)
            # what pairing buys: a pooled difference of two independent runs has variance 2 sd^2, a paired one
            # sd_diff^2, so one pair is worth this many unpaired seeds a side (1 / (1 - rho) at equal variances)
            row["pair_worth_seeds"] = 2 * sd**2 / row["sd_diff"] ** 2 if row["sd_diff"] > 0 else None
            if len(pairs) >= 3:
                row["correlation"] = float(st.pearsonr([b for b, _ in pairs], [c for _, c in pairs]).statistic)
        out[label] = row
    return sd, out


def run_procedures(args: argparse.Namespace, pool: dict[str, list[dict]]) -> dict[str, Any]:
    """Both procedures (bench/calibration_procedures.py) on one pool: A/A, the real planted changes and,
    with --scale-to, score-only planted effects of chosen sizes in seed sds."""
    import time

    import calibration_procedures as cp

    cfg = core_gate.GateConfig(score=args.score, max_class_drop=args.max_class_drop, alpha=args.alpha,
                               score_test=args.score_test)
    unchanged = pool.get("baseline", []) + pool.get("noop", [])
    if len({r["seed"] for r in unchanged}) != len(unchanged):
        raise SystemExit("calibration_resample: the baseline and noop labels share a seed (run the pool with "
                         "--variant, whose no-op seeds start at 1000)")
    changed = {k: v for k, v in pool.items() if k not in ("baseline", "noop")}
    sd, eff = effects(unchanged, changed)
    planted: dict[str, tuple[list[dict], float]] = {k: (v, eff[k].get("effect", 0.0)) for k, v in changed.items()}
    if args.scale_to:
        src = args.scale_from or max((k for k in eff if eff[k].get("effect")),
                                     key=lambda k: abs(eff[k]["effect"]), default=None)
        if src is None or not eff.get(src, {}).get("effect"):
            raise SystemExit("calibration_resample: --scale-to needs a changed label with paired runs")
        for target in args.scale_to:
            factor = target * sd / abs(eff[src]["effect"])
            planted[f"{src} scaled to {target:g} sd"] = (cp.scaled(unchanged, changed[src], factor, args.score),
                                                         eff[src]["effect"] * factor)
    t0 = time.monotonic()
    jobs, heads = [], []
    for cap in args.caps:
        for procedure in args.procedures:
            kinds = [("A/A", "aa", unchanged, 0.0, 0.0)]
            kinds += [(f"A/A + {k:g} sd", "aa", unchanged, k * sd, k * sd) for k in args.shift_to]
            kinds += [(name, "planted", runs, e, 0.0) for name, (runs, e) in planted.items()]
            for name, kind, runs, e, delta in kinds:
                heads.append({"procedure": procedure, "baseline_seeds": args.baseline_seeds, "cap": cap,
                              "slots": args.slots,
                              "judgement": name, "effect": e, "effect_sds": e / sd if sd else None})
                jobs.append((cfg, procedure, kind, unchanged, runs, args.baseline_seeds, cap, args.draws,
                             args.seed * 1000 + len(jobs), delta, args.slots))
    if args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=args.jobs) as ex:
            done = list(ex.map(cp.judge_row, *zip(*jobs, strict=True)))
    else:
        done = [cp.judge_row(*j) for j in jobs]
    rows = [h | d for h, d in zip(heads, done, strict=True)]
    return {"seed_sd": sd, "unchanged_runs": len(unchanged), "effects": eff, "rows": rows, "gate": str(cfg),
            "seconds": round(time.monotonic() - t0, 1)}


def rate_cell(row: dict[str, Any], key: str) -> str:
    n = row["draws"]
    k_draws = row["counts"].get(key, 0)
    k = round(k_draws / n * row["disjoint_judgements"])
    lo, hi = clopper_pearson(k, row["disjoint_judgements"])
    return f"{100.0 * k_draws / n:.1f} % [{100 * lo:.0f}, {100 * hi:.0f}]"


def print_procedures(res: dict[str, Any], score: str) -> None:
    print(f"seed sd of the unchanged train.py: {res['seed_sd']:.4f} over {res['unchanged_runs']} runs")
    for label, e in sorted(res["effects"].items()):
        bits = [f"{label}: {e['runs']} runs, mean {score} {e['mean']:.4f}"]
        if "effect" in e:
            bits.append(f"paired effect {e['effect']:+.4f} = {e['effect_sds']:+.2f} seed sds over {e['pairs']} seeds, "
                        f"sd of the differences {e['sd_diff']:.4f}")
        if "correlation" in e:
            bits.append(f"pairing correlation {e['correlation']:.2f}")
        if e.get("pair_worth_seeds"):
            bits.append(f"one pair worth {e['pair_worth_seeds']:.1f} unpaired seeds a side (2 sd^2 / sd_diff^2)")
        print("  " + "; ".join(bits))
    print(f"gate: {res['gate']}; {res['seconds']} s of resampling")
    print("| procedure | baseline / cap | judgement | effect (seed sds) | keep | discard | inconclusive | error "
          "| detected (or false keep / false discard) [95 % interval, disjoint] | runs per decision (candidate + best "
          "gained) | disjoint judgements |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    for r in res["rows"]:
        slots = f" ({r['slots']} slots)" if r.get("slots", 1) > 1 else ""
        head = f"| {r['procedure']} | {r['baseline_seeds']} / {r['cap']}{slots} | {r['judgement']} | {r['effect_sds']:+.2f} "
        if not r["draws"]:
            print(head + f"| skipped: {r['skipped']} | | | | | | |")
            continue
        c, n = r["counts"], r["draws"]
        pct = {k: f"{100.0 * c.get(k, 0) / n:.1f} %" for k in ("keep", "discard", "inconclusive", "error")}
        if r["effect"] == 0:
            what = f"false keep {rate_cell(r, 'keep')}; false discard {rate_cell(r, 'discard')}"
        else:
            what = f"detected {rate_cell(r, 'keep' if r['effect'] > 0 else 'discard')}"
        print(head + f"| {pct['keep']} | {pct['discard']} | {pct['inconclusive']} | {pct['error']} | {what} "
              f"| {r['runs_per_decision']:.2f} ({r['candidate_runs']:.2f} + {r['best_gained']:.2f}) "
              f"| {r['disjoint_judgements']} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, default=HERE / "out" / "calibration-pool")
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--configs", default="3:2,3:0,5:4",
                    help="baseline_seeds:noise_reruns pairs to judge with (3:2 is looper.toml's, 3:0 the demo's)")
    ap.add_argument("--score", default="weighted_f1")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--score-test", default="auto", choices=core_score.SCORE_TEST_MODES,
                    help="[gate] score_test: auto chooses per look (alpha halved), pooled/paired fixed (whole alpha)")
    ap.add_argument("--max-class-drop", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="write the results here too")
    ap.add_argument("--procedures", default=None,
                    help="pooled,paired: judge with the last wave's pooled procedure and this wave's paired "
                         "intensification side by side (bench/calibration_procedures.py; a pool made with "
                         "calibration_pool.py --variant); without it, the last wave's table")
    ap.add_argument("--caps", default="1,3", help="with --procedures: candidate seeds at most (1 + noise_reruns)")
    ap.add_argument("--baseline-seeds", type=int, default=3, help="with --procedures: the baseline's seeds")
    ap.add_argument("--jobs", type=int, default=1, help="with --procedures: rows judged in parallel processes")
    ap.add_argument("--scale-to", default="", help="with --procedures: also score-only planted effects of these "
                                                   "sizes in seed sds, e.g. 1,2")
    ap.add_argument("--shift-to", default="", help="with --procedures: also the A/A draw with these many seed sds "
                                                   "added to the candidate's score, e.g. 1,2")
    ap.add_argument("--scale-from", default=None, help="the changed label --scale-to scales (default: the largest)")
    ap.add_argument("--pool-json", type=Path, default=None,
                    help="also write every run of the pool here (label, seed, score, classes found, steps, seconds): "
                         "the raw figures bench/RESULTS.md cites, kept beside the results")
    ap.add_argument("--slots", type=int, default=1,
                    help="with --procedures paired: runs side by side ([loop] seed_jobs); the first look fills them")
    ap.add_argument("--pool-scores", type=Path, default=None,
                    help="a pool's scores only (the --pool-json file kept in bench/calibration/) instead of --pool: "
                         "no per-class figures, so the class gates see nothing and the score test alone decides")
    args = ap.parse_args(argv)
    pool = load_scores(args.pool_scores, args.score) if args.pool_scores else load_pool(args.pool, args.score)
    if args.pool_json:
        args.pool_json.write_text(json.dumps(pool_rows(pool, args.score), indent=1) + "\n")
    if args.procedures is not None:
        args.procedures = [p for p in args.procedures.split(",") if p]
        bad = [p for p in args.procedures if p not in ("pooled", "paired")]
        if bad or not args.procedures:
            ap.error(f"--procedures: pooled and/or paired, got {bad or args.procedures}")
        args.caps = [int(c) for c in args.caps.split(",") if c]
        args.scale_to = [float(x) for x in args.scale_to.split(",") if x]
        args.shift_to = [float(x) for x in args.shift_to.split(",") if x]
        if not pool.get("baseline"):
            print(f"calibration_resample: {args.pool} holds no baseline runs", file=sys.stderr)
            return 2
        res = run_procedures(args, pool)
        print_procedures(res, args.score)
        if args.json:
            args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, **res},
                                            indent=1, default=str) + "\n")
        return 0
    if not pool.get("baseline") or not pool.get("noop"):
        print(f"calibration_resample: {args.pool} holds no baseline and noop runs (bench/calibration_pool.py)",
              file=sys.stderr)
        return 2
    cfg = core_gate.GateConfig(score=args.score, max_class_drop=args.max_class_drop, alpha=args.alpha,
                               score_test=args.score_test)
    rng = random.Random(args.seed)
    configs = [tuple(int(x) for x in c.split(":")) for c in args.configs.split(",") if c]
    same_seed = {r["seed"]: r for r in pool["baseline"]}
    # runs on the baseline's own seeds (calibration_pool.py --paired) are the loop's pairing: kept apart
    # from the fresh-seed draws, where a shared seed would correlate the two sides of a judgement
    pairs = {label: [r for r in runs if r["seed"] in same_seed] for label, runs in pool.items() if label != "baseline"}
    pool = {label: (runs if label == "baseline" else [r for r in runs if r["seed"] not in same_seed])
            for label, runs in pool.items()}
    base = list(pool["baseline"])
    noop = list(pool["noop"])
    unchanged = base + noop
    print(f"pool {args.pool}: " + ", ".join(f"{k} {len(v)} runs" for k, v in sorted(pool.items())))
    for label, runs in sorted(pool.items()):
        scores = [r["score"] for r in runs]
        steps = sorted({r["steps"] for r in runs})
        print(f"  {label}: {args.score} mean {statistics.fmean(scores):.4f} sd "
              f"{statistics.stdev(scores) if len(scores) > 1 else float('nan'):.4f} range "
              f"[{min(scores):.4f}, {max(scores):.4f}], steps {steps}, train s mean "
              f"{statistics.fmean(r['seconds'] or 0 for r in runs):.0f}")
    if pool.get("degraded"):
        t = st.ttest_ind([r["score"] for r in unchanged], [r["score"] for r in pool["degraded"]], equal_var=False)
        print(f"  planted effect: unchanged {statistics.fmean(r['score'] for r in unchanged):.4f} vs degraded "
              f"{statistics.fmean(r['score'] for r in pool['degraded']):.4f}, Welch t {t.statistic:.2f}, "
              f"p {t.pvalue:.2g} over {len(unchanged)} + {len(pool['degraded'])} seeds")
    results: list[dict[str, Any]] = []
    for nb, reruns in configs:
        looks = reruns + 1
        runs = [simulate("A/A: no-op vs the baseline", base, noop, args.draws, nb, looks, cfg, rng)]
        if pool.get("degraded"):
            runs.append(simulate("planted: degraded vs the baseline", unchanged, pool["degraded"], args.draws,
                                 nb, looks, cfg, rng))
            runs.append(simulate("repair: unchanged vs the degraded", pool["degraded"], unchanged, args.draws,
                                 nb, looks, cfg, rng))
        results += [r | {"baseline_seeds": nb, "candidate_seeds": looks} for r in runs]
    print()
    print(f"gate: {cfg}; {args.draws} draws per row")
    print("| judgement | seeds: baseline / candidate up to | keep | discard | inconclusive | error | seeds per "
          "decision | disjoint judgements in the pool | 95 % interval of the rate that matters (disjoint count) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in results:
        c, n = r["counts"], r["draws"]
        seeds = f"{r['baseline_seeds']} / {r['candidate_seeds']}"
        if not n:
            print(f"| {r['kind']} | {seeds} | {r['skipped']} | | | | | | |")
            continue

        def pct(key: str, c: dict[str, int] = c, n: int = n) -> str:
            return f"{100.0 * c.get(key, 0) / n:.1f} %"

        what = {"A": ("keep", "discard"), "p": ("discard",), "r": ("keep",)}[r["kind"][0]]
        iv = []
        for key in what:
            k = round(c.get(key, 0) / n * r["disjoint_judgements"])
            lo, hi = clopper_pearson(k, r["disjoint_judgements"])
            iv.append(f"{key} {k}/{r['disjoint_judgements']}: [{100 * lo:.0f}, {100 * hi:.0f}] %")
        print(f"| {r['kind']} | {seeds} | {pct('keep')} | {pct('discard')} | {pct('inconclusive')} | {pct('error')} "
              f"| {r['seeds_per_decision']:.2f} | {r['disjoint_judgements']} | {'; '.join(iv)} |")
    if pairs.get("noop"):
        same = [(r["seed"], r["metrics"] == same_seed[r["seed"]]["metrics"]) for r in pairs["noop"]]
        print(f"\nno-op on the baseline's own seeds (the loop's pairing): METRICS.json identical per seed: {same}")
    if len(pairs.get("degraded", [])) >= 3:
        ks = sorted(r["seed"] for r in pairs["degraded"])
        deg = {r["seed"]: r["score"] for r in pairs["degraded"]}
        b = [same_seed[k]["score"] for k in ks]
        d = [deg[k] for k in ks]
        rho = float(st.pearsonr(b, d).statistic)
        diffs = [x - y for x, y in zip(d, b, strict=True)]
        print(f"degraded on the baseline's own seeds {ks}: correlation of the paired scores {rho:.2f}; "
              f"sd of the paired differences {statistics.stdev(diffs):.4f} vs sd of the scores "
              f"{statistics.stdev(b):.4f} (baseline) and {statistics.stdev(d):.4f} (degraded)")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
