"""The tuned confidence in the report (issue 47): per class, the F1 on the test pages at the pinned 0.25 beside
the F1 at the threshold that maximised it on the val split, for the night's best and its baseline.

Read from ``runs/<tag>/<exp>/threshold/THRESHOLD.json`` (written at a night's end by looper/night/tuned.py;
the rule: looper/core/scoring/threshold.py). The gate and every score keep the pinned confidence; this is
what a person could tune when shipping. A missing or unreadable file is "not measured", with the reason.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper.report.fmt import fmt, num, signed
from looper.report.night import Night

__all__ = ["Side", "Tuned", "tuned", "tuned_html", "tuned_lines"]

MAX_BYTES = 4 * 1024 * 1024  # a THRESHOLD.json larger than this is not read (said in words)
PINNED = 0.25


@dataclass(frozen=True)
class Side:
    """One experiment's tuned thresholds: ``measured`` with its ``rows`` (per class), or why not."""

    label: str
    experiment: int
    measured: bool
    reason: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    fixed: float | None = None
    tuned: float | None = None
    weights: str = ""
    seconds: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {"experiment": self.experiment, "status": "measured" if self.measured else "not measured",
                "reason": self.reason or None, "weighted_f1_fixed": self.fixed, "weighted_f1_tuned": self.tuned,
                "classes": self.rows}


@dataclass(frozen=True)
class Tuned:
    best: Side | None
    baseline: Side | None

    def as_json(self) -> dict[str, Any]:
        return {"confidence": PINNED, "best": self.best.as_json() if self.best else None,
                "baseline": self.baseline.as_json() if self.baseline else None}


def tuned(n: Night, root: Path) -> Tuned:
    """The night's best's and its baseline's THRESHOLD.json (the baseline's only when it is another experiment)."""
    rank = {c: i for i, c in enumerate(n.class_order)}  # the data's classes in its manifest's order
    best = _side(root, n.tag, n.best.id, f"best #{n.best.id}", rank) if n.best is not None and n.tag else None
    base = None
    if n.baseline_id is not None and n.tag and (n.best is None or n.baseline_id != n.best.id):
        base = _side(root, n.tag, n.baseline_id, f"baseline #{n.baseline_id}", rank)
    return Tuned(best, base)


def _side(root: Path, tag: str, exp_id: int, label: str, rank: dict[str, int]) -> Side:
    rel = f"runs/{tag}/{exp_id:05d}/threshold/THRESHOLD.json"
    path = Path(root) / rel
    if not path.is_file() or path.is_symlink():
        return Side(label, exp_id, False, "no threshold evaluation of it ran (one runs at a night's end, "
                                          "[confirm] tuned_thresholds)")
    if path.stat().st_size > MAX_BYTES:
        return Side(label, exp_id, False, f"{rel} is larger than {MAX_BYTES // 2**20} MiB: not read")
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return Side(label, exp_id, False, f"{rel} is not readable JSON ({type(exc).__name__})")
    if not isinstance(obj, dict) or obj.get("status") != "measured":
        why = obj.get("reason") if isinstance(obj, dict) else None
        return Side(label, exp_id, False, str(why or f"{rel} says it measured nothing"))
    rows = [r for r in obj.get("classes") or [] if isinstance(r, dict) and isinstance(r.get("class"), str)]
    rows.sort(key=lambda r: (rank.get(r["class"], len(rank)), r["class"]))
    seconds = obj.get("seconds")
    return Side(label, exp_id, True, rows=rows, fixed=num(obj.get("weighted_f1_fixed")),
                tuned=num(obj.get("weighted_f1_tuned")), weights=str(obj.get("weights") or ""),
                seconds=num(seconds))


def _headline(s: Side) -> str:
    if not s.measured:
        return f"{s.label}: not measured: {s.reason}"
    gain = None if s.fixed is None or s.tuned is None else s.tuned - s.fixed
    return (f"{s.label}: weighted F1 on the test pages {fmt(s.fixed, 3)} at {PINNED} -> {fmt(s.tuned, 3)} with "
            f"each class at its val threshold ({signed(gain, 3)}; {s.weights or 'one run'}, "
            f"{fmt(s.seconds, 1)} s)")


def _threshold(r: dict[str, Any]) -> str:
    t = num(r.get("threshold"))
    return fmt(t, 3) if t is not None else "none"


def _range(r: dict[str, Any]) -> str:
    """Where every threshold gives the same val F1 (the threshold is its middle): ``0.050-0.100``."""
    v = r.get("val_range")
    if not (isinstance(v, list) and len(v) == 2 and all(num(x) is not None for x in v)):
        return "-"
    return f"{fmt(num(v[0]), 3)}-{fmt(num(v[1]), 3)}"


def tuned_lines(t: Tuned) -> list[str]:
    """The section in words for the text report: each side's headline, the best's table."""
    sides = [s for s in (t.best, t.baseline) if s is not None]
    if not sides:
        return []
    out = [f"Confidence: test F1 at the pinned {PINNED} and at each class's F1-maximising val threshold "
           "(report only; the gate keeps the pinned one)"]
    out += [f"  {_headline(s)}" for s in sides]
    best = t.best
    if best is not None and best.measured and best.rows:
        out.append(f"  {'class':<22} {'val truth':>9} {'val thr':>8} {'val range':>11} {'F1 ' + str(PINNED):>8} "
                   f"{'F1 thr':>8}  note")
        for r in best.rows:
            out.append((f"  {r['class'][:22]:<22} {r.get('val_support', 0)!s:>9} {_threshold(r):>8} {_range(r):>11} "
                        f"{fmt(num(r.get('test_f1_fixed')), 3):>8} {fmt(num(r.get('test_f1_tuned')), 3):>8}  "
                        f"{r.get('why') or ''}").rstrip())
    return out


def tuned_html(t: Tuned) -> str:
    """The section of the HTML page (empty without a best)."""
    sides = [s for s in (t.best, t.baseline) if s is not None]
    if not sides:
        return ""
    head = ('<section id="thresholds"><h2>Confidence: the pinned 0.25 and a val-tuned threshold</h2>'
            '<p class="sub">Per class, the threshold that maximises F1 on the val split (the middle of the range of '
            'thresholds that give that F1), and the F1 it gives on the test pages beside the F1 at the pinned '
            f'confidence. Report only: the gate and every score keep {PINNED}. With few val instances of a class its '
            'threshold is a noisy choice.</p>')
    parts = [f'<p>{html.escape(_headline(s))}</p>' for s in sides]
    for s in sides:
        if s.measured and s.rows:
            parts.append(_table(s))
    return head + "".join(parts) + "</section>"


def _table(s: Side) -> str:
    trs = "".join(
        f'<tr data-class="{html.escape(r["class"])}"><td>{html.escape(r["class"])}</td>'
        f'<td class="n">{html.escape(str(r.get("val_support", 0)))}</td><td class="n">{_threshold(r)}</td>'
        f'<td class="n">{_range(r)}</td>'
        f'<td class="n">{fmt(num(r.get("val_f1")), 3)}</td>'
        f'<td class="n">{fmt(num(r.get("test_f1_fixed")), 3)}</td><td class="n">{fmt(num(r.get("test_f1_tuned")), 3)}</td>'
        f'<td>{html.escape(str(r.get("why") or ""))}</td></tr>' for r in s.rows)
    return (f'<table class="thresholds" id="thresholds-{s.experiment}"><caption>{html.escape(s.label)}</caption>'
            '<tr><th>class</th><th>val truth</th><th>val threshold</th><th>same val F1 from-to</th><th>val F1 at it</th>'
            f'<th>test F1 at {PINNED}</th><th>test F1 at the val threshold</th><th>note</th></tr>{trs}</table>')
