"""What needs a person, most urgent first: :func:`attention` over a :class:`~looper.report.night.Night`."""

from __future__ import annotations

from looper.core.run.slots import FILL_NOTE, SHARED_OOM_NOTE, UNUSED_NOTE
from looper.report.fmt import MAX_ATTENTION, clean, id_list
from looper.report.night import Attention, Night

__all__ = ["attention"]


def attention(n: Night, approved: bool) -> list[Attention]:
    """What needs a person, most urgent first: halts, then warnings, then notes."""
    return [*_halts(n), *_warnings(n), *_notes(n, approved)]


def _halts(n: Night) -> list[Attention]:
    out: list[Attention] = []
    halted_ids: set[int] = set()
    for ev in n.events:
        if ev.kind in ("halt", "stuck"):
            what = "HALTED (harness error)" if ev.kind == "halt" else "HALTED (stuck loop)"
            out.append(Attention("halt", f"{what} at {ev.at[:19]}: {clean(ev.message)}", ev.experiment_id))
            if ev.experiment_id is not None:
                halted_ids.add(int(ev.experiment_id))
    for e in n.errors:
        if e.id in halted_ids:
            continue
        reason = "; ".join(clean(b) for b in e.blocking) or "(no reason recorded)"
        out.append(Attention("halt", f"harness error in #{e.id}: {reason}", e.id))
    for bid, scored in n.unfinished_baselines.items():  # what the halted baseline measured is not lost
        seeds = ", ".join(f"seed {seed} {score:.4f}" for seed, score in scored)
        out.append(Attention("halt", f"baseline #{bid} did not finish; {len(scored)} of its seeds scored: {seeds}", bid))
    for ev in n.events:
        if ev.kind == "page_failed":
            out.append(Attention("halt", f"a page was NOT delivered at {ev.at[:19]}: {clean(ev.message)}",
                                 ev.experiment_id))
    return out


def _sandbox_warnings(n: Night) -> list[Attention]:
    out: list[Attention] = []
    if n.sandbox_off:
        out.append(Attention(
            "warn", f'training ran WITHOUT its sandbox ([executor] sandbox = "none") in {len(n.sandbox_off)} '
                    f"experiment(s): {id_list(n.sandbox_off)}; train.py could write the database, the checkout and "
                    "the venv and read the test pages (docs/SECURITY.md)", n.sandbox_off[-1]))
    elif n.sandbox_config == "none":
        out.append(Attention(
            "warn", 'the workspace\'s looper.toml sets [executor] sandbox = "none": training runs WITHOUT its '
                    "sandbox (train.py can write the database, the checkout and the venv and read the test pages; "
                    "docs/SECURITY.md)"))
    unboxed = [i for i, f in n.figures.items() if f.get("agent_kind") == "command" and f.get("agent_sandbox") == "none"]
    if unboxed:
        out.append(Attention(
            "warn", f'the agent command ran WITHOUT its box ([agent] sandbox = "none") in {len(unboxed)} '
                    f"experiment(s): {id_list(unboxed)}; it could read the test pages' seed, the database and the "
                    "daemon's secrets and write the venv (docs/SECURITY.md)", unboxed[-1]))
    if n.network_on:
        out.append(Attention("note", f"train.py could reach the network ([executor] sandbox_network = true) in "
                                     f"{id_list(n.network_on)}", n.network_on[-1]))
    return out


def _last_note(n: Night, prefix: str) -> str | None:
    """The window's last journal note beginning with ``prefix``."""
    return next((e.message for e in reversed(n.events) if e.kind == "note" and e.message.startswith(prefix)), None)


def _cut_short_warning(n: Night) -> list[Attention]:
    """Experiments whose runs the wall clock ended before the tag's step budget (not comparable)."""
    cut = [i for i, f in n.figures.items() if f.get("cut_short")]
    if not cut:
        return []
    return [Attention(
        "warn", f"{len(cut)} experiment(s) trained fewer steps than the tag's step budget (the wall clock cut "
                f"them short: a busy machine, or a slower change): {id_list(cut)}; a loss there is inconclusive, "
                "not a discard, and a keep stands flagged (loop.max_steps, docs/REFERENCE.md)", cut[-1])]


def _warnings(n: Night) -> list[Attention]:
    out: list[Attention] = [*_sandbox_warnings(n), *_cut_short_warning(n)]
    unused = _last_note(n, UNUSED_NOTE)
    if unused:  # the night trained on the CPU of a machine with a GPU (looper.core.run.slots.unused_words)
        out.append(Attention("warn", unused))
    starts = [ev for ev in n.events if ev.kind == "start"]
    if starts:
        after = [ev for ev in n.events if ev.id > starts[-1].id and ev.kind in ("stop", "halt", "stuck")]
        if not after:
            out.append(Attention("warn", f"no stop or halt since the daemon started at {starts[-1].at[:19]}: "
                                         "it is still running, or it died"))
    if n.dead_gates:
        shown = ", ".join(n.dead_gates[:10]) + (f" and {len(n.dead_gates) - 10} more" if len(n.dead_gates) > 10 else "")
        src = f"#{n.baseline_id}" if n.baseline_id is not None else n.baseline_source
        out.append(Attention("warn", f"{len(n.dead_gates)} class gate(s) are dead (baseline {src} recall not above "
                                     f"the drop limit; they can never fire): {shown}", n.baseline_id))
    ranked = sorted(n.near_misses, key=lambda x: -x.diff)
    for nm in ranked[:MAX_ATTENTION]:
        out.append(Attention(
            "warn", f"near miss #{nm.id} beat the best by {nm.diff:+.4f} but failed a class gate: "
                    f"{'; '.join(nm.class_reasons)}", nm.id, nm.command))
    if len(ranked) > MAX_ATTENTION:
        rest = ranked[MAX_ATTENTION:]
        out.append(Attention("warn", f"{len(rest)} more near miss(es): {id_list(x.id for x in rest)}"))
    return out


def _notes(n: Night, approved: bool) -> list[Attention]:
    out: list[Attention] = []
    for e in n.interrupted[:MAX_ATTENTION]:
        reason = "; ".join(clean(b) for b in e.blocking) or "interrupted"
        out.append(Attention("note", f"#{e.id} was interrupted: {reason}", e.id))
    if len(n.interrupted) > MAX_ATTENTION:
        rest = n.interrupted[MAX_ATTENTION:]
        out.append(Attention("note", f"{len(rest)} more interrupted: {id_list(e.id for e in rest)}"))
    oom = [e for e in n.events if e.kind == "note" and e.message.startswith(SHARED_OOM_NOTE)]
    if oom:  # runs out of GPU memory beside others, trained again alone (looper.core.run.slots.after_failure)
        ids = sorted({e.experiment_id for e in oom if e.experiment_id is not None})
        out.append(Attention("note", f"{len(oom)} run(s) ran out of GPU memory beside other runs and ran again "
                                     f"with the GPU to themselves ({id_list(ids)}): these changes need more memory "
                                     "than the GPU's share; fewer runs at a time (loop.seed_jobs x loop.workers) "
                                     "would spare the reruns", ids[-1] if ids else None))
    fill = _last_note(n, FILL_NOTE)
    if fill:  # the night's GPU had room for more runs than its workers trained (looper.core.run.slots.fill_words)
        out.append(Attention("note", fill))
    if not approved and n.baseline is not None:
        out.append(Attention("note", f"no approved baseline yet: the gates compare against the tag-start baseline "
                                     f"#{n.baseline.id}", n.baseline.id, f"looper baseline approve {n.baseline.id}"))
    return out
