"""A tag's start, each time a night begins: a killed night's rows recovered and the checkout restored, the
data checked before anything trains, the fixed files, data and runtime pinned (or what changed since the
baseline was measured)."""

from __future__ import annotations

from pathlib import Path

from looper.core.tag.drift import baseline_drift
from looper.errors import HarnessError
from looper.executors.base import FIXED_FILES
from looper.night import cores as night_cores
from looper.night.candidate import Halted
from looper.night.clock import now_iso
from looper.night.context import Context
from looper.store.queries import run_gpu_names
from looper.workspace.hashes import fixed_hashes, pretrained_hashes
from looper.workspace.runtimepin import PREFIX as RUNTIME_PREFIX
from looper.workspace.runtimepin import runtime_hashes


def check_data(ctx: Context) -> Halted | None:
    """The data checks (looper.data.check) before anything trains: a data error halts naming the data,
    never as a baseline that could not produce a result. Data on this machine only (an ssh or slurm
    executor's data folder is checked where it lives by its manifest hash)."""
    from looper.core.data.memory import too_many
    from looper.data.check import check_data

    path = Path(ctx.cfg.data.dir)
    path = path if path.is_absolute() else ctx.root / path
    if ctx.cfg.executor.kind != "local" or not path.is_dir():
        return None
    train = ctx.root / "train.py"  # the person's train.py: a kept change of IMGSZ does not unmake the data
    v = check_data(path, ctx.cfg.data.dir, train.read_text() if train.is_file() else None)
    for w in v.metrics.get("data_warnings", []):
        ctx.display.note(f"data warning: {w}")
    crowded = too_many(ctx.cfg.loop.seed_jobs * ctx.cfg.loop.workers, v.metrics.get("memory_runs_fit", 1 << 30),
                       v.metrics.get("memory", ""))
    if crowded:  # said before anything trains (issue 47: two 8.5 GB runs on a 24 GB machine, no word before)
        ctx.display.note(f"memory warning: {crowded}")
        ctx.journal.event("note", f"memory warning: {crowded}")
    if v.ok:
        return None
    return Halted(HarnessError(f"data {ctx.cfg.data.dir} is not usable ({len(v.blocking)} problem(s)): "
                               + "; ".join(v.blocking)),
                  advice=f"Fix the data named above (`looper data check {ctx.cfg.data.dir}` lists every "
                         "problem; an export is imported with `looper data import SOURCE --out DIR`). Data "
                         "that changes starts a new tag: `looper run --tag NEW`.")

def pin_tag(ctx: Context, data_hash: str) -> list[str]:
    """Pin the tag's fixed files and data when it starts. Later: what changed since its baseline
    was measured (budget, data scale or seed, executor kind); a change starts a new baseline and
    a changed data scale or seed re-pins the data."""
    assert ctx.tag.wt is not None
    row = ctx.store.tag_record(ctx.tag.name)
    if row is None:
        fixed = fixed_hashes(ctx.tag.wt.path, FIXED_FILES)
        missing = [n for n, h in fixed.items() if h is None]
        if missing:
            raise HarnessError(f"fixed files missing in the workspace: {', '.join(missing)}")
        fixed |= pretrained_hashes(ctx.root)  # the starting checkpoints: weights as data, pinned too
        fixed |= runtime_hashes()  # the Python runtime, site-packages, the looper package
        ctx.tag.pin(branch=ctx.tag.wt.branch, base_commit=ctx.tag.wt.head(), fixed_hashes=fixed,
                    data_hash=data_hash, started_at=now_iso())
        ctx.journal.event("baseline", f"tag {ctx.tag.name} started at {ctx.tag.wt.head()[:10]}; "
                                      f"data hash {data_hash[:12]}")
        return []
    if not any(k.startswith(RUNTIME_PREFIX) for k in row.fixed_hashes or {}):
        # a tag started before the runtime pin existed: pinned from now on (what is there now)
        ctx.store.put_tag(ctx.tag.name, branch=row.branch, base_commit=row.base_commit,
                          fixed_hashes={**(row.fixed_hashes or {}), **runtime_hashes()},
                          data_hash=row.data_hash, noise=row.noise)
        row = ctx.store.tag_record(ctx.tag.name) or row
        ctx.journal.event("note", f"tag {ctx.tag.name} began before looper pinned the Python runtime: its "
                                  "runtime, site-packages and looper package are pinned from now on")
    ctx.tag.refresh()
    ref = (ctx.tag.kept_baselines() or ctx.store.find_experiments(tag=ctx.tag.name, kind="baseline", limit=1) or [None])[-1]
    then_gpus = run_gpu_names(ctx.store, ref.id) if ref is not None and ctx.cfg.executor.require_gpu else set()
    budget = ctx.tag.budget()
    then_cores = (budget.warmup or budget.fit or {}).get("cores")
    changed = baseline_drift(ref.config if ref else None, ctx.cfg.redacted_dict(), then_gpus,
                             _gpu_now(ctx) if then_gpus else "", then_cores,
                             len(night_cores.usable_cores()) if then_cores and ctx.cfg.executor.kind == "local" else None)
    if not changed:
        return []
    assert ref is not None
    message = f"{'; '.join(changed)} since baseline #{ref.id} was measured: measuring a new baseline"
    if any(c.startswith("data.") for c in changed) and data_hash != row.data_hash:
        ctx.tag.pin(branch=row.branch, base_commit=row.base_commit, fixed_hashes=row.fixed_hashes,
                    data_hash=data_hash)
        message += f" (data re-pinned: hash {data_hash[:12]})"
    elif any(c.startswith("data.") for c in changed):  # prepare.py builds the data only when it is missing
        message += (f" (the data in {ctx.cfg.data.dir} is unchanged: move it away to prepare it for the "
                    "new settings)")
    ctx.journal.event("baseline", message, ref.id, {"changed": changed})
    ctx.display.note(message)
    return changed

def recover(ctx: Context) -> None:
    """A row left `running` by a killed daemon is interrupted; the checkout goes back."""
    for exp in ctx.store.open_experiments():
        ctx.store.mark_interrupted(exp.id, "the daemon stopped or died mid-experiment")
        ctx.journal.event("recover", f"experiment #{exp.id} was left running "
                             f"(phase {exp.phase or '?'}): marked interrupted", exp.id)
        ctx.display.note(f"recovered: #{exp.id} marked interrupted")
    for line in ctx.executor.reap():
        ctx.journal.event("recover", line)
    restore_last_kept(ctx)

def restore_last_kept(ctx: Context) -> None:
    """The checkout back at the last kept commit (what was there kept under refs/looper/orphaned/); uncommitted
    changes reset."""
    assert ctx.tag.wt is not None
    kept = ctx.tag.last_kept_commit()
    head = ctx.tag.wt.head()
    if kept and head != kept:
        ctx.tag.wt.save_ref(f"refs/looper/orphaned/{head}", head)
        ctx.tag.wt.reset_hard(kept)
        ctx.journal.event("recover", f"checkout restored to last kept commit {kept[:10]} (was {head[:10]})")
    elif not ctx.tag.wt.is_clean():
        ctx.tag.wt.reset_hard(head)
        ctx.journal.event("recover", f"uncommitted changes in the checkout were reset to {head[:10]}")



def _gpu_now(ctx: Context) -> str:
    """The model of the GPU this night's runs take (``[executor] gpu_index``'s), as the executor's preflight reads
    it (NVML here or on the ssh host); "" where it cannot say (that preflight's failure is the night's preflight's
    to report, before anything trains)."""
    v = ctx.executor.preflight(True, gpu=ctx.cfg.executor.gpu_index)
    gpu = v.metrics.get("gpu")
    return str(gpu.get("name") or "") if isinstance(gpu, dict) and gpu.get("ok", True) else ""
