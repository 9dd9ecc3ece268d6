"""The report's plots as hand-written inline SVG (no script, nothing fetched).

Every plotted point carries its experiment id (``data-id`` and a ``<title>`` tooltip ``#id``);
so does every error bar (``id="err-<id>"`` on the score plot, ``id="ci-base-<class>"`` and
``id="ci-best-<class>"`` on the per-class recall plot).
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from looper.report.classes import class_intervals, class_rows
from looper.report.fmt import OUTCOME_ORDER, secs
from looper.report.night import Night, SeedBar
from looper.report.noise import seed_bars
from looper.store import TIME_PARTS, ExperimentRow

__all__ = ["COLORS", "TIME_COLORS", "class_interval_svg", "heatmap_svg", "outcome_svg", "score_svg", "time_svg"]

COLORS: dict[str, str] = {
    "keep": "#1a7f37", "discard": "#8c959f", "inconclusive": "#d4a72c", "crash": "#cf222e",
    "vacuous": "#bc4c00", "error": "#82071e", "interrupted": "#6e40c9", "running": "#0969da",
    "pending": "#57606a", "baseline": "#0969da",
}
TIME_COLORS: dict[str, str] = {"agent": "#8250df", "train": "#0969da", "eval": "#1a7f37", "harness": "#bf8700"}


def _h(text: Any) -> str:
    """Escape text that is already redacted (experiment rows come from the store redacted)."""
    return "" if text is None else html.escape(str(text), quote=True)


class _Frame:
    """The score plot's plot area and its two scales (experiment id -> x, score -> y)."""

    left, right, top, bottom = 64, 16, 16, 56

    def __init__(self, width: int, height: int, ids: tuple[int, int], scores: list[float]) -> None:
        self.width, self.height = width, height
        self.pw, self.ph = width - self.left - self.right, height - self.top - self.bottom
        x0, x1 = ids
        self.x0, self.x1 = (x0 - 1, x1 + 1) if x1 == x0 else (x0, x1)
        y0, y1 = min(scores), max(scores)
        pad = (y1 - y0) * 0.06 or 0.01
        self.y0, self.y1 = y0 - pad, y1 + pad

    def x(self, i: float) -> float:
        return self.left + (i - self.x0) / (self.x1 - self.x0) * self.pw

    def y(self, v: float) -> float:
        return self.top + (1.0 - (v - self.y0) / (self.y1 - self.y0)) * self.ph


def _axes(f: _Frame, score_name: str) -> list[str]:
    out = [f'<rect x="{f.left}" y="{f.top}" width="{f.pw}" height="{f.ph}" fill="#fff" stroke="#d0d7de"/>']
    for k in range(6):
        v = f.y0 + (f.y1 - f.y0) * k / 5
        y = f.y(v)
        out.append(f'<line x1="{f.left}" x2="{f.left + f.pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>'
                   f'<text x="{f.left - 6}" y="{y + 4:.1f}" text-anchor="end">{v:.3f}</text>')
    nt = min(10, f.x1 - f.x0)
    for k in range(nt + 1):
        i = round(f.x0 + (f.x1 - f.x0) * k / max(nt, 1))
        out.append(f'<text x="{f.x(i):.1f}" y="{f.top + f.ph + 30}" text-anchor="middle">#{i}</text>')
    out.append(f'<text x="{f.left + f.pw / 2}" y="{f.height - 4}" text-anchor="middle">experiment id</text>'
               f'<text x="14" y="{f.top + f.ph / 2}" transform="rotate(-90 14 {f.top + f.ph / 2})" '
               f'text-anchor="middle">{html.escape(score_name)}</text>')
    return out


def _running_best_line(f: _Frame, first: float | None, steps: list[tuple[int, float]]) -> str:
    """The running best: a step line through the kept experiments."""
    pts: list[tuple[float, float]] = []
    cur = first
    if cur is not None:
        pts.append((f.x(f.x0), f.y(cur)))
    for i, s in steps:
        if cur is not None:
            pts.append((f.x(i), f.y(cur)))
        pts.append((f.x(i), f.y(s)))
        cur = s
    if cur is not None:
        pts.append((f.x(f.x1), f.y(cur)))
    if len(pts) < 2:
        return ""
    d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
    return f'<polyline id="running-best" points="{d}" fill="none" stroke="{COLORS["keep"]}" stroke-width="2"/>'


def _points(f: _Frame, exps: list[ExperimentRow], scored: list[ExperimentRow]) -> list[str]:
    out = []
    # unscored experiments as ticks below the plot area
    for e in exps:
        if e.score is None and e.status not in ("running", "pending"):
            x = f.x(e.id)
            c = COLORS.get(e.status, "#57606a")
            out.append(f'<line class="pt-unscored {e.status}" data-id="{e.id}" x1="{x:.1f}" x2="{x:.1f}" '
                       f'y1="{f.top + f.ph + 4}" y2="{f.top + f.ph + 14}" stroke="{c}" stroke-width="2"><title>#{e.id} '
                       f'{e.status}: {_h(e.description)[:120]}</title></line>')
    # the scored points, keeps last so they sit on top
    for e in sorted(scored, key=lambda e: e.status == "keep"):
        score = float(e.score or 0.0)
        x, y = f.x(e.id), f.y(score)
        st = "baseline" if e.kind == "baseline" else e.status.value
        c = COLORS.get(st, "#57606a")
        r = 5 if e.status == "keep" else 3
        stroke = ' stroke="#fff" stroke-width="1.5"' if e.status == "keep" else ""
        out.append(f'<circle class="pt {st}" data-id="{e.id}" data-score="{score:.6f}" '
                   f'cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{c}"{stroke}><title>#{e.id} {st} '
                   f'{score:.4f}: {_h(e.description)[:120]}</title></circle>')
    return out


def _seed_bars(f: _Frame, bars: list[SeedBar]) -> str:
    """Error bars: an experiment's mean score +- its band, with caps, one group per experiment."""
    if not bars:
        return ""
    out = ['<g id="seed-bars">']
    for b in bars:
        x, lo, hi = f.x(b.id), f.y(b.mean - b.band), f.y(b.mean + b.band)
        seeds = " ".join(f"{v:.4f}" for v in b.scores)
        title = (f"<title>#{b.id} mean {b.mean:.4f} ± {b.band:.4f} over {len(b.scores)} seeds ({seeds}); "
                 f"{_h(b.what)}</title>")
        out.append(f'<line class="errbar" id="err-{b.id}" data-id="{b.id}" data-mean="{b.mean:.6f}" '
                   f'data-band="{b.band:.6f}" data-seeds="{len(b.scores)}" x1="{x:.1f}" x2="{x:.1f}" '
                   f'y1="{hi:.1f}" y2="{lo:.1f}" stroke="#24292f" stroke-width="1.2">{title}</line>')
        for y in (hi, lo):
            out.append(f'<line class="errcap" data-id="{b.id}" x1="{x - 4:.1f}" x2="{x + 4:.1f}" y1="{y:.1f}" '
                       f'y2="{y:.1f}" stroke="#24292f" stroke-width="1.2"/>')
    out.append("</g>")
    return "".join(out)


def score_svg(n: Night, width: int = 1100, height: int = 360) -> str:
    """Score over experiments: every scored experiment a point, keeps marked and joined as the
    running best, unscored ones (crash, vacuous, error, interrupted) as ticks under the axis;
    an experiment measured with several seeds gets an error bar (mean +- its band)."""
    exps = n.experiments
    scored = n.scored
    if not scored:
        return '<p class="sub">No measured experiment in this window: nothing to plot.</p>'
    in_window = {e.id for e in exps}
    first_best = n.best_before.get(exps[0].id, (None, None))[0]
    steps = [(i, s) for i, s in n.running_best if i in in_window]
    bars = [b for b in seed_bars(n) if b.id in in_window]
    ys = [float(e.score or 0.0) for e in scored] + [s for _, s in steps]
    ys += [v for v in (first_best, n.baseline_score) if v is not None]
    ys += [b.mean + d for b in bars for d in (-b.band, b.band)]
    f = _Frame(width, height, (exps[0].id, exps[-1].id), ys)
    out = [f'<svg id="score-plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" aria-label="score over experiments">', *_axes(f, n.score_name)]
    if n.baseline_score is not None:
        y = f.y(n.baseline_score)
        out.append(f'<line class="baseline" x1="{f.left}" x2="{f.left + f.pw}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="{COLORS["baseline"]}" stroke-dasharray="6 4"><title>baseline {html.escape(n.baseline_source)}'
                   f' {n.baseline_score:.4f}</title></line>')
    out.append(_running_best_line(f, first_best, steps))
    out.append(_seed_bars(f, bars))
    out.extend(_points(f, exps, scored))
    out.append("</svg>")
    legend = "".join(f'<span><i class="sw" style="background:{COLORS[s]}"></i>{s}</span>'
                     for s in ("baseline", "keep", "discard", "inconclusive", "crash", "vacuous", "error",
                               "interrupted"))
    bars_note = ("; I: mean of several seeds ± the noise band of its verdict (the baseline: ± the band a "
                 "one-seed candidate must beat)") if bars else ""
    return "".join(out) + f'<div class="legend">{legend}<span>— running best (kept), '\
                          f'- - baseline; ticks under the axis: no score{bars_note}</span></div>'


def class_interval_svg(n: Night, width: int = 760) -> str:
    """Per class (rows): the baseline's and the best's recall with 95 % Wilson intervals."""
    rows = class_intervals(n)
    if not rows:
        return '<p class="sub">No per-class counts to draw intervals from.</p>'
    label_w, right, top, rh = 190, 24, 28, 18
    pw = width - label_w - right
    height = top + rh * len(rows) + 24
    base_id = n.baseline_id
    best_id = n.best.id if n.best else None

    def x(v: float) -> float:
        return label_w + v * pw

    out = [f'<svg id="class-intervals" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" aria-label="per-class recall with 95% intervals">']
    for k in range(6):
        v = k / 5
        out.append(f'<line x1="{x(v):.1f}" x2="{x(v):.1f}" y1="{top - 6}" y2="{top + rh * len(rows)}" '
                   f'stroke="#eaeef2"/><text x="{x(v):.1f}" y="{top - 10}" text-anchor="middle">{v:.1f}</text>')
    for i, r in enumerate(rows):
        y = top + i * rh + rh / 2
        c = html.escape(r["class"])
        colour = ' style="fill:#cf222e"' if r["fails"] else ""
        mark = " ✗" if r["fails"] else (" ★" if r["rare"] else "")
        out.append(f'<text x="{label_w - 8}" y="{y + 4:.1f}" text-anchor="end"{colour}>{c}{mark}</text>')
        for side, dy, colour_, who in (("base", -3, COLORS["baseline"], base_id), ("best", 3, COLORS["keep"], best_id)):
            lo, hi, rec = r[f"{side}_lo"], r[f"{side}_hi"], r[f"{side}_recall"]
            if lo is None or hi is None or rec is None:
                continue
            name = "baseline" if side == "base" else "best"
            src = f"#{who}" if who is not None else n.baseline_source
            title = (f"<title>{c} {name} {src}: {r[f'{side}_found']} of {r[f'{side}_total']} found, recall "
                     f"{rec:.2f}, 95% interval {lo:.2f} to {hi:.2f} (Wilson)</title>")
            data = (f'data-class="{c}" data-side="{side}" data-lo="{lo:.6f}" data-hi="{hi:.6f}" '
                    f'data-recall="{rec:.6f}"' + (f' data-id="{who}"' if who is not None else ""))
            out.append(f'<line class="ci {side}" id="ci-{side}-{c}" {data} x1="{x(lo):.1f}" x2="{x(hi):.1f}" '
                       f'y1="{y + dy:.1f}" y2="{y + dy:.1f}" stroke="{colour_}" stroke-width="2">{title}</line>'
                       f'<circle class="ci-pt {side}" data-class="{c}" cx="{x(rec):.1f}" cy="{y + dy:.1f}" r="2.5" '
                       f'fill="{colour_}">{title}</circle>')
    y_axis = top + rh * len(rows) + 16
    out.append(f'<text x="{label_w + pw / 2}" y="{y_axis}" text-anchor="middle">recall (instances pooled over '
               f'seeds), 95% Wilson interval</text></svg>')
    legend = (f'<div class="legend"><span><i class="sw" style="background:{COLORS["baseline"]}"></i>baseline '
              f'{html.escape(n.baseline_source)}</span><span><i class="sw" style="background:{COLORS["keep"]}"></i>'
              f'best{" #" + str(best_id) if best_id is not None else ""}</span><span>✗ the gate failed the class; '
              f'★ rare</span></div>')
    return "".join(out) + legend


def _blend(c0: tuple[int, int, int], c1: tuple[int, int, int], t: float) -> str:
    t = max(0.0, min(1.0, t))
    r, g, b = (round(a + (b_ - a) * t) for a, b_ in zip(c0, c1, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def _heat_cell(v: float | None, delta: bool) -> tuple[str, str, bool]:
    """(fill, text, strong) of one heat-map cell."""
    if v is None:
        return "#eaeef2", "–", False
    if delta:
        fill = _blend((255, 255, 255), (26, 127, 55) if v > 0 else (207, 34, 46), abs(v) / 0.2)
        return fill, f"{v:+.2f}", abs(v) > 0.12
    return _blend((255, 255, 255), (9, 105, 218), v), f"{v:.2f}", v > 0.6


def heatmap_svg(n: Night) -> str:
    """Per class (rows): precision and recall, baseline, best and the change (columns)."""
    rows = class_rows(n)
    if not rows:
        return '<p class="sub">No per-class figures recorded.</p>'
    cols = [("P base", "p_base", False), ("P best", "p_best", False), ("ΔP", "d_precision", True),
            ("R base", "r_base", False), ("R best", "r_best", False), ("ΔR", "d_recall", True)]
    label_w, cw, ch, top = 190, 74, 20, 26
    width, height = label_w + cw * len(cols) + 10, top + ch * len(rows) + 8
    best_id = n.best.id if n.best else None
    out = [f'<svg id="class-heatmap" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" aria-label="per-class heat map">']
    for j, (name, _, _) in enumerate(cols):
        out.append(f'<text x="{label_w + j * cw + cw / 2}" y="16" text-anchor="middle">{name}</text>')
    for i, r in enumerate(rows):
        y = top + i * ch
        label = html.escape(r["class"]) + (" ★" if r["rare"] else "")
        weight = ' font-weight="600"' if r["rare"] else ""
        out.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end"{weight}>{label}</text>')
        for j, (name, key, delta) in enumerate(cols):
            fill, txt, strong = _heat_cell(r[key], delta)
            src = f"#{best_id}" if "best" in name else (f"#{n.baseline_id}" if n.baseline_id is not None else "")
            who = f"best {src} vs baseline {n.baseline_source}" if delta else (src or n.baseline_source)
            dark = ' style="fill:#fff"' if strong else ""
            out.append(f'<rect class="cell" x="{label_w + j * cw}" y="{y}" width="{cw - 2}" height="{ch - 2}" '
                       f'fill="{fill}"><title>{html.escape(r["class"])} {name} {txt} ({html.escape(who)}); '
                       f'support {r["support"]}</title></rect>'
                       f'<text x="{label_w + j * cw + cw / 2 - 1}" y="{y + 14}" text-anchor="middle"{dark}>{txt}</text>')
    out.append("</svg>")
    return "".join(out)


def _bar(svg_id: str, label: str, size: tuple[int, int, int], parts: list[tuple[str, float, str]],
         seg: Callable[[str, float], tuple[str, str, float]]) -> list[str]:
    """A horizontal stacked bar, left open for a caption: ``size`` (width, height, bar height),
    ``parts`` (class, value, colour), ``seg(class, value)`` -> (tooltip, label, min width to label)."""
    width, height, bar_h = size
    text_y, text_dx = (bar_h + 8) // 2, bar_h // 4 - 1
    total = sum(v for _, v, _ in parts)
    out = [f'<svg id="{svg_id}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" aria-label="{label}">']
    x = 0.0
    for name, value, colour in parts:
        w = value / total * width
        if w <= 0:
            continue
        title, text, min_w = seg(name, value)
        out.append(f'<rect class="seg {name}" x="{x:.1f}" y="0" width="{w:.1f}" height="{bar_h}" '
                   f'fill="{colour}"><title>{title}</title></rect>')
        if w > min_w:
            out.append(f'<text x="{x + text_dx:.1f}" y="{text_y}" style="fill:#fff">{text}</text>')
        x += w
    return out


def time_svg(n: Night, width: int = 900) -> str:
    total = sum(n.time.values())
    if total <= 0:
        return '<p class="sub">No timings recorded.</p>'
    out = _bar("time-bar", "where the time went", (width, 54, 28),
               [(p, n.time[p], TIME_COLORS[p]) for p in TIME_PARTS],
               lambda p, v: (f"{p}: {secs(v)} ({100 * v / total:.1f}%)", f"{p} {100 * v / total:.0f}%", 70))
    out.append(f'<text x="0" y="46">total {secs(total)} over {len(n.experiments)} experiment(s)</text></svg>')
    return "".join(out)


def outcome_svg(n: Night, width: int = 900) -> str:
    total = sum(n.counts.values())
    if not total:
        return ""
    out = _bar("outcome-bar", "experiments by outcome", (width, 30, 26),
               [(s, n.counts[s], COLORS[s]) for s in OUTCOME_ORDER if n.counts.get(s)],
               lambda s, c: (f"{s}: {int(c)}", f"{s} {int(c)}", 60))
    out.append("</svg>")
    return "".join(out)
