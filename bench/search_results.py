"""What bench/bench_search.py concludes and writes up: the seeds' 95 % t interval, a
re-measurement's summary, each arm against the baseline (beyond the noise, Welch's p, a false
keep caught), whether a re-measurement reproduced another, the plot and the markdown table."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any


def interval(xs: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95 % t interval of the mean."""
    from scipy import stats

    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, math.nan, math.nan
    half = stats.t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Re-measuring runs -> their mean, 95 % t interval and the most classes found."""
    scores = [r["score"] for r in runs if "score" in r]
    out: dict[str, Any] = {"runs": runs}
    if scores:
        m, lo, hi = interval(scores)
        out.update(mean=round(m, 4), low=round(lo, 4), high=round(hi, 4),
                   classes_found=max(r.get("classes_found", 0) for r in runs if "score" in r))
    return out


def scored(m: dict[str, Any]) -> int:
    """How many of a re-measurement's runs have a score."""
    return sum(1 for r in m.get("runs", []) if "score" in r)


def compare(entry: dict[str, Any]) -> None:
    """Each arm's re-measured seeds against the baseline's: beyond the noise (interval ends apart),
    Welch's one-sided p, and a keep the re-measurement did not confirm (a false keep caught)."""
    from scipy import stats

    base = entry["baseline"]
    base_scores = [r["score"] for r in base.get("runs", []) if "score" in r]

    def against(m: dict[str, Any], into: dict[str, Any]) -> None:
        into["beats_baseline"] = bool(m["low"] > base["high"])
        scores = [x["score"] for x in m["runs"] if "score" in x]
        if len(scores) >= 2 and len(base_scores) >= 2:
            t = stats.ttest_ind(scores, base_scores, equal_var=False, alternative="greater")
            into["welch_p_greater"] = round(float(t.pvalue), 4)

    for r in entry["arms"].values():
        m = r.get("remeasured", {})
        if "mean" in m and "high" in base:
            against(m, r)
            r.pop("false_keep_caught", None)
            if r.get("keeps") is not None:  # the Tuner keeps nothing by gate: no false keep to catch, not "False"
                r["false_keep_caught"] = bool(r["keeps"] > 0 and m["mean"] <= base["mean"])
        own = r.get("remeasured_own", {})
        if "mean" in own and "high" in base:
            against(own, own)
    own = entry.get("baseline_own", {})
    if "mean" in own and "high" in base:
        against(own, own)


def reproduced(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> bool:
    """Whether re-measuring runs gave another's scores exactly, seed for seed, in the same order:
    every run scored (two failed runs reproduce nothing), the same seeds, the same scores."""
    pairs = [(r["seed"], r.get("score")) for r in mine]
    return (bool(pairs) and all(score is not None for _, score in pairs)
            and pairs == [(r["seed"], r.get("score")) for r in theirs])


def plot(results: dict[str, Any], path: Path) -> None:
    """Best score over wall time per arm (in the arm: the looper arms' current best, the Tuner's
    best weights at its end), and at the right each arm's re-measured mean with its 95 % interval
    (the baseline's as a band): ``path`` (SVG) and the same as PNG beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    end = float(results["args"].get("minutes") or 45)
    for rep in results["repeats"]:
        base = rep.get("baseline") or {}
        if "low" in base and math.isfinite(base["low"]):
            ax.axhspan(base["low"], base["high"], color="0.85", zorder=0,
                       label=f"baseline train.py re-measured, 95 % (repeat {rep['repeat']}, {scored(base)} seeds)")
        for i, (arm, r) in enumerate(rep["arms"].items()):
            pts = r.get("curve") or []
            line = None
            if pts:
                xs, ys = zip(*[(t / 60, s) for t, s in pts], strict=True)
                (line,) = ax.step(xs, ys, where="post", marker="o", label=f"{arm}: in the arm (repeat {rep['repeat']})")
            for j, key in enumerate(("remeasured", "remeasured_own")):
                m = r.get(key) or {}
                if "mean" in m and math.isfinite(m.get("low", math.nan)):
                    x = end + 2 + 1.5 * i + 0.5 * j
                    ax.errorbar([x], [m["mean"]], yerr=[[m["mean"] - m["low"]], [m["high"] - m["mean"]]],
                                fmt="s" if j == 0 else "D", capsize=3, color=line.get_color() if line else None,
                                label=f"{arm}: re-measured{', own training' if j else ''} ({scored(m)} seeds)")
    ax.axvline(end, color="0.5", lw=0.8, ls=":")
    ax.set_xlabel("wall time, minutes (right of the dotted line: each best re-measured on fresh seeds, 95 %)")
    ax.set_ylabel("page-level weighted F1")
    ax.legend(fontsize=6, loc="lower left")  # the curves run along the top
    fig.tight_layout()
    fig.savefig(path)
    fig.savefig(path.with_suffix(".png"), dpi=110)


def markdown(results: dict[str, Any]) -> str:
    a = results["args"]
    lines = [f"Arms at {a['minutes']} min each, {a['budget']} s per run, scale {a['scale']}, "
             f"{a['reseeds']} re-measuring seeds in the first pass, {len(results['repeats'])} repeat(s), "
             f"device {a['device']}.",
             "", "| repeat | arm | experiments | keeps | best in the arm | re-measured scores | mean [95 % interval] "
             "| steps per run | classes found | beats baseline beyond noise | Welch p (greater) | false keep caught |",
             "|---:|---|---:|---:|---:|---|---|---|---:|---|---:|---|"]

    def measured(m: dict[str, Any]) -> str:
        runs = [x for x in m.get("runs", []) if "score" in x]
        scores = " / ".join(f"{x['score']:.3f}" for x in runs)
        if m.get("training"):  # Ultralytics' own training: epochs under time=, not train.py's steps
            steps = " / ".join(str(x.get("epochs", "?")) for x in runs) + " epochs (time=)"
        else:
            steps = " / ".join(str(x.get("steps", "?")) for x in runs)
            steps += f" ({'at most ' + str(m['remeasure_steps']) if m.get('remeasure_steps') else 'wall clock'})"
        if m.get("same_as"):
            scores = f"(its best is the {m['same_as']} train.py: that re-measurement) {scores}"
        return f"{scores} | {m.get('mean')} [{m.get('low')}, {m.get('high')}] | {steps} | {m.get('classes_found')}"

    def num(x: Any) -> str:
        return f"{x:.4f}" if isinstance(x, float) else str(x)

    for rep in results["repeats"]:
        lines.append(f"| {rep['repeat']} | baseline train.py | | | | {measured(rep['baseline'])} | | | |")
        own = rep.get("baseline_own")
        if own:
            lines.append(f"| {rep['repeat']} | baseline settings, Ultralytics' own training (best.pt) | | | | "
                         f"{measured(own)} | {own.get('beats_baseline')} | {own.get('welch_p_greater')} | |")
        for arm, r in rep["arms"].items():
            lines.append(f"| {rep['repeat']} | {arm} | {r.get('experiments')} | {num(r.get('keeps'))} | "
                         f"{num(r.get('best_in_loop'))} | {measured(r.get('remeasured', {}))} | "
                         f"{r.get('beats_baseline')} | {r.get('welch_p_greater')} | {r.get('false_keep_caught')} |")
            own = r.get("remeasured_own")
            if own:
                lines.append(f"| {rep['repeat']} | {arm}: its best hyperparameters, Ultralytics' own training "
                             f"(best.pt) | | | | {measured(own)} | {own.get('beats_baseline')} | "
                             f"{own.get('welch_p_greater')} | |")
    return "\n".join(lines)
