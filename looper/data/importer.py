"""`looper data import`: a labelled export into a data folder in looper's layout (docs/DATA.md).

Two passes over the export, one page at a time. The first reads every page's header, content hash
and boxes and runs the data checks (looper.core.data.check): any error refuses the import before a
file is written, naming the file and the annotation. The second decodes each page once (as 8-bit
grey, as evaluate.py reads it), cuts its tiles with the one tiler prepare.py uses
(looper.data.tiles), writes them with the page and forgets it: memory follows the largest page,
not the export. Files are written in a fixed order with fixed encodings, and the manifest with the
same hash rule as prepare.py's: importing the same export again gives the same bytes.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from looper.core.data.check import REIMPORT, DataFacts, DataProblem, data_problems, errors, few_in_test
from looper.core.data.split import draw_split, split_counts
from looper.data import tiles
from looper.data.facts import folder_facts, source_facts
from looper.data.formats import Source, SourcePage, guess_format, read_source
from looper.data.paths import BUDGET_FIX, DEFAULT_MAX_PIXELS, links_under, pixel_budget
from looper.data.pdfnames import DEFAULT_DPI
from looper.errors import UsageError

MANIFEST_VERSION = 2  # the layout of prepare.py's manifest, with "source" and "page_sha256" added


class DataError(UsageError):
    """The data is not usable: every problem named, nothing written (exit 2)."""

    def __init__(self, where: str, problems: list[DataProblem]) -> None:
        self.problems = problems
        shown = "\n  ".join(str(p) for p in problems[:30])
        more = f"\n  ... and {len(problems) - 30} more" if len(problems) > 30 else ""
        super().__init__(f"data {where}: {len(problems)} problem(s):\n  {shown}{more}")


@dataclass(frozen=True)
class Imported:
    out: Path
    format: str
    classes: tuple[str, ...]
    pages: dict[str, int]
    files: int
    hash: str
    warnings: tuple[DataProblem, ...]
    instances: dict[str, int] | None = None  # boxes per class over every split (None: not counted)


def _empty_target(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty folder: import into a new one (--out)")


def _splits(source: Source, seed: int) -> dict[str, str]:
    classes = {p.key: frozenset(str(b.cls) for b in p.boxes) for p in source.pages}
    fixed = {p.key: p.split for p in source.pages if p.split}
    return draw_split(classes, seed, fixed=fixed, declared=source.declared)


def _write(out: Path, rel: str, data: bytes, digests: dict[str, str]) -> None:
    path = out / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    digests[rel] = tiles.sha256_bytes(data)


def _truth(page: SourcePage, w: int, h: int, classes: tuple[str, ...]) -> list[dict[str, object]]:
    """The page's boxes as looper's page JSON holds them: class name, integer px box (rounded outward
    to whole pixels, as drawn)."""
    import math

    out = []
    for b in page.boxes:
        x1, y1, x2, y2 = b.box
        if b.normalized:
            x1, y1, x2, y2 = x1 * w, y1 * h, x2 * w, y2 * h
        name = classes[b.cls] if isinstance(b.cls, int) else b.cls
        box = [max(0, math.floor(x1 + 1e-6)), max(0, math.floor(y1 + 1e-6)), min(w, math.ceil(x2 - 1e-6)),
               min(h, math.ceil(y2 - 1e-6))]  # within the page (the check allowed EDGE_PX beyond it)
        out.append({"class": name, "box": box})
    return out  # in the export's order (deterministic): tiles' label lines follow it, as prepare.py's follow its drawing


def _pages_in_order(source: Source, split: dict[str, str]) -> Iterator[tuple[str, int, SourcePage]]:
    for s in ("train", "val", "test"):
        for i, page in enumerate(sorted((p for p in source.pages if split[p.key] == s), key=lambda p: p.key)):
            yield s, i, page


def _write_pages(source: Source, split: dict[str, str], out: Path, digests: dict[str, str],
                 max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
    index = {c: i for i, c in enumerate(source.classes)}
    for s, i, page in _pages_in_order(source, split):
        try:
            with pixel_budget(max_pixels), Image.open(page.image) as im:
                img = im.convert("L")
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:  # grew since it was checked
            raise DataError(source.where, [DataProblem(str(page.image), f"image over the pixel budget of {max_pixels:,} "
                                                       f"px per image ({exc})", BUDGET_FIX + REIMPORT)]) from None
        truth = _truth(page, img.width, img.height, source.classes)
        if s in ("val", "test"):
            _write(out, f"pages/{s}/page_{i:03d}.png", tiles.png_bytes(img), digests)
            _write(out, f"pages/{s}/page_{i:03d}.json",
                   tiles.page_json(s, page.key, img.width, img.height, truth), digests)
        if s in ("train", "val"):
            for rel, data in tiles.page_tiles(img, truth, index, s, f"{s}{i:03d}"):
                _write(out, rel, data, digests)
        del img


def _manifest(source: Source, split: dict[str, str], facts: DataFacts, seed: int,
              digests: dict[str, str]) -> dict[str, object]:
    by_split: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    for img in facts.images:
        if img.digest:
            by_split[img.split].append(img.digest)
    return {"version": MANIFEST_VERSION, "scale": "imported", "seed": seed, "classes": list(source.classes),
            "tile": tiles.TILE, "pages": split_counts(split),
            "source": {"format": source.format, "name": Path(source.where).name},
            "page_sha256": {s: sorted(v) for s, v in by_split.items()},
            "files": dict(sorted(digests.items())), "hash": tiles.manifest_hash(digests)}


def import_source(source: Source, out: Path, seed: int = 0, max_pixels: int = DEFAULT_MAX_PIXELS,
                  strict_bounds: bool = False, dpi: int = DEFAULT_DPI) -> Imported:
    """Check the export, then write it into ``out`` (absent or empty); a DataError names every
    problem and nothing is written. A box crossing a page edge is clipped (and counted in a warning)
    unless ``strict_bounds``. PDF pages are rendered at ``dpi`` into a temporary folder first."""
    if not any(p.pdf_page for p in source.pages):
        return _import_pages(source, out, seed, max_pixels, strict_bounds)
    from looper.data.pdf import render_pdf_pages

    with tempfile.TemporaryDirectory(prefix="looper-pdf-") as tmp:
        return _import_pages(render_pdf_pages(source, Path(tmp), dpi, max_pixels), out, seed, max_pixels,
                             strict_bounds)


def _import_pages(source: Source, out: Path, seed: int, max_pixels: int, strict_bounds: bool) -> Imported:
    split = _splits(source, seed)
    facts = source_facts(source, split, max_pixels=max_pixels, strict_bounds=strict_bounds)
    problems = data_problems(facts)
    if errors(problems):
        raise DataError(source.where, errors(problems))
    problems += few_in_test(facts)
    _empty_target(out)
    digests: dict[str, str] = {}
    out.mkdir(parents=True, exist_ok=True)
    try:
        _write_pages(source, split, out, digests, max_pixels)
        _write(out, "dataset.yaml", tiles.dataset_yaml(source.classes, f"written by looper data import "
                                                                       f"({source.format})"), digests)
        manifest = _manifest(source, split, facts, seed, digests)
        (out / "manifest.json").write_bytes(tiles.manifest_bytes(manifest))  # last: a manifest means a whole folder
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # no half-written data folder
        raise
    warnings = [p for p in problems if not p.blocking]
    counts = {c: 0 for c in source.classes}
    for p in source.pages:
        for b in p.boxes:
            name = source.classes[b.cls] if isinstance(b.cls, int) else b.cls
            counts[name] = counts.get(name, 0) + 1
    return Imported(out, source.format, source.classes, split_counts(split), len(digests) + 1, str(manifest["hash"]),
                    tuple(warnings), counts)


def copy_looper(src: Path, out: Path, input_size: int = 0) -> Imported:
    """A folder already in looper's layout: checked, then copied (its caches left behind). A symbolic link
    in it is refused by name before anything is read: a copy would carry its target's content."""
    links = links_under(src)
    if links:
        raise DataError(str(src), [DataProblem(str(p), "is a symbolic link (the import copies files, never a "
                                               "link's target)", "replace it with the file it stands for") for p in links])
    problems = data_problems(folder_facts(src, input_size))
    if errors(problems):
        raise DataError(str(src), errors(problems))
    _empty_target(out)
    if out.exists():
        out.rmdir()  # empty: copytree makes it
    shutil.copytree(src, out, ignore=shutil.ignore_patterns("*.cache"))
    m = json.loads((out / "manifest.json").read_text())
    return Imported(out, "looper", tuple(m.get("classes") or ()), dict(m.get("pages") or {}), len(m["files"]) + 1,
                    str(m.get("hash")), tuple(p for p in problems if not p.blocking))


def import_data(source: Path, out: Path, fmt: str | None = None, images: Path | None = None,
                seed: int = 0, max_pixels: int = DEFAULT_MAX_PIXELS, strict_bounds: bool = False,
                dpi: int = DEFAULT_DPI) -> Imported:
    """``looper data import SOURCE --out DIR [--format F] [--images DIR] [--max-pixels N] [--strict-bounds]
    [--dpi N]``."""
    source, out = Path(source), Path(out)
    fmt = fmt or guess_format(source)
    if fmt == "looper":
        return copy_looper(source, out)
    _empty_target(out)
    return import_source(read_source(source, fmt, images), out, seed, max_pixels, strict_bounds, dpi)
