"""A vector PDF of drawing pages written by hand (no PDF library): each symbol a few stroked paths, as a
CAD program writes a plan, and its box in pixels of the page rendered at a given dpi."""

from __future__ import annotations

import json
import random
from pathlib import Path

LETTER = (612.0, 792.0)  # points


def _symbol(kind: int, x: float, y: float, s: float) -> str:
    """PDF path operators for one symbol of side ``s`` pt at (x, y), PDF coordinates (bottom-left)."""
    box = f"{x:.2f} {y:.2f} {s:.2f} {s:.2f} re S\n"
    if kind == 0:  # a box with a diagonal: a damper
        return box + f"{x:.2f} {y:.2f} m {x + s:.2f} {y + s:.2f} l S\n"
    if kind == 1:  # a circle (four Bezier arcs): a diffuser
        r, cx, cy, k = s / 2, x + s / 2, y + s / 2, 0.5523 * s / 2
        return (f"{cx + r:.2f} {cy:.2f} m {cx + r:.2f} {cy + k:.2f} {cx + k:.2f} {cy + r:.2f} {cx:.2f} {cy + r:.2f} c "
                f"{cx - k:.2f} {cy + r:.2f} {cx - r:.2f} {cy + k:.2f} {cx - r:.2f} {cy:.2f} c "
                f"{cx - r:.2f} {cy - k:.2f} {cx - k:.2f} {cy - r:.2f} {cx:.2f} {cy - r:.2f} c "
                f"{cx + k:.2f} {cy - r:.2f} {cx + r:.2f} {cy - k:.2f} {cx + r:.2f} {cy:.2f} c S\n")
    if kind == 2:  # a box with a cross: a fan
        return box + (f"{x:.2f} {y + s / 2:.2f} m {x + s:.2f} {y + s / 2:.2f} l S "
                      f"{x + s / 2:.2f} {y:.2f} m {x + s / 2:.2f} {y + s:.2f} l S\n")
    return f"{x:.2f} {y:.2f} m {x + s:.2f} {y:.2f} l {x + s / 2:.2f} {y + s:.2f} l h S\n"  # a triangle


def write_pdf(path: Path, n_pages: int, classes: list[str], dpi: int = 150, seed: int = 3,
              per_page: int = 24) -> list[list[tuple[str, list[float]]]]:
    """``path``: ``n_pages`` letter pages of symbols; returns each page's (class, [x1, y1, x2, y2] px at ``dpi``)."""
    rng = random.Random(seed)
    w, h = LETTER
    scale = dpi / 72
    streams, truth = [], []
    for p in range(n_pages):
        ops, boxes = ["1 w 0 G\n"], []
        for k in range(per_page):
            kind = (p + k) % len(classes)
            s = rng.uniform(14, 30)
            col, row = k % 6, k // 6
            x = 40 + col * 90 + rng.uniform(0, 40)
            top = 40 + row * 170 + rng.uniform(0, 100)  # from the top of the page
            ops.append(_symbol(kind % 4, x, h - top - s, s))
            boxes.append((classes[kind], [(x - 1) * scale, (top - 1) * scale, (x + s + 1) * scale, (top + s + 1) * scale]))
        ops.append("0.5 w 20 20 m 592 20 l 592 772 l 20 772 l h S\n")  # the sheet's border
        streams.append("".join(ops).encode())
        truth.append(boxes)
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            f"<< /Type /Pages /Kids [{' '.join(f'{3 + 2 * i} 0 R' for i in range(n_pages))}] /Count {n_pages} >>".encode()]
    for i, stream in enumerate(streams):
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {w:g} {h:g}] /Contents {4 + 2 * i} 0 R "
                    "/Resources << >> >>".encode())
        objs.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"endstream")
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    path.write_bytes(bytes(out))
    return truth


def write_pdf_coco(folder: Path, n_pages: int, classes: list[str], dpi: int = 150) -> Path:
    """``folder/plan.pdf`` and ``folder/annotations.json`` naming its pages ``plan.pdf#page=N``."""
    folder.mkdir(parents=True, exist_ok=True)
    truth = write_pdf(folder / "plan.pdf", n_pages, classes, dpi)
    w, h = (round(v * dpi / 72) for v in LETTER)
    doc: dict = {"images": [], "annotations": [],
                 "categories": [{"id": i + 1, "name": c, "supercategory": ""} for i, c in enumerate(classes)]}
    for p, boxes in enumerate(truth, 1):
        doc["images"].append({"id": p, "file_name": f"plan.pdf#page={p}", "width": w, "height": h})
        for cls, (x1, y1, x2, y2) in boxes:
            doc["annotations"].append({"id": len(doc["annotations"]) + 1, "image_id": p, "iscrowd": 0,
                                       "category_id": classes.index(cls) + 1, "bbox": [x1, y1, x2 - x1, y2 - y1]})
    path = folder / "annotations.json"
    path.write_text(json.dumps(doc))
    return path
