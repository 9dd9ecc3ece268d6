"""`looper status`: read from the database, so it works while the daemon runs."""

from __future__ import annotations

from typing import Any

from looper.core.run.slots import FILL_NOTE, UNUSED_NOTE
from looper.report.fmt import shown, tag_sigma
from looper.store import Store
from looper.store.queries import lean_experiments, night_note


def status_text(store: Store, cfg: Any, lock: Any) -> str:
    tag = cfg.loop.tag
    lines = []
    holder = lock.holder() if lock.is_held() else None
    if holder:
        lines.append(f"daemon: running (pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('started')})")
    else:
        lines.append("daemon: not running")
    lines.append(slots_line(cfg))
    for prefix in (UNUSED_NOTE, FILL_NOTE):  # the last night's GPU left idle, or with room its workers left empty
        said = night_note(store, prefix)
        if said is not None:
            lines.append(f"  {said.message}")
    for r in store.open_experiments():
        lines.append(f"now: #{r.id} [{r.tag}] {r.phase or r.status.value} since {r.started_at}"
                     f" on {r.worker or 'local'}: {r.description}")
    best = store.best(tag)
    sigma = tag_sigma(store, tag)  # scores are shown to the digits their noise supports
    if best:
        lines.append(f"best [{tag}]: #{best.id} score {shown(best.score, sigma)} ({best.description})")
    else:
        lines.append(f"best [{tag}]: none yet")
    rows = [r for r in lean_experiments(store, tag=tag, figures=False) if r.status.is_terminal]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    if counts:
        lines.append("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for r in rows[-5:]:
        s = shown(r.score, sigma)
        why = "; ".join(r.blocking)[:100]
        lines.append(f"  #{r.id} {r.status.value:<12} {s:>7}  {r.description}" + (f"  ({why})" if why else ""))
    halts = store.journal(tag=tag, kind=("halt", "stuck", "page_failed"), limit=1)
    if halts:
        e = halts[-1]
        lines.append(f"last {e.kind}: {e.at}: {e.message[:200]}")
    return "\n".join(lines)


def slots_line(cfg: Any) -> str:
    """The runs the night trains at a time and where: each worker's seeds side by side, the workers on their GPUs
    (looper.core.run.slots: one GPU takes them all)."""
    from looper.core.run.slots import prestart

    loop, ex = cfg.loop, cfg.executor
    where = f"GPU from index {ex.gpu_index}" if ex.require_gpu else "the CPU"
    ahead = ("; each run's box started while the run before it trains"
             + (", evaluated while the next trains" if loop.seed_jobs > 1 else "") + boxes_words(cfg)
             if prestart(loop.prestart, ex.require_gpu) else "")
    return (f"slots: {loop.seed_jobs * loop.workers} runs at a time ({loop.seed_jobs} seed(s) side by side x "
            f"{loop.workers} worker(s)) on {where}{ahead}{memory_share(cfg)}")


def boxes_words(cfg: Any, memory: int | None = None) -> str:
    """Where fewer boxes may wait ahead than runs at a time (looper.core.run.slots.boxes_ahead: a quarter of this
    machine's memory, or ``memory`` bytes), how many; "" where every run's may."""
    from looper.core.run.slots import boxes_ahead_words
    from looper.executors.limits import machine, sharing

    words = boxes_ahead_words(sharing(cfg), memory or machine()["memory"]) if cfg.executor.kind == "local" else ""
    return f"; {words}" if words else ""


def memory_share(cfg: Any) -> str:
    """Each run's memory where the runs at a time share this machine's ([limits] memory_max_bytes = 0 on the local
    executor: looper.core.run.limits.derived); "" where a run has it all, or its limit is set or elsewhere."""
    from looper.executors.limits import caps_from, sharing

    caps = caps_from(cfg.limits, sharing(cfg))
    if caps.shared_by <= 1 or not caps.memory_max_bytes:
        return ""
    if cfg.executor.kind != "local":  # an ssh host derives its share from its own memory
        return f"; each run's memory: its share of 75 % of the host's ({caps.shared_by} runs at a time there)"
    return (f"; each run's memory at most {caps.memory_max_bytes / (1 << 30):.1f} GiB ({caps.shared_by} runs at a "
            "time share 75 % of this machine's)")
