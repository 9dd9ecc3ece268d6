"""The checks before and after a run: the executor answers, the fixed files, the data and the runtime are as
pinned when the tag began (integrity), the starting checkpoint fits, approved baselines are on record, the
checkout is clean, the disk has room, the cores go round (preflight)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from looper.core.tag import runtime as core_runtime
from looper.core.verdicts.verdict import Verdict
from looper.errors import HarnessError
from looper.executors import Executor
from looper.executors.base import FIXED_FILES
from looper.night.context import Context, Worker
from looper.night.cores import run_threads
from looper.workspace.hashes import fixed_hashes, pretrained_hashes, stale_imports
from looper.workspace.runtimepin import runtime_hashes


# ---------------------------------------------------------------------- checks before and after
def integrity(ctx: Context, when: str, folder: Path | None = None, executor: Executor | None = None,
              runtime: bool = True) -> Verdict:
    """Fixed files and data exactly as pinned when the tag began; with ``runtime``, the Python runtime,
    site-packages and the looper package too (looper/workspace/runtimepin.py: 0.3-0.7 s with torch installed;
    taken after each training run, before its evaluation)."""
    assert ctx.tag.wt is not None and ctx.tag.pinned is not None
    stale = stale_imports(folder or ctx.tag.wt.path, FIXED_FILES)
    if stale:  # the one cause: the pinned module paths and the fixed files' hashes say the same again
        return Verdict.errored(*stale)
    problems: list[str] = []
    now = fixed_hashes(folder or ctx.tag.wt.path, FIXED_FILES) | pretrained_hashes(ctx.root)
    pinned = ctx.tag.pinned.fixed_hashes or {}
    if runtime and core_runtime.pinned(pinned):
        seen = "" if when == "since the tag began" else f" (seen {when.replace('during', 'after')})"
        problems += core_runtime.changes(pinned, runtime_hashes(), "since the tag began" + seen)
    for name, h in pinned.items():
        if name.startswith(core_runtime.PREFIX):
            continue
        if now.get(name) != h:
            problems.append(f"fixed file {name} changed {when} (expected sha256 {str(h)[:12]}, "
                            f"found {str(now.get(name))[:12]})")
    v = (executor or ctx.executor).data_hash(ctx.cfg.data.dir)
    if not v.ok:
        problems.extend(v.blocking)
    elif v.metrics.get("hash") != ctx.tag.pinned.data_hash:
        problems.append(f"data in {ctx.cfg.data.dir} changed {when} (manifest/tree hash "
                        f"{v.metrics.get('hash', '')[:12]} != pinned {ctx.tag.pinned.data_hash[:12]}): put the data "
                        "back, or run on the new data under a new tag (looper run --tag NEW)")
    return Verdict.errored(*problems) if problems else Verdict.passed({"checked": when})


def preflight(ctx: Context, w: Worker) -> Verdict:
    """The executor answers, the fixed files and data are as pinned, train.py's starting checkpoint
    fits it, every approved baseline file is one the database recorded (with its hash), the checkout
    is clean."""
    from looper.night.startweights import check_pretrained
    from looper.workspace.baselines import unrecorded

    planted = unrecorded(ctx.root / "baselines", ctx.store)
    parts = {"executor": w.executor.preflight(ctx.cfg.executor.require_gpu, gpu=worker_gpu(ctx, w)),
             # the runtime is compared after each training run, before its evaluation (not here: nothing
             # since the last run's check could change it but the agent, which runs after this preflight)
             "integrity": integrity(ctx, "since the tag began", w.wt.path, w.executor, runtime=False),
             "pretrained": check_pretrained(ctx.root, (w.wt.path / "train.py").read_text(), _data_path(ctx)),
             "baselines": Verdict.errored(*planted) if planted else Verdict.passed(),
             "disk": _disk(ctx), "cores": _cores(ctx)}
    parts["gpu_slots"] = _gpu_slots(ctx, parts["executor"].metrics.get("gpu"), parts["executor"].metrics.get("cores"))
    dirty = [c.path for c in w.wt.changes()]
    parts["checkout"] = (Verdict.errored(f"checkout not clean: {', '.join(dirty[:5])}") if dirty
                         else Verdict.passed())
    problems = [f"{k}: {b}" for k, v in parts.items() for b in v.blocking]
    metrics: dict[str, Any] = {k: v.status.value for k, v in parts.items()}
    if parts["gpu_slots"].metrics:
        metrics["gpu_slots"] = parts["gpu_slots"].metrics
        fill = parts["gpu_slots"].metrics.get("fill")
        if fill and ctx.night.first_time("gpu_fill"):  # said once a night: the slots the workers leave empty
            from looper.core.run.slots import FILL_NOTE

            ctx.journal.event("note", FILL_NOTE + fill)
            ctx.display.note(FILL_NOTE + fill)
    if not ctx.cfg.executor.require_gpu and ctx.night.first_time("gpu_unused"):  # once a night: a GPU left idle
        _unused_gpu(ctx, w)
    if parts["executor"].metrics.get("device_check"):  # the GPU check in a run's box (docs/GPU.md)
        metrics["device_check"] = parts["executor"].metrics["device_check"]
    if parts["pretrained"].metrics.get("transfer"):  # a checkpoint of other classes: fine-tuned as a transfer
        metrics["transfer"] = parts["pretrained"].metrics["transfer"]
    return Verdict.errored(*problems, metrics=metrics) if problems else Verdict.passed(metrics)


def _unused_gpu(ctx: Context, w: Worker) -> None:
    """Where the runs train on the CPU of a machine with a GPU, the night says so (journal, screen; the report and
    ``looper status`` show it). Not on SLURM: a job's GPUs are its allocation (``[executor] gres``)."""
    from looper.core.run.slots import UNUSED_NOTE, unused_words

    kind = ctx.cfg.executor.kind
    if kind not in ("local", "ssh"):
        return
    words = unused_words(w.executor.gpu_count(), "this machine" if kind == "local" else
                         f"the ssh host {ctx.cfg.executor.host}")
    if words:
        ctx.journal.event("note", UNUSED_NOTE + words)
        ctx.display.note(UNUSED_NOTE + words)


def worker_gpu(ctx: Context, w: Worker) -> int | None:
    """The GPU worker ``w``'s runs use (its ``LOOPER_DEVICE``: ``N``); None without ``[executor] require_gpu``."""
    from looper.executors.gpu import device_index

    return device_index(w.device, ctx.cfg.executor.gpu_index) if ctx.cfg.executor.require_gpu else None


def _data_path(ctx: Context) -> Path:
    data = Path(ctx.cfg.data.dir)
    return data if data.is_absolute() else ctx.root / data


def _cores(ctx: Context) -> Verdict:
    """With ``[loop] seed_jobs`` > 1: a core for every run side by side (looper.core.run.cores; 0 threads: one
    run at a time)."""
    try:
        return Verdict.passed({"threads_per_run": run_threads(ctx.cfg)})
    except HarnessError as exc:
        return Verdict.errored(str(exc))


def _gpu_slots(ctx: Context, gpu: dict[str, Any] | None, host_cores: object = None) -> Verdict:
    """With ``require_gpu``: the runs at a time on the busiest GPU (``seed_jobs`` x the workers on it) fit its
    free memory at the tag's measured peak a run (looper.core.run.slots); more would fail as out-of-memory
    crashes blamed on the candidates. The cores that feed it: this machine's, or the ssh host's (``host_cores``,
    its preflight's reading; not known: no advice on the workers that would fill it)."""
    from looper.core.run.slots import fill_words, gpu_slots, prestart, runs_per_gpu
    from looper.night.cores import usable_cores
    from looper.store.queries import gpu_run_peak_mb

    if not ctx.cfg.executor.require_gpu or not gpu or not gpu.get("ok"):
        return Verdict.passed()
    loop = ctx.cfg.loop
    kind = ctx.cfg.executor.kind
    on_host = host_cores if kind == "ssh" and isinstance(host_cores, int) and host_cores > 0 else 0
    known = kind == "local" or bool(on_host)
    plan = gpu_slots(float(gpu.get("memory_free_mb") or 0), gpu_run_peak_mb(ctx.store, loop.tag),
                     on_host or len(usable_cores()))
    overlap = prestart(loop.prestart, ctx.cfg.executor.require_gpu)
    first, count = ctx.cfg.executor.gpu_index, int(gpu.get("count") or 0)
    runs = runs_per_gpu(loop.seed_jobs, loop.workers, first, count, prestart=overlap)
    metrics = {"slots": plan.slots, "runs_per_gpu": runs, "plan": plan.line(), "prestart": overlap}
    if known:  # the cores that feed the GPU are known: this machine's or the ssh host's
        metrics["fill"] = fill_words(plan, loop.seed_jobs, loop.workers, first, count, overlap)
    if runs > plan.by_memory:
        both = " (training and, with loop.prestart, as many evaluated beside them)" if overlap and loop.seed_jobs > 1 else ""
        return Verdict.errored(f"loop.seed_jobs {loop.seed_jobs} x loop.workers {loop.workers} put {runs} runs at a "
                               f"time on one GPU{both}, which has memory for {plan.by_memory} ({plan.line()}): lower "
                               "loop.seed_jobs or loop.workers" + (', or set loop.prestart = "off"' if both else ""),
                               metrics=metrics)
    return Verdict.passed(metrics)


def _disk(ctx: Context) -> Verdict:
    """Free disk for the run and its outcome ([limits] min_free_bytes, reserve_bytes: looper.night.guard)."""
    from looper.night.guard import disk_problem

    problem = disk_problem(ctx.root, ctx.cfg.limits.min_free_bytes, ctx.cfg.limits.reserve_bytes)
    return Verdict.errored(problem) if problem else Verdict.passed()
