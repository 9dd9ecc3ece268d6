"""One-line summaries of a night: workers, GPU figures, the step budget."""

from __future__ import annotations

from looper.executors.nightgpu import NIGHT_GPU
from looper.report.fmt import secs
from looper.report.night import Night
from looper.store import ExperimentRow

__all__ = ["cover_line", "gpu_line", "step_budget_line", "worker_lines"]


def worker_lines(n: Night) -> list[str]:
    """One line per worker: how many experiments, their outcomes, the last one and when."""
    by: dict[str, list[ExperimentRow]] = {}
    for e in n.experiments:
        if e.kind == "candidate":
            by.setdefault(e.worker or "w0", []).append(e)
    lines = []
    for worker, rows in sorted(by.items()):
        counts: dict[str, int] = {}
        for r in rows:
            counts[r.status.value] = counts.get(r.status.value, 0) + 1
        last = rows[-1]
        lines.append(f"{worker}: {len(rows)} experiment(s) ("
                     + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                     + f"); last #{last.id} {last.status.value} since {last.started_at or '?'}")
    return lines


def gpu_line(n: Night) -> str:
    g = n.gpu
    parts = []
    if g["names"]:
        parts.append("GPU " + ", ".join(f"{k} ({v})" for k, v in g["names"].items()))
    if g["peak_memory_mb"]:
        parts.append(f"peak memory {g['peak_memory_mb'][0]:.0f} MB (#{g['peak_memory_mb'][1]})")
    if g["mean_utilization_pct"] is not None:
        parts.append(f"mean utilisation {g['mean_utilization_pct']:.1f}% over {g['utilization_samples']} run(s)")
    if g["train_peak_memory_mb"]:
        parts.append(f"train.py peak memory {g['train_peak_memory_mb'][0]:.0f} MB (#{g['train_peak_memory_mb'][1]})")
    if g["lost"]:
        parts.append("GPU LOST in " + " ".join(f"#{i}" for i in g["lost"]))
    if g["xid"]:
        parts.append("Xid errors in " + " ".join(f"#{i}" for i in g["xid"]))
    if g["ecc"]:
        parts.append("new uncorrected ECC errors in " + " ".join(f"#{i}" for i in g["ecc"]))
    night = next((e.message for e in reversed(n.events) if e.kind == "note" and e.message.startswith(NIGHT_GPU)), None)
    if night:  # the whole night's samples (looper.executors.nightgpu.night_gpu): the busy share of the GPU
        parts.append(night)
    return "  " + ("; ".join(parts) if parts else "no GPU figures recorded")


def cover_line(n: Night) -> str | None:
    """How much of the runs' clock some run was training (looper.core.run.phases.night_cover): on a GPU the
    stretches with none are stretches the GPU had nothing to train. None when no run recorded its phases."""
    c = n.cover
    if c is None:
        return None
    line = (f"  runs training: {100 * c.share:.1f}% of the runs' clock ({secs(c.wall_s)} from the first run's start "
            f"to the last one's end), {c.at_once:.1f} at a time on average")
    if c.longest_gap_s > 0:
        line += f"; the longest stretch with none training {secs(c.longest_gap_s)}, {secs(c.gap_starts_at)} in"
    return line


def step_budget_line(n: Night) -> str | None:
    """The tag's step budget in words, when its baseline ran under one (``loop.max_steps``)."""
    verdict = n.baseline.verdict if n.baseline is not None else None
    metrics = (verdict.get("metrics") if isinstance(verdict, dict) else None) or {}
    steps = metrics.get("max_steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0:
        return None
    warm = metrics.get("warmup") if isinstance(metrics.get("warmup"), dict) else None
    fit = metrics.get("fit") if isinstance(metrics.get("fit"), dict) else None
    side = warm.get("runs") if warm and isinstance(warm.get("runs"), list) else None
    how = ("set in looper.toml" if not warm else
           f"80 % of the {warm.get('steps')} steps the slowest of its {len(side)} warm-up runs side by side fitted "
           "into the wall clock" if side else f"80 % of the {warm.get('steps')} steps its warm-up run fitted into "
           "the wall clock")
    said = f"step budget: every run trains {steps} optimizer steps ({how})"
    if fit and fit.get("status") == "raised":
        return f"{said}; its fit run on this machine: {fit.get('why')}"
    if fit and fit.get("status") in ("fits", "unknown"):
        return f"{said}; its fit run: {fit.get('why')}"
    return said
