"""Issue 47: PDF drawings imported as they are. Every page of a PDF rendered at the stated dpi (default 150)
with pypdfium2, labelled per page in COCO (``plan.pdf#page=N``) or YOLO (``plan_page<N>.txt``), through the
real import and command line; the PDF is a vector one written in the test (tests/data/pdfs.py)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from looper.cli import app
from looper.data.check import check_data
from looper.data.importer import DataError, import_data
from tests.data.pdfs import write_pdf, write_pdf_coco

FOUR = ["thermostat", "vav_box", "exhaust_fan", "fire_damper"]


def _ink_in_every_box(page_json: Path) -> int:
    """Each truth box of a written page holds ink of its symbol (the rendering and the labels agree)."""
    truth = json.loads(page_json.read_text())
    img = np.asarray(Image.open(page_json.with_suffix(".png")))
    assert img.shape == (truth["height"], truth["width"])
    for b in truth["boxes"]:
        x1, y1, x2, y2 = b["box"]
        assert img[y1:y2, x1:x2].min() < 128, b
        assert img[y1 + 4:y2 - 4, x1 - 12:x1 - 4].min() > 200 or x1 < 12, b  # paper left of it: boxes are tight
    return len(truth["boxes"])


def test_a_pdf_labelled_in_coco_imports_page_by_page_at_150_dpi(tmp_path):
    coco = write_pdf_coco(tmp_path / "export", 6, FOUR)
    code = CliRunner().invoke(app, ["data", "import", str(coco), "--out", str(tmp_path / "data")])
    assert code.exit_code == 0, code.output
    m = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert m["pages"] == {"train": 4, "val": 1, "test": 1} and m["classes"] == FOUR
    (test,) = (tmp_path / "data" / "pages" / "test").glob("*.json")
    doc = json.loads(test.read_text())
    assert doc["source"].startswith("plan.pdf#page=") and (doc["width"], doc["height"]) == (1275, 1650)
    assert _ink_in_every_box(test) == 24
    assert check_data(tmp_path / "data", "data").ok
    again = import_data(coco, tmp_path / "again")
    assert again.hash == m["hash"]  # the same PDF, the same bytes


def test_a_pdf_at_another_dpi_and_a_missing_page_are_named(tmp_path):
    coco = write_pdf_coco(tmp_path / "export", 6, FOUR, dpi=100)
    done = import_data(coco, tmp_path / "a", dpi=100)
    (test,) = (tmp_path / "a" / "pages" / "test").glob("*.json")
    assert json.loads(test.read_text())["width"] == 850 and _ink_in_every_box(test) == 24
    doc = json.loads(coco.read_text())
    doc["images"][2]["file_name"] = "plan.pdf#page=9"
    coco.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=r"plan.pdf#page=9: the PDF has 6 page\(s\), not a page 9"):
        import_data(coco, tmp_path / "b", dpi=100)
    assert not (tmp_path / "b").exists() and done.pages["test"] == 1
    doc["images"][2]["file_name"] = "plan.pdf#page=3"
    coco.write_text(json.dumps(doc))
    with pytest.raises(DataError) as err:  # labels drawn at 100 dpi, rendered at 150: every page named
        import_data(coco, tmp_path / "c")
    assert ("plan.pdf#page=1: rendered at 150 dpi the page is 1275 x 1650 px, the export says 850 x 1100 px; "
            "import with the dpi its labels were drawn at (--dpi)") in str(err.value)


def test_a_pdf_over_the_pixel_budget_is_refused_before_it_is_rendered(tmp_path):
    coco = write_pdf_coco(tmp_path / "export", 6, FOUR)
    got = CliRunner().invoke(app, ["data", "import", str(coco), "--out", str(tmp_path / "e"), "--max-pixels", "2000000"])
    assert got.exit_code == 2 and ("plan.pdf#page=1: image of 1275 x 1650 px (2,103,750 px) is over the pixel budget "
                                   "of 2,000,000 px per image (rendered at 150 dpi)") in got.output, got.output
    assert not (tmp_path / "e").exists()


def test_pdfs_in_a_yolo_export_are_labelled_page_by_page(tmp_path):
    root = tmp_path / "yolo"
    names = "\n".join(f"  {i}: {c}" for i, c in enumerate(FOUR))
    for split, n in (("train", 3), ("val", 1), ("test", 1)):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        truth = write_pdf(root / "images" / split / f"{split}-plan.pdf", n, FOUR, seed=len(split))
        for p, boxes in enumerate(truth, 1):
            lines = [f"{FOUR.index(c)} {(x1 + x2) / 2 / 1275:.6f} {(y1 + y2) / 2 / 1650:.6f} {(x2 - x1) / 1275:.6f} "
                     f"{(y2 - y1) / 1650:.6f}" for c, (x1, y1, x2, y2) in boxes]
            (root / "labels" / split / f"{split}-plan_page{p}.txt").write_text("\n".join(lines) + "\n")
    (root / "data.yaml").write_text(f"path: .\ntrain: images/train\nval: images/val\ntest: images/test\nnames:\n{names}\n")
    done = import_data(root, tmp_path / "data")
    assert done.pages == {"train": 3, "val": 1, "test": 1} and not [w for w in done.warnings if "label" in w.what]
    (test,) = (tmp_path / "data" / "pages" / "test").glob("*.json")
    assert json.loads(test.read_text())["source"] == "images/test/test-plan.pdf#page=1"
    assert _ink_in_every_box(test) == 24
    shutil.rmtree(tmp_path / "data")


@pytest.mark.e2e
def test_a_ten_page_pdf_imports_within_a_minute(tmp_path):
    """Issue 47's goal: a 10-page PDF (letter, 150 dpi: 1275 x 1650 px a page) imported in 60 s or less."""
    coco = write_pdf_coco(tmp_path / "export", 10, FOUR)
    start = time.perf_counter()
    done = import_data(coco, tmp_path / "data")
    took = time.perf_counter() - start
    assert sum(done.pages.values()) == 10 and took <= 60, took
    print(f"10-page PDF import: {took:.1f} s")
