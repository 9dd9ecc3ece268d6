"""Readers of labelled exports: COCO JSON, an Ultralytics (YOLO) data.yaml, looper's own layout.

Annotations only: a reader returns every page's image path, split (when the export gives one) and
boxes, and never opens an image (the import streams them one at a time, looper.data.importer).
Read with json and PyYAML: the formats are small JSON/YAML/text files, and reading them here keeps
images out of memory (a library data set object that holds every image would not).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from looper.data.paths import OUTSIDE_FIX, escape_problem, named_path_problem, roots_of
from looper.errors import UsageError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
PAGE_SUFFIXES = (*IMAGE_SUFFIXES, ".pdf")  # a PDF's pages are rendered by the import (looper.data.pdf)
SPLIT_NAMES = {"train": "train", "val": "val", "valid": "val", "validation": "val", "test": "test"}
FORMATS = ("coco", "yolo", "looper")


class FormatError(UsageError):
    """An export that cannot be read at all (its JSON/YAML), naming the file."""


@dataclass(frozen=True)
class SourceBox:
    """One box as the export writes it: ``where`` names the file and annotation id or label line;
    ``cls`` a class name (str) or index (int); ``box`` x1, y1, x2, y2 in px, or in 0..1 of the image
    when ``normalized`` (YOLO). ``problem``: the line or entry could not be read."""

    where: str
    cls: str | int
    box: tuple[float, float, float, float]
    normalized: bool = False
    problem: str | None = None


@dataclass(frozen=True)
class SourcePage:
    key: str  # unique and stable: the image path relative to the export
    image: Path
    split: str | None
    boxes: tuple[SourceBox, ...]
    refused: tuple[str, str] | None = None  # (file, why): a path the import may not read (looper.data.paths)
    pdf_page: int | None = None  # ``image`` is a PDF and this its page (from 1), rendered by the import
    size: tuple[int, int] | None = None  # the export's width and height of the page in px, when it gives them


@dataclass(frozen=True)
class Source:
    format: str
    where: str
    classes: tuple[str, ...]
    pages: tuple[SourcePage, ...]
    declared: tuple[str, ...] = ()  # the splits the export names (some may hold no page)
    ignored: tuple[str, ...] = ()  # what the reader left out, in words (a warning each): orphan labels


def guess_format(source: Path) -> str:
    """coco (a .json file, or a folder of split folders holding one each), yolo (a .yaml file, or a
    folder holding data.yaml), looper (a folder holding manifest.json)."""
    source = Path(source)
    if source.is_file():
        if source.suffix.lower() == ".json":
            return "coco"
        if source.suffix.lower() in (".yaml", ".yml"):
            return "yolo"
    elif source.is_dir():
        if (source / "manifest.json").is_file():
            return "looper"
        if any((source / n).is_file() for n in ("data.yaml", "dataset.yaml", "data.yml")):
            return "yolo"
        if _coco_split_files(source):
            return "coco"
    elif not source.exists():
        raise FormatError(f"{source} does not exist")
    raise FormatError(f"{source}: cannot tell its format (a COCO .json file, an Ultralytics data.yaml, or a "
                      "looper data folder with manifest.json); name it with --format coco|yolo|looper")


def _load(path: Path, what: str) -> Any:
    """The file's JSON or YAML; a FormatError that names the file and the place, never its content."""
    try:
        text = path.read_text()
        return json.loads(text) if what == "JSON" else yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise FormatError(f"{path} is not readable {what}: {exc.problem or type(exc).__name__}{at}") from None
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        why = f"{type(exc).__name__}: {exc}" if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise FormatError(f"{path} is not readable {what} ({why})") from None


def _coco_split_files(folder: Path) -> dict[str, Path]:
    """split -> the one .json file in each split folder (Roboflow's COCO layout: train/valid/test)."""
    out = {}
    for sub in sorted(folder.iterdir()):
        found = sorted(sub.glob("*.json")) if sub.is_dir() and sub.name.lower() in SPLIT_NAMES else []
        if len(found) == 1:
            out[SPLIT_NAMES[sub.name.lower()]] = found[0]
    return out


def _coco_classes(cats: list[dict[str, Any]], used: set[Any]) -> list[dict[str, Any]]:
    """The categories in id order, without an unused parent category (Roboflow writes the data set's
    name as category 0, the supercategory of every real one)."""
    parents = {c.get("supercategory") for c in cats}
    return sorted((c for c in cats if c.get("id") in used or c.get("name") not in parents), key=lambda c: c["id"])


def _coco_doc(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[Any, str], dict[Any, tuple]]:
    """(the COCO document, its categories in id order, image id -> file_name, image id -> (width, height));
    duplicate image ids refused."""
    doc = _load(path, "JSON")
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), list) for k in ("images", "annotations", "categories")):
        raise FormatError(f"{path} is not COCO: it needs 'images', 'annotations' and 'categories' lists")
    try:
        used = {a.get("category_id") for a in doc["annotations"]}
        cats = _coco_classes(doc["categories"], used)
        files: dict[Any, str] = {}
        sizes = {im["id"]: (im.get("width"), im.get("height")) for im in doc["images"]}
        for im in doc["images"]:
            if im["id"] in files:
                raise FormatError(f"{path}: image id {im['id']!r} is listed twice ({files[im['id']]!r} and "
                                  f"{str(im['file_name'])!r}); give each image its own id and export again")
            files[im["id"]] = str(im["file_name"])
        for c in cats:
            str(c["name"])
    except (KeyError, TypeError, AttributeError) as exc:
        raise FormatError(f"{path}: a category or image lacks its id or name/file_name ({exc!r})") from None
    return doc, cats, files, sizes


def _images_base(path: Path, names: list[str], images: Path | None) -> Path:
    """The folder a COCO file's file_names are relative to: ``images`` when given, else the first of the
    places the common exports put them (beside the JSON, in ``images/`` beside it, beside its folder, in
    ``images/`` beside its folder: CVAT, Roboflow) that holds the most of them. None found: one error with
    the count and the ``--images`` hint (not one "image missing" line per image)."""
    d = path.parent
    cands = [Path(images)] if images else [d, d / "images", d.parent, d.parent / "images"]
    from looper.data.pdfnames import split_name

    usable = sorted({split_name(n)[0] for n in names if not named_path_problem(split_name(n)[0])})
    if not usable:
        return cands[0]
    found = [sum(1 for n in usable if (c / n).is_file()) for c in cands]
    best = max(range(len(cands)), key=lambda i: (found[i], -i))
    if found[best] == 0:
        where = f"in {cands[0]} (--images)" if images else "beside it, in images/ beside it, beside its folder or " \
                                                           "in images/ beside its folder"
        raise FormatError(f"{path}: none of its {len(usable)} images found {where} (the first: {usable[0]!r}); "
                          "name the folder their file_names are relative to with --images DIR")
    return cands[best]


def _coco_file(path: Path, images: Path | None, split: str | None) -> tuple[list[str], list[SourcePage], list[str]]:
    """(class names, pages, annotations ignored: those of no listed image)."""
    doc, cats, files, sizes = _coco_doc(path)
    names = {c["id"]: str(c["name"]) for c in cats}
    boxes: dict[Any, list[SourceBox]] = {i: [] for i in files}
    ignored: list[str] = []
    for a in doc["annotations"]:
        aid = a.get("id") if isinstance(a, dict) else None
        where = f"{path.name} annotation id {aid}"
        image_id = a.get("image_id") if isinstance(a, dict) else None
        if image_id not in boxes:
            ignored.append(f"{where} (image_id {image_id!r} is not an image of {path.name})")
            continue
        try:
            x, y, w, h = (float(v) for v in a["bbox"])
        except (KeyError, TypeError, ValueError):
            boxes[image_id].append(SourceBox(where, "", (0, 0, 0, 0), problem="has no bbox [x, y, width, height]"))
            continue
        cid = a.get("category_id")
        boxes[image_id].append(SourceBox(where, names.get(cid, f"category_id {cid}"), (x, y, x + w, y + h)))
    base = _images_base(path, sorted(set(files.values())), images)
    pages = [_coco_page(path, base, i, files[i], split, tuple(boxes[i]), sizes[i])
             for i in sorted(files, key=lambda i: files[i])]
    return [c["name"] for c in cats], pages, ignored


def _coco_page(path: Path, images: Path, image_id: Any, name: str, split: str | None,
               boxes: tuple[SourceBox, ...], size: tuple[Any, Any] = (None, None)) -> SourcePage:
    """One COCO image as a page; ``refused`` when its file_name leads out of ``images`` (absolute, ``..``,
    a link out of it): never opened."""
    from looper.data.pdfnames import split_name

    key = f"{split + '/' if split else ''}{name}"
    file, pdf_page = split_name(name)
    bad = named_path_problem(file)
    if bad:
        return SourcePage(key, images, split, boxes, (f"{path.name} image id {image_id}", bad))
    bad = escape_problem(images / file, roots_of(images))
    given = tuple(size) if all(isinstance(v, int) and v > 0 for v in size) else None
    return SourcePage(key, images / file, split, boxes, (file, bad) if bad else None, pdf_page, given)  # type: ignore[arg-type]


def read_coco(source: Path, images: Path | None = None) -> Source:
    """A COCO file (images beside it or under ``images``), or a folder of split folders each with one."""
    source = Path(source)
    parts = {None: source} if source.is_file() else _coco_split_files(source)
    if not parts:
        raise FormatError(f"{source}: no COCO .json file (nor train/, valid/, test/ folders holding one)")
    classes: list[str] | None = None
    pages: list[SourcePage] = []
    ignored: list[str] = []
    for split, path in sorted(parts.items(), key=lambda kv: str(kv[0])):
        names, got, left = _coco_file(path, images, split)
        if classes is not None and names != classes:
            raise FormatError(f"{path}: its categories {names[:5]}... differ from the other splits' {classes[:5]}...")
        classes = names
        pages += got
        ignored += left
    notes = (f"{len(ignored)} annotation(s) of no listed image ignored (the first: {ignored[0]})",) if ignored else ()
    return Source("coco", str(source), tuple(classes or ()), tuple(pages), tuple(s for s in parts if s), notes)


def _yolo_names(doc: dict[str, Any], path: Path) -> list[str]:
    names = doc.get("names")
    if isinstance(names, dict):
        try:
            order = sorted(names, key=int)
        except (TypeError, ValueError):
            raise FormatError(f"{path}: names keys must be class ids 0..n-1") from None
        names = [names[k] for k in order]
    if not isinstance(names, list) or not names:
        raise FormatError(f"{path}: no class names ('names: [a, b, ...]')")
    return [str(n) for n in names]


def _yolo_images(root: Path, base: Path, spec: Any, path: Path) -> list[Path]:
    specs = spec if isinstance(spec, list) else [spec]
    found: list[Path] = []
    for s in specs:
        cands = [root / str(s), base / str(s), base / str(s).removeprefix("../")]
        where = next((c for c in cands if c.exists()), None)
        if where is None:
            raise FormatError(f"{path}: {s!r} is neither a folder nor a list file (looked in {root} and {base})")
        if escape_problem(where, roots_of(root, base)):
            raise FormatError(f"{path}: {s!r} is a symbolic link (or lies) outside the export ({base}); "
                              + OUTSIDE_FIX + "import it again")
        if where.is_dir():
            found += sorted(p for p in where.rglob("*") if p.suffix.lower() in PAGE_SUFFIXES)
        else:
            found += [(where.parent / ln.strip()).resolve() if not Path(ln.strip()).is_absolute() else Path(ln.strip())
                      for ln in where.read_text().splitlines() if ln.strip()]
    return found


def _label_path(image: Path) -> Path:
    """Ultralytics' rule: the last /images/ in the path becomes /labels/, the suffix .txt."""
    parts = list(image.parts)
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            break
    return Path(*parts).with_suffix(".txt")


def line_problem(bits: list[str]) -> str | None:
    """Why a label line's fields are not ``class cx cy w h``, described without quoting them (a file that is
    not a label must not show its content in a message)."""
    if len(bits) != 5:
        return f"has {len(bits)} fields, not the 5 of 'class cx cy w h'"
    try:
        int(bits[0])
    except ValueError:
        return "its class (field 1) is not a whole number: not 'class cx cy w h'"
    for i, v in enumerate(bits[1:], 2):
        try:
            float(v)
        except ValueError:
            return f"its field {i} is not a number: not 'class cx cy w h'"
    return None


def _yolo_boxes(label: Path, shown: str) -> tuple[SourceBox, ...]:
    if not label.is_file():
        return ()  # Ultralytics: an image without a label file holds no object
    out = []
    try:
        lines = label.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return (SourceBox(shown, 0, (0, 0, 0, 0), problem=f"label file unreadable ({type(exc).__name__})"),)
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{shown} line {n}"
        bits = line.split()
        bad = line_problem(bits)
        if bad:
            out.append(SourceBox(where, 0, (0, 0, 0, 0), problem=bad))
            continue
        cls, (cx, cy, w, h) = int(bits[0]), (float(v) for v in bits[1:5])
        out.append(SourceBox(where, cls, (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), normalized=True))
    return tuple(out)


def _shown(path: Path, base: Path) -> str:
    """``path`` relative to the export's folder (as the tools show it), not resolving a link."""
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(base)).as_posix()
    except ValueError:
        return str(path)


def _page_label(image: Path, pdf_page: int | None) -> Path:
    """A page's label file: Ultralytics' path; page N of ``plan.pdf`` is labelled by ``plan_page<N>.txt``."""
    label = _label_path(image)
    return label if pdf_page is None else label.with_name(f"{label.stem}_page{pdf_page}.txt")


def _yolo_page(rel: str, image: Path, split: str, base: Path, roots: tuple[Path, ...],
               pdf_page: int | None = None) -> SourcePage:
    """One YOLO image (or PDF page) and its label file; ``refused`` (neither read) when either is a link
    out of the export."""
    label = _page_label(image, pdf_page)
    key = rel if pdf_page is None else f"{rel}#page={pdf_page}"
    for path in (image, label):
        bad = escape_problem(path, roots)
        if bad:
            return SourcePage(key, image, split, (), (_shown(path, base), bad), pdf_page)
    return SourcePage(key, image, split, _yolo_boxes(label, _shown(label, base)), pdf_page=pdf_page)


def _yolo_pages(rel: str, image: Path, split: str, base: Path, roots: tuple[Path, ...]) -> list[SourcePage]:
    """The pages of one image file: itself, or every page of a PDF (one refused page when it does not open)."""
    if image.suffix.lower() != ".pdf" or escape_problem(image, roots):
        return [_yolo_page(rel, image, split, base, roots)]
    from looper.data.pdfnames import page_count

    try:
        n = page_count(image)
    except Exception as exc:  # noqa: BLE001 - PDFium's errors for a broken file
        return [SourcePage(rel, image, split, (), (_shown(image, base), f"PDF unreadable ({type(exc).__name__})"))]
    return [_yolo_page(rel, image, split, base, roots, k) for k in range(1, n + 1)]


def read_yolo(source: Path) -> Source:
    """An Ultralytics data.yaml (or a folder holding it): train/val/test image folders, names."""
    source = Path(source)
    path = source if source.is_file() else next(source / n for n in ("data.yaml", "dataset.yaml", "data.yml")
                                               if (source / n).is_file())
    doc = _load(path, "YAML")
    if not isinstance(doc, dict):
        raise FormatError(f"{path} is not an Ultralytics data yaml (a mapping with train, val, names)")
    classes = _yolo_names(doc, path)
    base = path.parent
    root = Path(doc["path"]) if doc.get("path") else base
    root = root if root.is_absolute() else base / root
    pages = []
    declared = tuple(k for k in ("train", "val", "test") if doc.get(k))
    for key in declared:
        for image in _yolo_images(root, base, doc[key], path):
            try:
                rel = image.resolve().relative_to(base.resolve()).as_posix()
            except ValueError:
                rel = image.as_posix()
            pages += _yolo_pages(rel, image, key, base, roots_of(root, base))
    orphans = _orphan_labels(pages, base, roots_of(root, base))
    notes = (f"{len(orphans)} label file(s) with no image ignored (the first: {orphans[0]})",) if orphans else ()
    return Source("yolo", str(path), tuple(classes), tuple(pages), declared, notes)


def _orphan_labels(pages: list[SourcePage], base: Path, roots: tuple[Path, ...]) -> list[str]:
    """Label files in the label folders of the export's images that no image has (as shown: relative to
    ``base``); ``classes.txt`` (LabelImg's class list) is not a label."""
    have = {_page_label(p.image, p.pdf_page) for p in pages}
    folders = sorted({label.parent for label in have if label.parent.is_dir() and not escape_problem(label.parent, roots)})
    return [_shown(f, base) for d in folders for f in sorted(d.glob("*.txt"))
            if f not in have and f.name != "classes.txt"]


def read_source(source: Path, fmt: str | None = None, images: Path | None = None) -> Source:
    fmt = fmt or guess_format(source)
    if fmt == "coco":
        return read_coco(source, images)
    if fmt == "yolo":
        return read_yolo(source)
    raise FormatError(f"format {fmt!r}: choose one of {', '.join(FORMATS)}")
