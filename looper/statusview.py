"""`looper status`: read from the database, so it works while the daemon runs."""

from __future__ import annotations

from typing import Any


def status_text(store: Any, cfg: Any, lock: Any) -> str:
    tag = cfg.loop.tag
    lines = []
    holder = lock.holder() if lock.is_held() else None
    if holder:
        lines.append(f"daemon: running (pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('started')})")
    else:
        lines.append("daemon: not running")
    for r in store.running_experiments():
        lines.append(f"now: #{r['id']} [{r['tag']}] {r.get('phase') or r['status']} since {r.get('started_at')}"
                     f" on {r.get('worker') or 'local'}: {r.get('description') or ''}")
    best = store.best_experiment(tag)
    if best:
        lines.append(f"best [{tag}]: #{best['id']} score {best.get('score')} ({best.get('description') or ''})")
    else:
        lines.append(f"best [{tag}]: none yet")
    rows = [r for r in store.experiments(tag=tag) if r["status"] not in ("pending", "running")]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    if counts:
        lines.append("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for r in rows[-5:]:
        s = "-" if r.get("score") is None else f"{r['score']:.4f}"
        why = "; ".join(r.get("blocking") or [])[:100]
        lines.append(f"  #{r['id']} {r['status']:<12} {s:>7}  {r.get('description') or ''}" + (f"  ({why})" if why else ""))
    events = store.events(tag=tag)
    halts = [e for e in events if e["kind"] in ("halt", "stuck", "page_failed")]
    if halts:
        e = halts[-1]
        lines.append(f"last {e['kind']}: {e['at']}: {e['message'][:200]}")
    return "\n".join(lines)
