"""The confirmed morning in the report: the headline and what the decisions and confirmations cost.

The headline is the latest confirmation of the tag (looper.night.confirm): the night's best on fresh
seeds against the baseline, with its 95 % interval, beside the selection-time figure (the best's
score as the gate measured it while selecting it, biased upwards by that selection). A kept change
whose gain did not confirm is flagged for a person. Costs: runs and minutes per decision (the
candidate's seeds and the seeds the best gained for it, from each verdict's ``cost``) and per
confirmation. Read-only; every free text goes through :func:`looper.report.fmt.clean`.
"""

from __future__ import annotations

import html
import statistics
from dataclasses import dataclass, field
from typing import Any

from looper.core.run.phases import PHASES, Split, add
from looper.report.fmt import clean
from looper.store import ConfirmationRecord, Store, queries

_LAST = 5  # decisions listed one by one in the terminal report (the page lists up to 60)

__all__ = ["Morning", "costs_by_experiment", "morning", "morning_html", "morning_lines"]


@dataclass(frozen=True)
class Morning:
    """What the report's head says about the confirmation and the costs."""

    tag: str | None
    confirmation: ConfirmationRecord | None
    decisions: list[dict[str, Any]] = field(default_factory=list)  # {id, status, runs, best_runs, minutes, stopped}
    confirmations: list[ConfirmationRecord] = field(default_factory=list)  # in the window
    transfer: Any = None  # the transfer check of that confirmation (looper.store.transfers.TransferRecord)

    @property
    def flagged(self) -> bool:
        return bool(self.confirmation and self.confirmation.flagged)


def costs_by_experiment(store: Store, tag: str | None = None, since: str | None = None) -> dict[int, dict]:
    """``{experiment id: verdict cost}`` of every decision that recorded one (looper.night.experiment)."""
    got = queries.json_fields(store, {"cost": ("verdict", "$.metrics.cost")}, tag=tag, since=since,
                              kind=("candidate", "verify"))
    return {i: v["cost"] for i, v in got.items() if isinstance(v.get("cost"), dict)}


def morning(store: Store, tag: str | None, since: str | None = None) -> Morning:
    """The latest confirmation of ``tag`` and the costs of the window's decisions."""
    if tag is None:
        return Morning(None, None)
    every = queries.confirmations(store, tag)
    window = [c for c in every if since is None or c.finished_at >= since]
    rows = {r.id: r for r in queries.lean_experiments(store, tag=tag, since=since, figures=False)}
    decisions = []
    for i, cost in sorted(costs_by_experiment(store, tag, since).items()):
        row = rows.get(i)
        decisions.append({"id": i, "status": row.status.value if row else "?",
                          "runs": int(cost.get("runs") or 0), "candidate_runs": int(cost.get("candidate_runs") or 0),
                          "best_runs": int(cost.get("best_runs") or 0),
                          "minutes": float(cost.get("minutes") or 0.0),
                          "wall_minutes": None if cost.get("wall_minutes") is None else float(cost["wall_minutes"]),
                          "stopped": str(cost.get("stopped") or ""),
                          "phases": _phases(cost.get("phases"))})
    last = every[-1] if every else None
    checks = [t for t in queries.transfers(store, tag) if last is not None and t.confirmation_id == last.id]
    return Morning(tag, last, decisions, window, checks[-1] if checks else None)


def transfer_lines(m: Morning) -> list[str]:
    """The transfer check beside the confirmed figure: both budgets' gains, and a flag when it does not hold."""
    t = m.transfer
    if t is None:
        return []
    lines = [f"Trained longer: {clean(t.headline)} ({t.runs} run(s), {t.seconds / 60:.1f} min of runs"
             f"{_wall(t.wall_seconds / 60)})"]
    if t.flagged:
        lines.append(f"!! #{t.experiment_id}'s confirmed gain {t.status} when trained longer ({t.steps} steps): "
                     "a person should look before shipping it")
    return lines


def _confirmation_words(c: ConfirmationRecord) -> str:
    who = f"#{c.experiment_id}" if c.experiment_id is not None else "-"
    return f"{clean(c.headline)} (best {who}, {c.runs} run(s), {c.seconds / 60:.1f} min of runs, {c.trigger.replace('_', ' ')})"


def _selection_words(c: ConfirmationRecord) -> str | None:
    if c.selection_diff is None:
        return None
    return (f"at selection: {c.selection_diff:+.3f} over the baseline (#{c.experiment_id} as the gate measured it "
            "while choosing it among the night's candidates: biased upwards by that choice)")


def _phases(raw: object) -> Split | None:
    """A decision's recorded phase seconds (None: recorded before phases were, or not a mapping)."""
    if not isinstance(raw, dict):
        return None
    got = {p: raw.get(f"{p}_seconds") for p in PHASES}
    return Split(**{p: float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
                    for p, v in got.items()})


def _split_words(sp: Split | None) -> str:
    """``; start-up 12 s, training 120 s, evaluation 30 s (74 % training)``, or "" when nothing is known."""
    if sp is None or all(getattr(sp, p) is None for p in PHASES):
        return ""
    words = [f"{name} {'?' if v is None else f'{v:.0f}'} s"
             for name, v in (("start-up", sp.startup), ("training", sp.train), ("evaluation", sp.eval))]
    share = sp.useful_share
    return "; " + ", ".join(words) + ("" if share is None else f" ({100 * share:.0f} % training)")


def _wall(minutes: float | None) -> str:
    return "" if minutes is None else f", {minutes:.1f} min wall"


def _per_hour(decisions: int, wall_minutes: float) -> str:
    """`` (12.3 decisions per hour of it)``: decisions per hour of their own wall clock (the agent's
    thinking, the baseline and the confirmation not counted); "" when no wall time is known."""
    return f" ({60.0 * decisions / wall_minutes:.1f} decisions per hour of it)" if wall_minutes > 0 else ""


def cost_lines(m: Morning) -> list[str]:
    """Runs and minutes per decision and per confirmation, in words. "min of runs": the runs' own
    training and evaluation time added up (compute); "min wall": the decision's clock time from its
    first run to its last look (less than the runs' sum when seeds run side by side, ``[loop]
    seed_jobs``; absent for decisions recorded before it was kept), and the decisions per hour of it."""
    out = []
    if m.decisions:
        runs = [d["runs"] for d in m.decisions]
        minutes = [d["minutes"] for d in m.decisions]
        walls = [d["wall_minutes"] for d in m.decisions if d["wall_minutes"] is not None]
        wall = _wall(sum(walls)) + _per_hour(len(runs), sum(walls)) if len(walls) == len(runs) else ""
        best = sum(d["best_runs"] for d in m.decisions)
        early = sum(1 for d in m.decisions if "early" in d["stopped"])
        out.append(f"decisions: {len(runs)}, {sum(runs)} run(s) ({best} of them the best gaining a seed), "
                   f"{sum(minutes):.1f} min of runs{wall}; per decision {statistics.fmean(runs):.1f} run(s), "
                   f"{statistics.fmean(minutes):.1f} min of runs; {early} stopped early"
                   + (_split_words(add(d["phases"] for d in m.decisions))
                      if all(d["phases"] is not None for d in m.decisions) else ""))
    for d in m.decisions[-_LAST:]:
        gained = f" + {d['best_runs']} of the best" if d["best_runs"] else ""
        out.append(f"  #{d['id']} {d['status']}: {d['candidate_runs']} run(s){gained}, {d['minutes']:.1f} min of runs"
                   f"{_wall(d['wall_minutes'])}; {clean(d['stopped'])}{_split_words(d['phases'])}")
    for c in m.confirmations:
        out.append(f"confirmation #{c.id}: {c.runs} run(s), {c.seconds / 60:.1f} min of runs"
                   f"{_wall(c.wall_seconds / 60)} ({c.status.replace('_', ' ')})")
    return out


def morning_lines(m: Morning) -> list[str]:
    """The report's head for a terminal: the confirmed headline first, the selection-time figure beside it."""
    c = m.confirmation
    if c is None:
        lines = [f"Confirmed: nothing yet for tag {m.tag or '-'} (no confirmation recorded; run `looper confirm`)"]
    else:
        lines = [f"Confirmed: {_confirmation_words(c)}"]
        sel = _selection_words(c)
        if sel:
            lines.append(f"  {sel}")
        if c.flagged:
            lines.append(f"!! #{c.experiment_id}'s kept gain did not confirm on fresh seeds: a person should look "
                         "before shipping it")
    lines += transfer_lines(m)
    lines += [f"  {x}" for x in cost_lines(m)]
    return lines


def morning_html(m: Morning) -> str:
    """The same as one HTML section (escaped)."""
    c = m.confirmation
    cls = "attn" if m.flagged else "attn ok" if c is not None and c.status == "confirmed" else ""
    if c is None:
        head = f"Confirmed: nothing yet for tag {html.escape(m.tag or '-')} (run <code>looper confirm</code>)"
        body = ""
    else:
        head = "Confirmed: " + html.escape(_confirmation_words(c))
        sel = _selection_words(c)
        body = f'<p class="sub">{html.escape(sel)}</p>' if sel else ""
        if c.flagged:
            body += (f"<p><strong>#{c.experiment_id}'s kept gain did not confirm on fresh seeds: a person should "
                     "look before shipping it.</strong></p>")
        body += "".join(f"<p>{html.escape(x)}</p>" for x in transfer_lines(m))
    costs = "".join(f"<li>{html.escape(x)}</li>" for x in cost_lines(m) if not x.startswith("  #"))
    rows = "".join(
        f"<tr><td>#{d['id']}</td><td>{html.escape(d['status'])}</td><td>{d['candidate_runs']}</td>"
        f"<td>{d['best_runs']}</td><td>{d['minutes']:.1f}</td>"
        f"<td>{'' if d['wall_minutes'] is None else format(d['wall_minutes'], '.1f')}</td>"
        f"<td>{html.escape(clean(d['stopped']))}</td></tr>"
        for d in m.decisions[-60:])
    table = ("<table><tr><th>decision</th><th>outcome</th><th>candidate runs</th><th>best gained</th>"
             f"<th>minutes of runs</th><th>minutes wall</th><th>stopped</th></tr>{rows}</table>") if rows else ""
    return (f'<section id="confirmed" class="{cls}"><h2>{head}</h2>{body}'
            f"{'<ul>' + costs + '</ul>' if costs else ''}{table}</section>")
