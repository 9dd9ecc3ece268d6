"""The data checks (pure rules over facts an adapter gathered: looper.data.facts reads the files).

``looper data check``, ``looper data import`` and the preflight before a baseline trains all ask
:func:`data_problems`. Each problem names the file (and the annotation id or label line), what is
wrong and what to do. Errors block a night; a warning is said and does not block (a class with no
instance in the val or test split: the class gate cannot judge it, but the night can run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

SPLITS = ("train", "val", "test")
EDGE_PX = 1.0  # a box may reach this far past the page's edge (exports round); it is clipped to the page
REIMPORT = "fix the export and import it again (looper data import SOURCE --out DIR)"


@dataclass(frozen=True)
class BoxFact:
    """One truth box: ``where`` names its file and annotation id or label line; ``cls`` is the class
    name (str) or YOLO id (int) as written; ``box`` x1, y1, x2, y2 in px of its image."""

    where: str
    cls: str | int
    box: tuple[float, float, float, float]
    problem: str | None = None  # the entry or line could not be read


@dataclass(frozen=True)
class ImageFact:
    """A whole page or a training tile as found: ``problem`` says why its image cannot be used
    (missing, unreadable), else None; ``digest`` its content hash (pages only)."""

    where: str
    split: str
    width: int = 0
    height: int = 0
    problem: str | None = None
    digest: str = ""
    boxes: tuple[BoxFact, ...] = ()
    tile: bool = False
    orphan: bool = False  # boxes whose image the export does not list (no image to check)


@dataclass(frozen=True)
class DataFacts:
    """What a data folder (or an export) holds, as the checks need it."""

    where: str
    classes: tuple[str, ...]
    images: tuple[ImageFact, ...] = ()
    input_size: int = 0  # train.py's IMGSZ (0: tiles not checked)
    manifest_problems: tuple[str, ...] = ()
    splits: tuple[str, ...] = SPLITS  # the splits that must hold pages
    page_digests: dict[str, tuple[str, ...]] = field(default_factory=dict)  # split -> hashes of pages not in images


@dataclass(frozen=True)
class DataProblem:
    where: str
    what: str
    fix: str
    blocking: bool = True

    def __str__(self) -> str:
        return f"{self.where}: {self.what}; {self.fix}"


def _box_problems(img: ImageFact, classes: Sequence[str]) -> list[DataProblem]:
    out = []
    for b in img.boxes:
        if b.problem is not None:
            out.append(DataProblem(b.where, b.problem, "write it the way the format says; " + REIMPORT))
            continue
        if isinstance(b.cls, int):
            if not 0 <= b.cls < len(classes):
                out.append(DataProblem(b.where, f"class id {b.cls} is outside the data's {len(classes)} classes "
                                                f"(0..{len(classes) - 1})", f"use an id below {len(classes)} or add "
                                                "the class to the export's names; " + REIMPORT))
        elif b.cls not in classes:
            out.append(DataProblem(b.where, f"class {b.cls!r} is not one of the data's classes",
                                   "add it to the export's categories (names) or relabel the box; " + REIMPORT))
        x1, y1, x2, y2 = b.box
        if x2 <= x1 or y2 <= y1:
            out.append(DataProblem(b.where, f"box {list(b.box)} has zero area", "delete or redraw the box; " + REIMPORT))
        elif img.width and img.height and (x1 < -EDGE_PX or y1 < -EDGE_PX or x2 > img.width + EDGE_PX
                                                or y2 > img.height + EDGE_PX):
            out.append(DataProblem(b.where, f"box {list(b.box)} is outside the {img.width} x {img.height} px image "
                                            f"{img.where}", "redraw the box inside the page; " + REIMPORT))
    return out


def _image_problems(facts: DataFacts) -> list[DataProblem]:
    out = []
    for img in facts.images:
        if img.orphan:
            out += _box_problems(img, facts.classes)
            continue
        if img.problem is not None:
            out.append(DataProblem(img.where, img.problem, "put the image back (or remove its annotations); " + REIMPORT))
            continue
        if img.tile and facts.input_size and (img.width, img.height) != (facts.input_size, facts.input_size):
            out.append(DataProblem(img.where, f"tile of {img.width} x {img.height} px, train.py's input is "
                                              f"{facts.input_size} x {facts.input_size} px",
                                   "import whole pages with looper data import: it cuts tiles of the input size"))
        out += _box_problems(img, facts.classes)
    return out


def _split_problems(facts: DataFacts) -> list[DataProblem]:
    out = []
    present: dict[str, set[str]] = {s: set() for s in facts.splits}
    count = {s: 0 for s in facts.splits}
    for img in facts.images:
        if img.split in count and not img.orphan:
            count[img.split] += 1
            for b in img.boxes:
                name = (facts.classes[b.cls] if isinstance(b.cls, int) and 0 <= b.cls < len(facts.classes)
                        else b.cls)
                present[img.split].add(str(name))
    for split in facts.splits:
        if count[split] == 0 and not facts.page_digests.get(split):
            out.append(DataProblem(f"{facts.where} ({split} split)", f"the {split} split is empty",
                                   "give the export pages in that split, or import it without splits to have "
                                   "looper draw them"))
            continue
        missing = [c for c in facts.classes if c not in present[split]]
        if missing and count[split]:
            out.append(DataProblem(f"{facts.where} ({split} split)",
                                   f"no instance of {len(missing)} class(es): {', '.join(missing[:8])}"
                                   + (" ..." if len(missing) > 8 else ""),
                                   "label pages holding them in that split (the class gate cannot judge a class "
                                   "the test split lacks)" if split != "train" else
                                   "label training pages holding them, or drop the classes from the export",
                                   blocking=split == "train"))
    return out


def _duplicates(facts: DataFacts) -> list[DataProblem]:
    seen: dict[str, tuple[str, str]] = {}
    out = []
    entries = [(img.digest, img.split, img.where) for img in facts.images if img.digest and not img.tile]
    entries += [(d, s, f"a {s} page listed in the manifest") for s, ds in sorted(facts.page_digests.items()) for d in ds]
    for digest, split, where in entries:
        if digest in seen and seen[digest][0] != split:
            out.append(DataProblem(where, f"the same page (sha256 {digest[:12]}) is in the {seen[digest][0]} split "
                                          f"as {seen[digest][1]} and in the {split} split",
                                   "keep each page in one split only (a test page seen in training inflates every "
                                   "score); " + REIMPORT))
        seen.setdefault(digest, (split, where))
    return out


def data_problems(facts: DataFacts) -> list[DataProblem]:
    """Every problem of the data, errors and warnings, in a fixed order."""
    out = [DataProblem(f"{facts.where}/manifest.json", p, "a file that does not verify changed after the data "
                       "was written: import (looper data import) or prepare it again into a new folder")
           for p in facts.manifest_problems]
    if not facts.classes:  # nothing else can be judged
        return [*out, DataProblem(facts.where, "lists no classes", REIMPORT)]
    return out + _image_problems(facts) + _split_problems(facts) + _duplicates(facts)


def errors(problems: Sequence[DataProblem]) -> list[DataProblem]:
    return [p for p in problems if p.blocking]
