"""The morning report for a terminal: rich tables rendered to plain text, one part per section."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from looper.core.verdicts.untrusted import clean as untrusted_clean
from looper.report.classes import class_intervals, class_rows, with_intervals
from looper.report.facts import gather
from looper.report.fmt import (
    MAX_TEXT_ROWS,
    OUTCOME_ORDER,
    clean,
    console,
    fmt,
    id_list,
    line_of,
    secs,
    shown,
    signed,
)
from looper.report.lines import cover_line, gpu_line, step_budget_line, worker_lines
from looper.report.night import Night
from looper.report.noise import nothing_kept
from looper.report.pictures import glance_lines, pictures
from looper.report.thresholds import tuned, tuned_lines
from looper.store import TIME_PARTS, Store

__all__ = ["render_text", "report_text"]


def report_text(store: Store, root: Path, since: str | None = None, console_width: int = 100) -> str:
    """The morning report for a terminal (rich, rendered to plain text), ending with the test
    pages in words (:func:`looper.report.pictures.glance_lines`; the drawings are in the HTML page)."""
    from looper.report.confirm import morning

    n = gather(store, root, since)
    text = render_text(n, console_width, morning(store, n.tag, n.since))
    lines = glance_lines(pictures(n, root, limit=0))
    if lines:
        text += "On the test pages (matched boxes at the pinned confidence; drawn in --html):\n"
        text += "".join(f"  {line}\n" for line in lines)
    text += "".join(f"{line}\n" for line in tuned_lines(tuned(n, root)))  # the val-tuned confidence (issue 47)
    return untrusted_clean(text)  # no escape code reaches a terminal


def render_text(n: Night, console_width: int = 100, confirmed: Any = None) -> str:
    from rich.text import Text

    con = console(console_width)
    window = f"since {n.since[:19]}" if n.since else "all history"
    con.print(Text(f"looper morning report: tag {n.tag or '-'}, {window}", style="bold"))
    if confirmed is not None:  # the confirmed headline first (looper.report.confirm)
        from looper.report.confirm import morning_lines

        for line in morning_lines(confirmed):
            con.print(Text(line))
    con.print()
    for part in (_attention, _glance, _kept, _near_misses, _verdicts, _crashes, _inconclusive, _exclusions,
                 _classes):
        part(con, n)
    _time(con, n)
    return con.file.getvalue()  # type: ignore[no-any-return]


def _table(title: str, columns: tuple[str, ...]) -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_edge=False)
    for col in columns:
        t.add_column(col)
    return t


def _more(con: Any, total: int, words: str) -> None:
    """The line that names what a part cut off past its first ``MAX_TEXT_ROWS`` items."""
    from rich.text import Text

    if total > MAX_TEXT_ROWS:
        con.print(Text(f"  ({total - MAX_TEXT_ROWS} {words})"))


def _latest(con: Any, title: str, items: list[Any], lines: Callable[[Any], Iterable[str]], words: str) -> None:
    """A titled list of the last ``MAX_TEXT_ROWS`` items (each as its lines), what it cut, a blank line."""
    from rich.text import Text

    if not items:
        return
    con.print(Text(title, style="bold"))
    for item in items[-MAX_TEXT_ROWS:]:
        for line in lines(item):
            con.print(Text(line))
    _more(con, len(items), words)
    con.print()


def _attention(con: Any, n: Night) -> None:
    """FIRST: anything that needs a person."""
    from rich.text import Text

    needs = [a for a in n.attention if a.level in ("halt", "warn")]
    con.print(Text(f"NEEDS A PERSON ({len(needs)})" if needs else "Needs a person: nothing", style="bold"))
    for a in n.attention:
        mark = {"halt": "!!", "warn": " !", "note": " -"}[a.level]
        con.print(Text(f"{mark} {a.text}"))
        if a.command:
            con.print(Text(f"     -> {a.command}"))
    con.print()


def _glance(con: Any, n: Night) -> None:
    from rich.text import Text

    con.print(Text("At a glance", style="bold"))
    total = len(n.experiments)
    by = ", ".join(f"{s} {n.counts[s]}" for s in OUTCOME_ORDER if n.counts.get(s))
    con.print(Text(f"{total} experiment(s): {by or 'none'}"))
    kept_ids = id_list(k.id for k in n.kept)
    con.print(Text(f"kept improvements: {len(n.kept)}" + (f" ({kept_ids})" if kept_ids else "")))
    best_line = "best: -"
    if n.best is not None:
        best_line = f"best {n.score_name}: {shown(n.best.score, n.sigma)} (#{n.best.id})"
        if n.baseline_score is not None:
            best_line += (f" vs baseline {shown(n.baseline_score, n.sigma)} ({n.baseline_source}): "
                          f"{shown((n.best.score or 0.0) - n.baseline_score, n.sigma, sign=True)}")
    con.print(Text(best_line))
    budget = step_budget_line(n)
    if budget:
        con.print(Text(budget))
    for line in nothing_kept(n):
        con.print(Text(f"kept nothing: {line}"))
    halts = [a for a in n.attention if a.level == "halt"]
    con.print(Text(f"halts and undelivered pages: {len(halts)}"))
    con.print()


def _kept(con: Any, n: Night) -> None:
    from rich.text import Text

    if not n.kept:
        return
    t = _table("Kept changes", ("id", n.score_name, "change", "description"))
    for k in n.kept[-MAX_TEXT_ROWS:]:
        before = f" vs #{k.best_before_id}" if k.best_before_id is not None else ""
        t.add_row(f"#{k.id}", fmt(k.score), Text(signed(k.delta) + before), Text(k.description))
    con.print(t)
    _more(con, len(n.kept), "earlier kept change(s): looper history, or the HTML report")
    con.print()


def _near_misses(con: Any, n: Night) -> None:
    from rich.text import Text

    if not n.near_misses:
        return
    t = _table("Near misses (beat the best, failed a class gate)", ("id", n.score_name, "vs best", "failed",
                                                                     "approve with"))
    for nm in sorted(n.near_misses, key=lambda x: -x.diff)[:MAX_TEXT_ROWS]:
        t.add_row(f"#{nm.id}", fmt(nm.score), signed(nm.diff), Text("; ".join(nm.class_reasons)), Text(nm.command))
    con.print(t)
    _more(con, len(n.near_misses), "more: the HTML report lists them all")
    con.print()


def _verdicts(con: Any, n: Night) -> None:
    """Each judged experiment: its score test in words (band, alpha, seeds) and its class failures."""
    _latest(con, "Verdicts against the noise (score: one-sided t-test on seeds; classes: the test in each reason)",
            sorted(n.judgements.values(), key=lambda j: j.id),
            lambda j: [f"  #{j.id} {j.outcome}: {j.words}",
                       *(f"      class gate: {with_intervals(reason)}" for reason in j.class_failures)],
            "earlier: the HTML report lists them all")


def _crashes(con: Any, n: Night) -> None:
    from rich.text import Text

    if not (n.crash_groups or n.vacuous):
        return
    t = _table("Crashes by failure signature", ("count", "signature", "experiments", "example"))
    for g in n.crash_groups[:MAX_TEXT_ROWS]:
        t.add_row(str(len(g.ids)), Text(g.signature), id_list(g.ids, 8), Text(g.example_reason))
    if len(n.crash_groups) > MAX_TEXT_ROWS:
        rest = n.crash_groups[MAX_TEXT_ROWS:]
        t.add_row(str(sum(len(g.ids) for g in rest)), f"({len(rest)} more signatures)", "", "")
    if n.vacuous:
        t.add_row(str(len(n.vacuous)), "(vacuous: no evidence)", id_list((e.id for e in n.vacuous), 8),
                  Text(clean(next(iter(n.vacuous[0].blocking), ""))))
    con.print(t)
    con.print()


def _inconclusive(con: Any, n: Night) -> None:
    _latest(con, "Inconclusive ideas (inside the noise band, or the noise unmeasured; may be retried)",
            n.inconclusive, lambda e: [f"  #{e.id} {fmt(e.score)}  {line_of(e.description)}"],
            "earlier: looper history --json")


def _exclusions(con: Any, n: Night) -> None:
    _latest(con, f"Exclusions learned ({len(n.exclusions)})", n.exclusions, lambda line: [f"  {line}"],
            "earlier: the HTML report lists them all")


def _classes(con: Any, n: Night) -> None:
    rows = class_rows(n)
    if not rows:
        return
    best_id = f"#{n.best.id}" if n.best else "-"
    t = _table(f"Per class: baseline {n.baseline_source} vs best {best_id} (biggest recall changes)",
               ("class", "support", "P base", "P best", "dP", "R base", "R best", "dR"))
    shown = sorted(rows, key=lambda r: -abs(r["d_recall"] or 0.0))[:12]
    for r in shown:
        name = r["class"] + (" (rare)" if r["rare"] else "")
        t.add_row(name, str(r["support"]), fmt(r["p_base"], 2), fmt(r["p_best"], 2), signed(r["d_precision"], 2),
                  fmt(r["r_base"], 2), fmt(r["r_best"], 2), signed(r["d_recall"], 2))
    con.print(t)
    con.print()
    cis = {r["class"]: r for r in class_intervals(n)}
    t = _table("The same classes' recall with 95% Wilson intervals (instances pooled over seeds)",
               ("class", "base found", "R base 95%", "best found", "R best 95%", "gate vs baseline"))
    for r in shown:
        ci = cis.get(r["class"])
        if ci is None:
            continue
        gate = "-" if ci["p"] is None else (f"p = {ci['p']:.2g}" + (": FAILS" if ci["fails"] else ""))
        t.add_row(r["class"], _of(ci["base_found"], ci["base_total"]), _ci(ci["base_lo"], ci["base_hi"]),
                  _of(ci["best_found"], ci["best_total"]), _ci(ci["best_lo"], ci["best_hi"]), gate)
    con.print(t)
    con.print()


def _of(found: int | None, total: int | None) -> str:
    return "-" if found is None or total is None else f"{found} of {total}"


def _ci(lo: float | None, hi: float | None) -> str:
    return "-" if lo is None or hi is None else f"{lo:.2f}-{hi:.2f}"


def _time(con: Any, n: Night) -> None:
    from rich.text import Text

    con.print(Text("Where the time went", style="bold"))
    total_s = sum(n.time.values())
    for part in TIME_PARTS:
        share = 100.0 * n.time[part] / total_s if total_s else 0.0
        con.print(Text(f"  {part:<8} {secs(n.time[part]):>10}  {share:5.1f}%  ({n.time_ids[part]} experiment(s))"))
    cover = cover_line(n)
    if cover:
        con.print(Text(cover))
    con.print(Text(gpu_line(n)))
    workers = worker_lines(n)
    if len(workers) > 1:
        con.print(Text("Workers", style="bold"))
        for line in workers:
            con.print(Text("  " + line))
