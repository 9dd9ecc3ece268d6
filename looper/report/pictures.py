"""The morning in pictures: where on the test pages the best model and the baseline differ,
drawn, and which classes each confuses (from the runs' MATCHES.json).

Only the report (what a person reads) comes here: the pages and their crops never reach an
agent's prompt, ``looper history`` or ``looper suggest`` (tests/report/test_pictures_private.py).

:func:`pictures` reads, for the night's best and its baseline, the MATCHES.json of their first
run (``runs/<tag>/<id>/<role>-s<seed>/``, a main run first) and the test pages of the
workspace's data folder, and returns :class:`Pictures`: the confusion matrices
(:func:`looper.core.scoring.matches.confusion`) and up to ``limit`` crops of the page regions where the
two differ most (:func:`looper.core.scoring.matches.differing_regions`), each drawn for both models as
an inline PNG: true positives solid green, false positives dashed red, misses dotted orange,
each box labelled by its class. Anything missing (no run folder, no MATCHES.json, no page
image) is said in words, never guessed.
"""

from __future__ import annotations

import base64
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper.core.scoring import matches as core_matches
from looper.core.scoring.matches import Confusion, Region
from looper.data.manifest import workspace_data_dir
from looper.report.night import Night

__all__ = ["STYLES", "Crop", "Pictures", "Side", "glance_lines", "matches_of", "pictures"]

#: The three ways a box is drawn (colour, line style), shared by the PNGs and the HTML legend.
STYLES: dict[str, tuple[str, str]] = {
    "tp": ("#1a9850", "solid"),
    "fp": ("#d73027", "dashed"),
    "fn": ("#e66101", "dotted"),
}
WORDS = {"tp": "found (true positive)", "fp": "invented (false positive)", "fn": "missed (false negative)"}
MAX_MATCHES_BYTES = 64 * 1024 * 1024  # a MATCHES.json larger than this is not read (said in words)
CROP = 256   # px of the page in one crop
SCALE = 2    # drawn at this many px per page px
LIMIT = 6    # crops per report
_PAGE_NAME = re.compile(r"[A-Za-z0-9_.-]+\.png")


@dataclass(frozen=True)
class Side:
    """One model shown: ``label`` (``best #12``), its MATCHES.json (None: ``problem`` says why)."""

    label: str
    exp_id: int
    matches: dict[str, Any] | None
    problem: str | None = None
    run: str | None = None  # the run folder it came from, relative to the workspace


@dataclass(frozen=True)
class Crop:
    region: Region
    best_png: str              # base64 PNG
    baseline_png: str | None   # None: the best drawn alone (nothing to compare with)
    counts: dict[str, dict[str, int]]  # side -> {"tp", "fp", "fn"} inside the crop


@dataclass(frozen=True)
class Pictures:
    best: Side | None
    baseline: Side | None
    iou: float | None = None
    confidence: float | None = None
    confusion_best: Confusion | None = None
    confusion_baseline: Confusion | None = None
    crops: list[Crop] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """Numbers only (no page names, no images): for ``looper report --json``."""
        def side(s: Side | None, c: Confusion | None) -> dict[str, Any] | None:
            if s is None:
                return None
            return {"experiment": s.exp_id, "confusion": c.as_json() if c is not None else None,
                    "problem": s.problem}
        change = None
        cb, cr = self.confusion_best, self.confusion_baseline
        if cb is not None and cr is not None:
            labels = [x for x in cb.labels if x != core_matches.BACKGROUND]
            labels += [x for x in cr.labels if x not in labels and x != core_matches.BACKGROUND]
            labels.append(core_matches.BACKGROUND)
            change = {"labels": labels, "rows": "predicted", "columns": "true",
                      "matrix": [[cb.at(a, b) - cr.at(a, b) for b in labels] for a in labels]}
        return {"iou": self.iou, "confidence": self.confidence, "best": side(self.best, cb),
                "baseline": side(self.baseline, cr), "change": change, "notes": list(self.notes)}


def glance_lines(p: Pictures, top: int = 5) -> list[str]:
    """The pictures in words for a terminal and the page's first lines: each side's found /
    invented / missed boxes on the test pages, and the best's most frequent confusions between
    classes (with the baseline's count of the same cell). No page names."""
    lines = []
    for s in (p.best, p.baseline):
        if s is not None and s.matches is not None:
            totals = {"tp": 0, "fp": 0, "fn": 0}
            for row in core_matches.implied_counts(s.matches).values():
                for k in totals:
                    totals[k] += row[k]
            lines.append(f"{s.label}: {totals['tp']} found, {totals['fp']} invented, {totals['fn']} missed "
                         f"on {len(s.matches['pages'])} test page(s)")
    bg = core_matches.BACKGROUND
    for side, c in ((p.best, p.confusion_best), (p.baseline, p.confusion_baseline)):
        if side is None or c is None or (side is p.baseline and p.best is not None and side.exp_id == p.best.exp_id):
            continue
        pairs = sorted(((v, a, b) for (a, b), v in c.cells.items() if a != b and bg not in (a, b) and v > 0),
                       key=lambda x: (-x[0], x[1], x[2]))[:top]
        if pairs:
            lines.append(f"{side.label} most confused: " + "; ".join(f"{b} taken for {a} {v}x" for v, a, b in pairs))
        else:
            lines.append(f"{side.label} takes no class for another")
    return lines


def matches_of(root: Path, tag: str, exp_id: int) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(the MATCHES.json object of an experiment's first run that has one, the run folder, a problem)."""
    folder = Path(root) / "runs" / tag / f"{exp_id:05d}"
    if not folder.is_dir():
        return None, None, f"no run folder runs/{tag}/{exp_id:05d}"
    runs = sorted((p for p in folder.iterdir() if p.is_dir()), key=lambda p: (not p.name.startswith("main-"), p.name))
    for run in runs:
        path = run / "MATCHES.json"
        if not path.is_file() or path.is_symlink():
            continue
        rel = str(path.relative_to(root))
        if path.stat().st_size > MAX_MATCHES_BYTES:
            return None, rel, f"{rel} is larger than {MAX_MATCHES_BYTES // 2**20} MiB: not read"
        try:
            obj = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            return None, rel, f"{rel} is not readable JSON ({type(exc).__name__})"
        bad = core_matches.problems(obj)
        if bad:
            return None, rel, f"{rel}: {bad[0]}"
        return obj, rel, None
    return None, None, (f"no MATCHES.json in runs/{tag}/{exp_id:05d} (evaluated before evaluate.py wrote one, "
                        "or its runs were removed)")


def pictures(n: Night, root: Path, limit: int = LIMIT) -> Pictures:
    """The pictures of the night's best and its baseline (see the module docstring)."""
    root = Path(root)
    if n.tag is None or n.best is None:
        return Pictures(None, None, notes=["no best model yet: nothing to draw"])
    sides: list[Side] = []
    base_id = n.baseline_id if n.baseline_id is not None else (n.baseline.id if n.baseline is not None else None)
    for label, exp_id in (("best", n.best.id), ("baseline", base_id)):
        if exp_id is None:
            continue
        obj, run, problem = matches_of(root, n.tag, exp_id)
        sides.append(Side(f"{label} #{exp_id}", exp_id, obj, problem, run))
    best = sides[0]
    base = sides[1] if len(sides) > 1 else None
    notes = [f"{s.label}: {s.problem}" for s in sides if s.problem]
    ref = best.matches or (base.matches if base else None)
    iou = float(ref["iou"]) if ref and isinstance(ref.get("iou"), (int, float)) else None
    conf = float(ref["confidence"]) if ref and isinstance(ref.get("confidence"), (int, float)) else None
    classes = [c for c in (ref or {}).get("classes") or [] if isinstance(c, str)]
    cb = core_matches.confusion([best.matches], iou or 0.5, classes) if best.matches else None
    cr = core_matches.confusion([base.matches], iou or 0.5, classes) if base and base.matches else None
    crops: list[Crop] = []
    if best.matches:
        alone = base is None or base.matches is None or base.exp_id == best.exp_id
        if alone:  # nothing to compare with: where the best errs most
            why = (f"the best is the baseline (#{best.exp_id})" if base is not None and base.exp_id == best.exp_id
                   else "the baseline has no matched boxes")
            notes.append(f"{why}: the regions where {best.label} invents and misses most, drawn alone")
        crops, more = _crops(best.matches, None if alone else base.matches,  # type: ignore[union-attr]
                             workspace_data_dir(root) / "pages" / "test", limit)
        notes += more
    return Pictures(best, base, iou, conf, cb, cr, crops, notes)


# ------------------------------------------------------------------------------ drawing
def _crops(best: dict[str, Any], base: dict[str, Any] | None, pages: Path,
           limit: int) -> tuple[list[Crop], list[str]]:
    """Crops where ``best`` and ``base`` differ most, drawn for both; with no ``base``, where
    ``best`` errs most, drawn for it alone."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow comes with Ultralytics
        return [], ["Pillow is not installed: no crops drawn"]
    sizes: dict[str, tuple[int, int]] = {}
    notes: list[str] = []
    names = [p["page"] for p in best["pages"]]
    for name in names:
        path = pages / name
        if not _PAGE_NAME.fullmatch(name) or not path.is_file():
            continue
        with Image.open(path) as im:
            sizes[name] = im.size
    missing = [x for x in names if x not in sizes]
    if missing:
        notes.append(f"{len(missing)} test page image(s) not found under {pages}: their regions are not drawn")
    both = {"pages": [p for p in best["pages"] if p["page"] in sizes]}
    if base is None:
        regions = core_matches.error_regions(both, CROP, limit, sizes)
        if not regions and sizes:
            notes.append("the best finds every box and invents none on every test page")
    else:
        regions = core_matches.differing_regions(both, base, CROP, limit, sizes)
        if not regions and sizes:
            notes.append("the best and the baseline find, miss and invent the same boxes on every test page")
    by = {"best": {p["page"]: p for p in best["pages"]},
          "base": {p["page"]: p for p in base["pages"]} if base is not None else {}}
    out = []
    decoded: dict[str, Any] = {}  # each page decoded once
    for r in regions:
        if r.page not in decoded:
            with Image.open(pages / r.page) as im:
                decoded[r.page] = im.convert("L")
        page = decoded[r.page]
        pngs: dict[str, str | None] = {"base": None}
        counts: dict[str, dict[str, int]] = {}
        for key in ("best", "base") if base is not None else ("best",):
            pngs[key], counts[key] = _draw(page, r, by[key][r.page])
        out.append(Crop(r, pngs["best"] or "", pngs["base"],
                        {"best": counts["best"], **({"baseline": counts["base"]} if "base" in counts else {})}))
    return out, notes


def _boxes_in(region: Region, page: dict[str, Any]) -> list[tuple[str, str, list[float]]]:
    """(kind tp|fp|fn, class, box) of one page's entries that touch the region."""
    x1, y1, x2, y2 = region.box
    out = []
    for kind, rows in (("fn", page["missed"]), ("tp", [r for r in page["predictions"] if r["match"] == "tp"]),
                       ("fp", [r for r in page["predictions"] if r["match"] == "fp"])):
        for r in rows:
            b = r["box"]
            if b[0] < x2 and x1 < b[2] and b[1] < y2 and y1 < b[3]:
                out.append((kind, str(r["class"]), b))
    return out


_GREYS = ((0, 0, 0), (85, 85, 85), (170, 170, 170), (255, 255, 255))
_KINDS = ("tp", "fp", "fn")
_INK = {k: len(_GREYS) + i for i, k in enumerate(_KINDS)}  # palette index of each kind's colour


def _rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def _line(draw: Any, a: tuple[float, float], b: tuple[float, float], color: int, style: str, width: int) -> None:
    if style == "solid":
        draw.line([a, b], fill=color, width=width)
        return
    on, off = (7, 5) if style == "dashed" else (2, 4)
    length = max(abs(b[0] - a[0]), abs(b[1] - a[1]))
    t = 0.0
    while t < length:
        e = min(t + on, length)
        p = (a[0] + (b[0] - a[0]) * t / length, a[1] + (b[1] - a[1]) * t / length)
        q = (a[0] + (b[0] - a[0]) * e / length, a[1] + (b[1] - a[1]) * e / length)
        draw.line([p, q], fill=color, width=width)
        t += on + off


def _draw(page: Any, region: Region, entries: dict[str, Any]) -> tuple[str, dict[str, int]]:
    """One crop of ``page`` with the boxes of one model drawn; (base64 PNG, counts by kind)."""
    from PIL import Image, ImageDraw, ImageFont

    x1, y1, x2, y2 = (int(round(v)) for v in region.box)
    crop = page.crop((x1, y1, x2, y2)).resize(((x2 - x1) * SCALE, (y2 - y1) * SCALE), Image.NEAREST)
    # a palette image: the page in 4 greys (black lines on white), then the three box colours; small and fast
    grey = crop.point([v * len(_GREYS) // 256 for v in range(256)])
    img = Image.frombytes("P", grey.size, grey.tobytes())
    img.putpalette([c for rgb in (*_GREYS, *(_rgb(STYLES[k][0]) for k in _KINDS)) for c in rgb])
    draw = ImageDraw.Draw(img)
    try:
        font: Any = ImageFont.load_default(size=12)
    except TypeError:  # pragma: no cover - Pillow before 10.1: the small bitmap font
        font = ImageFont.load_default()
    counts = {"tp": 0, "fp": 0, "fn": 0}
    for kind, cls, b in _boxes_in(region, entries):
        color, style = _INK[kind], STYLES[kind][1]
        bx = [(b[0] - x1) * SCALE, (b[1] - y1) * SCALE, (b[2] - x1) * SCALE, (b[3] - y1) * SCALE]
        if kind == "fn":  # a miss is drawn a little outside the truth box, so a found box beside it stays visible
            bx = [bx[0] - 3, bx[1] - 3, bx[2] + 3, bx[3] + 3]
        corners = [(bx[0], bx[1]), (bx[2], bx[1]), (bx[2], bx[3]), (bx[0], bx[3])]
        for i in range(4):
            _line(draw, corners[i], corners[(i + 1) % 4], color, style, 2)
        counts[kind] += 1
        # predictions are labelled above their box, misses below theirs: the two never cover each other
        label = cls if kind != "fn" else f"missed: {cls}"
        above = kind != "fn" and bx[1] >= 15
        tx, ty = bx[0], (bx[1] - 15 if above else bx[3] + 2)
        w = draw.textlength(label, font=font)
        if ty + 14 > img.height:  # no room below: above it
            ty = max(0, bx[1] - 15)
        tx = max(0, min(tx, img.width - w - 3))  # a label near the right edge stays whole
        draw.rectangle([tx, ty, tx + w + 3, ty + 14], fill=len(_GREYS) - 1)
        draw.text((tx + 1, ty), label, fill=color, font=font)
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=6)  # level 9: 12 % smaller, 2.4 x slower
    return base64.b64encode(buf.getvalue()).decode("ascii"), counts
