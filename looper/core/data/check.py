"""The data checks (pure rules over facts an adapter gathered: looper.data.facts reads the files).

``looper data check``, ``looper data import`` and the preflight before a baseline trains all ask
:func:`data_problems`. Each problem names the file (and the annotation id or label line), what is
wrong and what to do. Errors block a night; a warning is said and does not block (a class with no
instance in the val or test split: the class gate cannot judge it, but the night can run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from looper.core.scoring.metrics import MIN_SUPPORT

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
    fix: str | None = None  # what to do about ``problem`` (default: put the image back)


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
    clip_edges: bool = False  # a box crossing a page edge is clipped to it and counted (an import without
    #                           --strict-bounds), not refused; a box wholly off its page is refused either way
    notes: tuple[DataProblem, ...] = ()  # warnings the reader found (orphan label files, ...)


@dataclass(frozen=True)
class DataProblem:
    where: str
    what: str
    fix: str
    blocking: bool = True

    def __str__(self) -> str:
        return f"{self.where}: {self.what}; {self.fix}"


def _crosses_edge(img: ImageFact, box: tuple[float, float, float, float]) -> bool | None:
    """None: inside the page (``EDGE_PX`` allowed); True: crossing an edge, still on the page; False: off it."""
    x1, y1, x2, y2 = box
    if not (img.width and img.height) or (x1 >= -EDGE_PX and y1 >= -EDGE_PX and x2 <= img.width + EDGE_PX
                                          and y2 <= img.height + EDGE_PX):
        return None
    return x1 < img.width and y1 < img.height and x2 > 0 and y2 > 0


def _box_problems(img: ImageFact, classes: Sequence[str], clip: bool = False, clipped: list[str] | None = None
                  ) -> list[DataProblem]:
    """Problems of one image's boxes; with ``clip``, a box crossing an edge is listed in ``clipped`` instead."""
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
        elif clip and _crosses_edge(img, b.box) and clipped is not None:
            clipped.append(b.where)
        elif _crosses_edge(img, b.box) is not None:
            out.append(DataProblem(b.where, f"box {list(b.box)} is outside the {img.width} x {img.height} px image "
                                            f"{img.where}", "redraw the box inside the page; " + REIMPORT))
    return out


def _image_problems(facts: DataFacts) -> list[DataProblem]:
    out: list[DataProblem] = []
    clipped: list[str] = []
    for img in facts.images:
        if img.orphan:
            out += _box_problems(img, facts.classes)
            continue
        if img.problem is not None:
            out.append(DataProblem(img.where, img.problem,
                                   img.fix or "put the image back (or remove its annotations); " + REIMPORT))
            continue
        if img.tile and facts.input_size and (img.width, img.height) != (facts.input_size, facts.input_size):
            out.append(DataProblem(img.where, f"tile of {img.width} x {img.height} px, train.py's input is "
                                              f"{facts.input_size} x {facts.input_size} px",
                                   "import whole pages with looper data import: it cuts tiles of the input size"))
        out += _box_problems(img, facts.classes, facts.clip_edges, clipped)
    if clipped:
        out.append(DataProblem(facts.where, f"{len(clipped)} box(es) crossing a page edge clipped to the page "
                               f"(the first: {clipped[0]})", "import with --strict-bounds to refuse them instead",
                               blocking=False))
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

    anywhere = set().union(*present.values())
    unused = [c for c in facts.classes if c not in anywhere] if any(count.values()) else []
    if unused:
        out.append(DataProblem(facts.where, f"{len(unused)} class(es) declared but never labelled: "
                               f"{', '.join(unused[:8])}" + (" ..." if len(unused) > 8 else ""),
                               "they keep their class id and are not judged (no test instance: no class gate, "
                               "weight 0); label pages holding them, or drop them from the export", blocking=False))
    for split in facts.splits:
        if count[split] == 0 and not facts.page_digests.get(split):
            out.append(DataProblem(f"{facts.where} ({split} split)", f"the {split} split is empty",
                                   "give the export pages in that split, or import it without splits to have "
                                   "looper draw them"))
            continue
        missing = [c for c in facts.classes if c not in present[split] and c not in unused]
        if missing and count[split]:
            out.append(DataProblem(f"{facts.where} ({split} split)",
                                   f"no instance of {len(missing)} class(es): {', '.join(missing[:8])}"
                                   + (" ..." if len(missing) > 8 else ""),
                                   MISSING_IN_SPLIT.get(split, MISSING_IN_SPLIT["test"]),
                                   blocking=split == "train"))
    return out


#: What to do about a split without a class, and why it matters there.
MISSING_IN_SPLIT = {
    "train": "label training pages holding them, or drop the classes from the export",
    "val": "label pages holding them in that split (the val split tunes each class's confidence for the report: "
           "a class it lacks gets no tuned threshold)",
    "test": "label pages holding them in that split (the class gate cannot judge a class the test split lacks)",
}


def few_in_test(facts: DataFacts) -> list[DataProblem]:
    """A warning naming the classes with fewer than MIN_SUPPORT test instances (their weight in weighted_f1 is
    capped, looper.core.scoring.metrics.class_weights): ``looper data check`` and ``looper data import`` say it."""
    in_test: dict[str, int] = {}
    for img in facts.images:
        for b in img.boxes if img.split == "test" and not img.tile and not img.orphan else ():
            name = facts.classes[b.cls] if isinstance(b.cls, int) and 0 <= b.cls < len(facts.classes) else b.cls
            in_test[str(name)] = in_test.get(str(name), 0) + 1
    few = [(c, in_test[c]) for c in facts.classes if 0 < in_test.get(c, 0) < MIN_SUPPORT]
    if not few:
        return []
    shown = ", ".join(f"{c} ({n})" for c, n in few[:8]) + (" ..." if len(few) > 8 else "")
    return [DataProblem(f"{facts.where} (test split)", f"{len(few)} class(es) with fewer than {MIN_SUPPORT} test "
                        f"instances: {shown}", f"each keeps its class gate and its row; its weight in weighted_f1 is "
                        f"capped at that of {MIN_SUPPORT} instances (a few boxes cannot own the score); label more "
                        "test pages holding them for a finer judgement", blocking=False)]


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
    return out + _image_problems(facts) + _split_problems(facts) + _duplicates(facts) + list(facts.notes)


def errors(problems: Sequence[DataProblem]) -> list[DataProblem]:
    return [p for p in problems if p.blocking]
