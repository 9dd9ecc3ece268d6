"""The pictures section of the HTML page: the confusion matrices (inline SVG) and the crops
where the best and the baseline differ (inline PNG), with a legend of the three box styles."""

from __future__ import annotations

import html
from typing import Any

from looper.core.scoring.matches import BACKGROUND, Confusion
from looper.report.pictures import STYLES, WORDS, Pictures, glance_lines

__all__ = ["PICTURES_CSS", "confusion_svg", "pictures_html"]

PICTURES_CSS = (
    ".crops{display:grid;grid-template-columns:1fr 1fr;gap:6px 14px;align-items:start}"
    ".crops figure{margin:0}.crops img{width:100%;max-width:512px;image-rendering:pixelated;border:1px solid #d0d7de}"
    ".crops figcaption{font-size:12px;color:#57606a}.crophead{grid-column:1/3;margin:10px 0 0;font-weight:600}"
    ".legend svg{vertical-align:middle}.legend span{margin-right:16px}"
)
_DASH = {"solid": "", "dashed": ' stroke-dasharray="7 5"', "dotted": ' stroke-dasharray="2 4"'}


def _h(text: Any) -> str:
    return "" if text is None else html.escape(str(text), quote=True)


def _fill(v: int, top: int, diagonal: bool, delta: bool) -> str:
    """A cell colour: counts green on the diagonal, red off it; changes blue when better, red when worse."""
    if v == 0 or top <= 0:
        return "#ffffff"
    a = 0.15 + 0.75 * min(1.0, abs(v) / top)
    if delta:
        good = (v > 0) == diagonal
        rgb = (9, 105, 218) if good else (207, 34, 46)
    else:
        rgb = (26, 127, 55) if diagonal else (207, 34, 46)
    return "#" + "".join(f"{round(255 - (255 - c) * a):02x}" for c in rgb)


def confusion_svg(c: Confusion, svg_id: str, title: str, against: Confusion | None = None) -> str:
    """The matrix as a grid, rows predicted, columns true; with ``against``, the change (c - against).
    Look-alike groups are blocks outlined and named along the left edge."""
    labels = list(dict.fromkeys([*c.labels, *(against.labels if against else ())]))
    labels = [x for x in labels if x != BACKGROUND] + [BACKGROUND]
    if against is not None:  # keep the best's order; classes only the baseline has go before background
        labels = [x for x in c.labels if x != BACKGROUND] + [x for x in labels if x not in c.labels] + [BACKGROUND]

    def value(a: str, b: str) -> int:
        return c.at(a, b) - (against.at(a, b) if against is not None else 0)

    vals = {(a, b): value(a, b) for a in labels for b in labels}
    top = max((abs(v) for v in vals.values()), default=0)
    cell, left, head, gw = 22, 150, 118, 118
    n = len(labels)
    width, height = gw + left + cell * n + 70, head + cell * n + 8
    out = [f'<svg id="{svg_id}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" aria-label="{_h(title)}" font-size="11">']
    x0, y0 = gw + left, head
    out.append('<text x="4" y="14" font-weight="600">rows: predicted; columns: true</text>')
    for j, b in enumerate(labels):
        x = x0 + j * cell + cell / 2 + 4
        out.append(f'<text transform="translate({x:.1f},{head - 4}) rotate(-60)" class="col">{_h(b)}</text>')
    # the grid once; only cells that hold a count are drawn (a 27 x 27 matrix stays small)
    out.append(f'<rect x="{x0}" y="{y0}" width="{cell * n}" height="{cell * n}" fill="#fff" stroke="#d0d7de"/>')
    out.append('<path stroke="#eaeef2" d="' + "".join(
        f"M{x0 + k * cell} {y0}v{cell * n}M{x0} {y0 + k * cell}h{cell * n}" for k in range(1, n)) + '"/>')
    for i, a in enumerate(labels):
        y = y0 + i * cell
        out.append(f'<text x="{x0 - 4}" y="{y + 15}" text-anchor="end" class="row">{_h(a)}</text>')
        for j, b in enumerate(labels):
            v = vals[(a, b)]
            if v == 0:
                continue
            fill = _fill(v, top, a == b and a != BACKGROUND, against is not None)
            txt = "" if v == 0 else (f"{v:+d}" if against is not None else str(v))
            what = (f"predicted {a}, true {b}: " + (f"{v:+d} vs the baseline" if against is not None else f"{v}"))
            out.append(f'<rect class="cm" data-pred="{_h(a)}" data-true="{_h(b)}" data-v="{v}" x="{x0 + j * cell}" '
                       f'y="{y}" width="{cell - 1}" height="{cell - 1}" fill="{fill}" stroke="#eaeef2">'
                       f'<title>{_h(what)}</title></rect>')
            if txt:
                light = ' style="fill:#fff"' if abs(v) > 0.6 * top else ""
                out.append(f'<text x="{x0 + j * cell + cell / 2:.1f}" y="{y + 15}" text-anchor="middle" '
                           f'font-size="{9 if len(txt) > 2 else 11}"{light}>{txt}</text>')
    for name, members in c.groups.items():
        idx = [labels.index(m) for m in members if m in labels]
        if not idx:
            continue
        lo, hi = min(idx), max(idx)
        side = (hi - lo + 1) * cell
        out.append(f'<rect class="group" data-group="{_h(name)}" x="{x0 + lo * cell - 1}" y="{y0 + lo * cell - 1}" '
                   f'width="{side + 1}" height="{side + 1}" fill="none" stroke="#24292f" stroke-width="2">'
                   f'<title>look-alike group {_h(name)}</title></rect>'
                   f'<line x1="{gw - 4}" x2="{gw - 4}" y1="{y0 + lo * cell + 2}" y2="{y0 + (hi + 1) * cell - 3}" '
                   f'stroke="#24292f" stroke-width="2"/>'
                   f'<text x="{gw - 8}" y="{y0 + lo * cell + 15}" text-anchor="end" font-weight="600">'
                   f'{_h(name.replace("_", " "))}</text>')
    out.append("</svg>")
    return "".join(out)


def _legend() -> str:
    items = []
    for kind, (color, style) in STYLES.items():
        items.append(f'<span class="key-{kind}"><svg width="34" height="12" aria-hidden="true"><line x1="1" x2="33" '
                     f'y1="6" y2="6" stroke="{color}" stroke-width="3"{_DASH[style]}/></svg> {_h(style)} '
                     f'{_h(color_word(kind))}: {_h(WORDS[kind])}</span>')
    return f'<p class="legend">{"".join(items)}</p>'


def color_word(kind: str) -> str:
    return {"tp": "green", "fp": "red", "fn": "orange"}[kind]


def _counts(c: dict[str, int]) -> str:
    return f"{c['tp']} found, {c['fp']} invented, {c['fn']} missed"


def pictures_html(p: Pictures | None) -> str:
    """The section ``#pictures``: where best and baseline differ, drawn; and the confusion matrices."""
    if p is None:
        return ""
    alone = bool(p.crops) and p.crops[0].baseline_png is None
    head = "where the best errs most" if alone else "where the best and the baseline differ"
    parts = [f'<section id="pictures"><h2>On the drawings: {head}</h2>']
    at = (f" at confidence {p.confidence:g} and IoU {p.iou:g}" if p.confidence is not None and p.iou is not None
          else "")
    if p.best is not None and alone:
        parts.append(f'<p class="sub">Test-page regions where {_h(p.best.label)} invents and misses most{_h(at)}; '
                     "each box labelled by its class.</p>")
    elif p.best is not None and p.baseline is not None:
        parts.append(f'<p class="sub">Test-page regions where {_h(p.best.label)} and {_h(p.baseline.label)} differ '
                     f'most{_h(at)}; each box labelled by its class.</p>')
    glance = glance_lines(p)
    if glance:
        parts.append("<ul class=\"glance\">" + "".join(f"<li>{_h(x)}</li>" for x in glance) + "</ul>")
    parts.append(_legend())
    for note in p.notes:
        parts.append(f'<p class="sub">{_h(note)}</p>')
    if p.crops:
        parts.append('<div class="crops">')
        for k, c in enumerate(p.crops, 1):
            r = c.region
            where = f"region {k}: {r.page}, x {r.box[0]:.0f}-{r.box[2]:.0f}, y {r.box[1]:.0f}-{r.box[3]:.0f}"
            what = "box(es) differ" if c.baseline_png is not None else "invented or missed"
            parts.append(f'<p class="crophead">{_h(where)} ({r.score} {what})</p>')
            for side, png, label in (("best", c.best_png, p.best.label if p.best else "best"),
                                     ("baseline", c.baseline_png, p.baseline.label if p.baseline else "baseline")):
                if png is None:
                    continue
                parts.append(f'<figure><img class="crop crop-{side}" alt="{_h(label)}, {_h(where)}" '
                             f'src="data:image/png;base64,{png}"><figcaption>{_h(label)}: '
                             f'{_h(_counts(c.counts[side]))}</figcaption></figure>')
        parts.append("</div>")
    parts.append("<h3>Which classes it confuses</h3>")
    if p.confusion_best is None:
        parts.append('<p class="sub">No confusion matrix: the best has no matched boxes recorded.</p>')
    else:
        parts.append('<p class="sub">Page-level, rows predicted, columns true, plus background both ways (a box on '
                     "nothing; a truth nothing found). Look-alike groups of program.md are outlined and sit first. "
                     "Empty cells are zero; hover a cell for what it counts.</p>")
        parts.append(f"<h4>{_h(p.best.label if p.best else 'best')}</h4>"
                     + confusion_svg(p.confusion_best, "confusion-best", "confusion matrix of the best"))
        if p.confusion_baseline is not None and p.baseline is not None and p.baseline.exp_id != p.best.exp_id:
            parts.append(f"<h4>Change against {_h(p.baseline.label)} (blue better, red worse)</h4>"
                         + confusion_svg(p.confusion_best, "confusion-delta", "confusion change against the baseline",
                                         against=p.confusion_baseline))
    parts.append("</section>")
    return "".join(parts)
