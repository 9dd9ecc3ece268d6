"""The morning report as ONE self-contained HTML page: inline CSS, the inline SVG of
:mod:`looper.report.svg`.

No script, no font, image or style from anywhere else: the page opens the same offline,
in a mail attachment or years later. Every experiment the page names links to its row
(``#exp-<id>``), and every plotted point carries its id.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from looper.core.verdicts.untrusted import clean as untrusted_clean
from looper.report.classes import class_intervals, class_rows, with_intervals
from looper.report.facts import gather
from looper.report.fmt import OUTCOME_ORDER, clean, fmt, secs, shown, signed
from looper.report.lines import cover_line, gpu_line, step_budget_line, worker_lines
from looper.report.night import Night
from looper.report.noise import nothing_kept
from looper.report.pictures import Pictures, pictures
from looper.report.pictures_html import PICTURES_CSS, pictures_html
from looper.report.svg import (
    COLORS,
    TIME_COLORS,
    class_interval_svg,
    heatmap_svg,
    outcome_svg,
    score_svg,
    time_svg,
)
from looper.report.thresholds import Tuned, tuned, tuned_html
from looper.store import TIME_PARTS, Store

__all__ = ["CSS", "render_html", "write_html"]

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1f2328;background:#f6f8fa}
main{max-width:1180px;margin:0 auto;padding:18px 24px 60px}
h1{font-size:22px;margin:6px 0 2px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
.sub{color:#57606a;margin:0 0 14px}
section{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:10px 16px 14px;margin:14px 0}
.attn{border-left:6px solid #cf222e} .attn.ok{border-left-color:#1a7f37}
.attn li{margin:4px 0} .lvl-halt{color:#82071e;font-weight:600} .lvl-warn{color:#9a6700} .lvl-note{color:#57606a}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
code.cmd{background:#eaeef2;padding:1px 6px;border-radius:4px}
table{border-collapse:collapse;margin:6px 0;font-size:13px} th,td{padding:3px 8px;border-bottom:1px solid #eaeef2;text-align:left;vertical-align:top}
th{background:#f6f8fa} td.n{text-align:right;font-variant-numeric:tabular-nums}
.pos{color:#1a7f37} .neg{color:#cf222e} .rare{font-weight:600}
.kpis{display:flex;gap:12px;flex-wrap:wrap} .kpi{border:1px solid #d0d7de;border-radius:6px;padding:6px 12px;min-width:140px}
.kpi b{display:block;font-size:20px}
pre.diff{background:#f6f8fa;padding:8px;overflow:auto;max-height:420px;border-radius:6px}
pre.diff .a{color:#1a7f37} pre.diff .d{color:#cf222e} pre.diff .h{color:#6e7781}
.rationale{color:#424a53;white-space:pre-wrap}
svg text{font:11px system-ui,sans-serif;fill:#424a53}
.legend span{display:inline-block;margin-right:14px} .sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px}
details summary{cursor:pointer;color:#0969da}
.why{border-left:4px solid #d4a72c;padding-left:8px} .fails{color:#cf222e;font-weight:600}
"""


def _e(text: Any) -> str:
    """Escape free text that has not been redacted yet."""
    return html.escape(clean(text), quote=True)


def _h(text: Any) -> str:
    """Escape text that is already redacted (experiment rows come from the store redacted)."""
    return "" if text is None else html.escape(str(text), quote=True)


def _num_class(v: float | None) -> str:
    if v is None or abs(v) < 1e-12:
        return "n"
    return "n pos" if v > 0 else "n neg"


def _exp(i: int | None) -> str:
    return "" if i is None else f'<a href="#exp-{i}">#{i}</a>'


def _exp_list(ids: tuple[int, ...] | list[int], limit: int = 60) -> str:
    shown = " ".join(_exp(i) for i in ids[:limit])
    return shown + (f" … (+{len(ids) - limit})" if len(ids) > limit else "")


def write_html(store: Store, root: Path, out: Path, since: str | None = None) -> Path:
    """Write the morning report as ONE self-contained HTML page; returns ``out``."""
    from looper.report.confirm import morning

    n = gather(store, root, since)
    page = untrusted_clean(render_html(n, morning(store, n.tag, n.since), pictures(n, root),
                                             tuned(n, root)))  # no control character in the page
    out = Path(out)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    return out


# --------------------------------------------------------------------------- sections


def _diff_html(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        cls = ("h" if line.startswith(("@@", "diff ", "index ", "---", "+++")) else
               "a" if line.startswith("+") else "d" if line.startswith("-") else "")
        esc = html.escape(line)
        lines.append(f'<span class="{cls}">{esc}</span>' if cls else esc)
    return "\n".join(lines)


def _attention_html(n: Night) -> str:
    needs = [a for a in n.attention if a.level in ("halt", "warn")]
    cls = "attn" if needs else "attn ok"
    head = f"Needs a person ({len(needs)})" if needs else "Needs a person: nothing"
    items = []
    for a in n.attention:
        cmd = f' <code class="cmd">{html.escape(a.command)}</code>' if a.command else ""
        ref = f" {_exp(a.exp_id)}" if a.exp_id is not None else ""
        items.append(f'<li class="lvl-{a.level}" data-level="{a.level}">{_e(a.text)}{ref}{cmd}</li>')
    body = f"<ul>{''.join(items)}</ul>" if items else ""
    return f'<section id="attention" class="{cls}"><h2>{head}</h2>{body}</section>'


def _glance_html(n: Night) -> str:
    best = n.best
    best_s = shown(best.score, n.sigma) if best else "-"
    delta = None
    if best and best.score is not None and n.baseline_score is not None:
        delta = float(best.score) - n.baseline_score
    halts = sum(1 for a in n.attention if a.level == "halt")
    kpis = [
        ("experiments", str(len(n.experiments)), ""),
        ("kept improvements", str(len(n.kept)), " ".join(_exp(k.id) for k in n.kept[:12])
         + (" …" if len(n.kept) > 12 else "")),
        (f"best {html.escape(n.score_name)}", best_s, _exp(best.id) if best else ""),
        ("baseline", shown(n.baseline_score, n.sigma), html.escape(n.baseline_source)),
        ("best vs baseline", f'<span class="{_num_class(delta)}">{shown(delta, n.sigma, sign=True)}</span>', ""),
        ("halts / undelivered pages", str(halts), ""),
    ]
    cards = "".join(f'<div class="kpi" data-kpi="{html.escape(k)}">{k}<b>{v}</b>{s}</div>' for k, v, s in kpis)
    counts = ", ".join(f"{s} {n.counts[s]}" for s in OUTCOME_ORDER if n.counts.get(s))
    table = "".join(f'<tr><td><i class="sw" style="background:{COLORS[s]}"></i>{s}</td>'
                    f'<td class="n" data-outcome="{s}">{n.counts[s]}</td></tr>'
                    for s in OUTCOME_ORDER if n.counts.get(s))
    budget = step_budget_line(n)
    budget_html = f'<p id="step-budget">{html.escape(budget)}</p>' if budget else ""
    why = "".join(f"<li>{html.escape(line)}</li>" for line in nothing_kept(n))
    why_html = f'<div id="why-nothing-kept" class="why"><b>Kept nothing:</b><ul>{why}</ul></div>' if why else ""
    return (f'<section id="glance"><h2>The night at a glance</h2><div class="kpis">{cards}</div>'
            f'<p>{counts or "no experiments"}</p>{budget_html}{why_html}{outcome_svg(n)}'
            f'<table id="outcomes"><tr><th>outcome</th><th>experiments</th></tr>{table}</table></section>')


def _kept_html(n: Night) -> str:
    if not n.kept:
        why = "; ".join(nothing_kept(n))
        return ('<section id="kept"><h2>Kept changes</h2><p class="sub">Nothing was kept'
                + (f": {html.escape(why)}" if why else ".") + "</p></section>")
    parts = []
    for k in n.kept:
        before = f" vs {_exp(k.best_before_id)} {fmt(k.best_before)}" if k.best_before_id is not None else ""
        commit = f" <code>{html.escape((k.commit or '')[:10])}</code>" if k.commit else ""
        parts.append(
            f'<div class="kept" id="exp-{k.id}" data-id="{k.id}"><h3>#{k.id}{commit}: {html.escape(k.description)}</h3>'
            f'<p>{html.escape(n.score_name)} <b>{fmt(k.score)}</b> '
            f'<span class="{_num_class(k.delta)}">{signed(k.delta)}</span>{before}</p>'
            + (f'<p class="noise">{html.escape(n.judgements[k.id].words)}</p>' if k.id in n.judgements else "")
            + f'<p class="rationale">{html.escape(k.rationale) or "<i>no rationale recorded</i>"}</p>'
            f'<details><summary>diff of train.py</summary><pre class="diff">{_diff_html(k.diff)}</pre></details></div>')
    return f'<section id="kept"><h2>Kept changes ({len(n.kept)})</h2>{"".join(parts)}</section>'


def _near_html(n: Night) -> str:
    if not n.near_misses:
        return ('<section id="near-misses"><h2>Near misses</h2><p class="sub">No candidate beat the best '
                'and failed only a class gate.</p></section>')
    rows = "".join(
        f'<tr id="exp-{m.id}" data-id="{m.id}"><td>#{m.id}</td><td>{html.escape(m.description)}</td>'
        f'<td class="n">{fmt(m.score)}</td><td class="{_num_class(m.diff)}">{signed(m.diff)}'
        f'{" vs " + _exp(m.best_before_id) if m.best_before_id is not None else ""}</td>'
        f'<td>{"<br>".join(html.escape(r) for r in m.class_reasons)}</td>'
        f'<td><code class="cmd">{html.escape(m.command)}</code></td></tr>' for m in n.near_misses)
    return (f'<section id="near-misses"><h2>Near misses ({len(n.near_misses)})</h2><p class="sub">Beat the best overall '
            f'but failed a class gate. A person may accept the trade by approving it as the new baseline.</p>'
            f'<table><tr><th>id</th><th>description</th><th>{html.escape(n.score_name)}</th><th>vs best</th>'
            f'<th>failed</th><th>approve with</th></tr>{rows}</table></section>')


def _verdicts_html(n: Night) -> str:
    """Each judged experiment: the score test in words (band, alpha, seeds) and its class failures."""
    if not n.judgements:
        return ""
    rows = []
    for j in sorted(n.judgements.values(), key=lambda j: j.id):
        band = "-" if j.band is None else f"{j.band:.4f}"
        classes = "<br>".join(f'<span class="fails">{html.escape(with_intervals(r))}</span>' for r in j.class_failures)
        rows.append(f'<tr class="verdict" data-verdict-id="{j.id}" data-where="{html.escape(j.where)}">'
                    f'<td>{_exp(j.id)}</td><td>{html.escape(j.outcome)}</td>'
                    f'<td class="{_num_class(j.diff)}">{signed(j.diff)}</td><td class="n">{band}</td>'
                    f'<td class="n">{j.n_candidate}+{j.n_best}</td><td>{html.escape(j.words)}</td>'
                    f'<td>{classes or "-"}</td></tr>')
    return ('<section id="verdicts"><h2>Verdicts against the noise</h2><p class="sub">Each judged experiment: '
            'its mean score minus the current best\'s, the noise band (the smallest difference the one-sided '
            't-test on seeds calls significant at this look\'s alpha), the seeds on each side (candidate+best), '
            'and every class the gate failed with its test in words.</p>'
            f'<details{" open" if len(rows) <= 40 else ""}><summary>{len(rows)} judged experiment(s)</summary>'
            '<table id="verdict-table"><tr><th>id</th><th>outcome</th><th>vs best</th><th>band</th><th>seeds</th>'
            f'<th>score test</th><th>class gates failed</th></tr>{"".join(rows)}</table></details></section>')


def _failures_html(n: Night) -> str:
    out = ['<section id="crashes"><h2>Crashes by failure signature</h2>']
    if n.crash_groups:
        rows = "".join(
            f'<tr class="crash-group" data-count="{len(g.ids)}"><td class="n">{len(g.ids)}</td>'
            f'<td><code>{html.escape(g.signature)}</code></td><td>{_exp_list(g.ids)}</td>'
            f'<td>{html.escape(g.example_reason)}</td></tr>' for g in n.crash_groups)
        out.append(f'<table><tr><th>count</th><th>signature</th><th>experiments</th><th>example</th></tr>{rows}</table>')
    else:
        out.append('<p class="sub">No crashes.</p>')
    if n.vacuous:
        items = "".join(f'<li id="exp-{e.id}">#{e.id} {_h(e.description)}: '
                        f'{_h("; ".join(e.blocking))}</li>' for e in n.vacuous)
        out.append(f'<h3>Vacuous (exited cleanly, left no evidence; never counted)</h3><ul>{items}</ul>')
    if n.errors:
        items = "".join(f'<li id="exp-{e.id}">#{e.id} {_h(e.description)}: '
                        f'{_h("; ".join(e.blocking))}</li>' for e in n.errors)
        out.append(f'<h3>Harness errors</h3><ul>{items}</ul>')
    out.append("</section>")
    out.append('<section id="inconclusive"><h2>Inconclusive ideas</h2>')
    if n.inconclusive:
        items = "".join(f'<li id="exp-{e.id}">#{e.id} {fmt(e.score)} {_h(e.description)}'
                        f' <span class="sub">{_h("; ".join(e.blocking))}</span></li>'
                        for e in n.inconclusive)
        out.append(f'<p class="sub">Inside the noise band after reruns, or the noise unmeasured; not exclusions, may be retried.</p><ul>{items}</ul>')
    else:
        out.append('<p class="sub">None.</p>')
    out.append("</section>")
    out.append(f'<section id="exclusions"><h2>Exclusions learned ({len(n.exclusions)})</h2>')
    if n.exclusions:
        out.append("<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in n.exclusions) + "</ul>")
    else:
        out.append('<p class="sub">None.</p>')
    out.append("</section>")
    return "".join(out)


def _classes_html(n: Night) -> str:
    rows = class_rows(n)
    best_id = _exp(n.best.id) if n.best else "-"
    head = (f'<section id="classes"><h2>Per class: baseline {html.escape(n.baseline_source)} vs best {best_id}</h2>'
            f'<p class="sub">★ rare: support below the median. Δ = best − baseline.</p>')
    if not rows:
        return head + '<p class="sub">No per-class figures recorded.</p></section>'
    trs = "".join(
        f'<tr class="{"rare" if r["rare"] else ""}" data-class="{html.escape(r["class"])}">'
        f'<td>{html.escape(r["class"])}{" ★" if r["rare"] else ""}</td><td class="n">{r["support"]}</td>'
        f'<td class="n">{fmt(r["p_base"], 3)}</td><td class="n">{fmt(r["p_best"], 3)}</td>'
        f'<td class="{_num_class(r["d_precision"])}">{signed(r["d_precision"], 3)}</td>'
        f'<td class="n">{fmt(r["r_base"], 3)}</td><td class="n">{fmt(r["r_best"], 3)}</td>'
        f'<td class="{_num_class(r["d_recall"])}">{signed(r["d_recall"], 3)}</td></tr>' for r in rows)
    table = (f'<table id="class-table"><tr><th>class</th><th>support</th><th>P baseline</th><th>P best</th><th>ΔP</th>'
             f'<th>R baseline</th><th>R best</th><th>ΔR</th></tr>{trs}</table>')
    return head + heatmap_svg(n) + table + _intervals_html(n) + "</section>"


def _intervals_html(n: Night) -> str:
    """The per-class recall of the baseline and the best with 95 % Wilson intervals: plot and table."""
    rows = class_intervals(n)
    if not rows:
        return ""

    def side(r: dict[str, Any], s: str) -> str:
        if r[f"{s}_found"] is None:
            return '<td class="n">-</td><td class="n">-</td>'
        return (f'<td class="n">{r[f"{s}_found"]} of {r[f"{s}_total"]}</td>'
                f'<td class="n">{r[f"{s}_lo"]:.2f}–{r[f"{s}_hi"]:.2f}</td>')

    trs = []
    for r in rows:
        fails = ' class="fails"' if r["fails"] else ""
        gate = "-" if r["p"] is None else f"p = {r['p']:.2g} ({html.escape(str(r['test']))})"
        trs.append(f'<tr data-ci-class="{html.escape(r["class"])}"{fails}><td>{html.escape(r["class"])}</td>'
                   f'{side(r, "base")}{side(r, "best")}<td>{gate}{" FAILS" if r["fails"] else ""}</td></tr>')
    source = ("from the best's verdict (the gate's pooled counts)" if any(r["source"] == "gate" for r in rows)
              else "from recall x support x seeds")
    return (f'<h3>Recall with 95% intervals</h3><p class="sub">Wilson intervals of each class\'s recall, '
            f'instances pooled over seeds, {source}. Overlapping intervals are not a difference.</p>'
            + class_interval_svg(n)
            + '<table id="class-interval-table"><tr><th>class</th><th>baseline found</th><th>baseline 95%</th>'
              f'<th>best found</th><th>best 95%</th><th>gate vs baseline</th></tr>{"".join(trs)}</table>')


def _time_html(n: Night) -> str:
    rows = "".join(f'<tr><td><i class="sw" style="background:{TIME_COLORS[p]}"></i>{p}</td><td class="n" data-seconds="{n.time[p]:.3f}">{secs(n.time[p])}</td>'
                   f'<td class="n">{n.time_ids[p]}</td></tr>' for p in TIME_PARTS)
    cover = cover_line(n)
    return (f'<section id="time"><h2>Where the time went</h2>{time_svg(n)}'
            f'<table><tr><th>part</th><th>time</th><th>experiments reporting it</th></tr>{rows}</table>'
            + (f'<p id="runs-training">{html.escape(cover.strip())}</p>' if cover else "")
            + f'<p>{html.escape(gpu_line(n).strip())}</p>'
            + "".join(f"<p>{html.escape(line)}</p>" for line in worker_lines(n)) + "</section>")


def _all_html(n: Night) -> str:
    # experiments without an anchor in another section get theirs here, so every #id link lands
    anchored = ({k.id for k in n.kept} | {x.id for x in n.near_misses}
                | {e.id for e in (*n.vacuous, *n.errors, *n.inconclusive)})
    rows = []
    for e in n.experiments:
        why = e.why
        anchor = "" if e.id in anchored else f' id="exp-{e.id}"'
        rows.append(f'<tr data-id="{e.id}"{anchor}><td>#{e.id}</td><td>{html.escape(e.kind)}</td>'
                    f'<td>{html.escape(e.status)}</td><td class="n">{fmt(e.score)}</td>'
                    f'<td>{_h(e.description)}</td><td>{_h(why)[:200]}</td></tr>')
    return (f'<section id="all"><details><summary>Every experiment in this window ({len(n.experiments)})</summary>'
            f'<table><tr><th>id</th><th>kind</th><th>status</th><th>{html.escape(n.score_name)}</th>'
            f'<th>description</th><th>why</th></tr>{"".join(rows)}</table></details></section>')


def _earlier_html(n: Night, body: str) -> str:
    """Anchors for experiments before this window that the page links to (the baseline, the
    best before the first kept change ...), so that every ``#id`` link lands somewhere."""
    linked = {int(i) for i in re.findall(r'href="#exp-(\d+)"', body)}
    anchored = {int(i) for i in re.findall(r'id="exp-(\d+)"', body)}
    missing = sorted(linked - anchored)
    if not missing:
        return ""
    keeps = dict(n.running_best)
    rows = []
    for i in missing:
        what = []
        if n.baseline is not None and i == n.baseline.id:
            what.append("the tag-start baseline")
        if i == n.baseline_id and n.baseline_source.startswith("approved:"):
            what.append(f"the approved baseline {n.baseline_source}")
        if n.best is not None and i == n.best.id:
            what.append("the current best")
        if i in keeps:
            what.append(f"kept, {html.escape(n.score_name)} {keeps[i]:.4f}")
        rows.append(f'<tr id="exp-{i}" data-id="{i}"><td>#{i}</td><td>{"; ".join(what) or "-"}</td></tr>')
    return (f'<section id="earlier"><h2>Earlier experiments referenced</h2><p class="sub">Before this window; '
            f'<code>looper history</code> has them in full.</p><table><tr><th>id</th><th>what</th></tr>'
            f'{"".join(rows)}</table></section>')


def render_html(n: Night, confirmed: Any = None, pics: Pictures | None = None, thresholds: Tuned | None = None) -> str:
    """The whole page as one string (``confirmed``: looper.report.confirm.Morning, the headline;
    ``pics`` (:func:`looper.report.pictures.pictures`) adds the drawings and the confusion matrices;
    ``thresholds`` (:func:`looper.report.thresholds.tuned`) the val-tuned confidence per class)."""
    from looper.report.confirm import morning_html

    window = f"since {html.escape(n.since[:19])}" if n.since else "all history"
    title = f"looper morning report: {html.escape(n.tag or '-')}"
    body = [
        f"<h1>{title}</h1><p class=\"sub\">{window}; scores are {html.escape(n.score_name)}; "
        f"every number names its experiment (#id).</p>",
        *([morning_html(confirmed)] if confirmed is not None else []),
        _attention_html(n),
        _glance_html(n),
        f'<section id="score"><h2>Score over experiments</h2>{score_svg(n)}</section>',
        _classes_html(n),
        pictures_html(pics),
        tuned_html(thresholds) if thresholds is not None else "",
        _kept_html(n),
        _near_html(n),
        _verdicts_html(n),
        _failures_html(n),
        _time_html(n),
        _all_html(n),
    ]
    body.append(_earlier_html(n, "".join(body)))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{title}</title><style>{CSS}{PICTURES_CSS}</style></head><body><main>"
            + "\n".join(body) + "</main></body></html>\n")
