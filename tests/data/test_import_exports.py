"""Issue 47: real exports imported as the usual tools take them: a box a few px past the page clipped and
counted (``--strict-bounds`` refuses it), a class never labelled and an orphan label warned, not refused,
images found where CVAT and Roboflow put them (or one line with the ``--images`` hint), and a rare class's
only page kept in training whatever the split seed. Through the real import and command line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from looper.cli import app
from looper.data.check import check_data
from looper.data.formats import FormatError
from looper.data.importer import DataError, import_data
from tests.data.exports import FOUR, copy_of, four_class_exports


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Path:  # noqa: ANN001
    return four_class_exports(tmp_path_factory.mktemp("exports"), coco_pages=6)


@pytest.fixture
def coco(exports, tmp_path) -> Path:  # noqa: ANN001
    return copy_of(exports, tmp_path, "coco")


def edit(coco: Path, fn) -> None:  # noqa: ANN001
    doc = json.loads(coco.read_text())
    fn(doc)
    coco.write_text(json.dumps(doc))


def cli(*args: str) -> tuple[int, str]:
    got = CliRunner().invoke(app, list(args))
    return got.exit_code, got.output


def test_a_box_crossing_the_page_edge_is_clipped_and_counted_or_refused_with_strict_bounds(coco, tmp_path):
    def cross(doc: dict) -> None:
        doc["annotations"][0]["bbox"] = [385.0, 20.0, 18.0, 12.0]  # 3 px past the right edge of a 400-px page
        doc["annotations"][1]["bbox"] = [-4.0, -2.5, 20.0, 10.0]
    edit(coco, cross)
    code, out = cli("data", "import", str(coco), "--out", str(tmp_path / "strict"), "--strict-bounds")
    assert code == 2 and "annotation id 1: box [385.0, 20.0, 403.0, 32.0] is outside the 400 x 400 px image" in out
    assert "annotation id 2: box [-4.0, -2.5, 16.0, 7.5] is outside" in out and not (tmp_path / "strict").exists()
    code, out = cli("data", "import", str(coco), "--out", str(tmp_path / "data"))
    assert code == 0, out
    assert ("warning: " + str(coco) + ": 2 box(es) crossing a page edge clipped to the page (the first: "
            "annotations.json annotation id 1); import with --strict-bounds to refuse them instead") in out
    truth = [json.loads(p.read_text()) for p in (tmp_path / "data" / "pages").rglob("*.json")]
    boxes = [b["box"] for t in truth for b in t["boxes"]]
    assert all(0 <= x1 < x2 <= t["width"] and 0 <= y1 < y2 <= t["height"] for t in truth for x1, y1, x2, y2 in
               (b["box"] for b in t["boxes"])) and boxes
    assert check_data(tmp_path / "data", "data").ok


def test_a_class_declared_but_never_labelled_is_warned_and_not_judged(coco, tmp_path):
    def extra(doc: dict) -> None:
        doc["categories"].append({"id": 5, "name": "smoke_detector", "supercategory": ""})
    edit(coco, extra)
    code, out = cli("data", "import", str(coco), "--out", str(tmp_path / "data"))
    assert code == 0, out
    assert "1 class(es) declared but never labelled: smoke_detector; they keep their class id and are not judged" in out
    assert json.loads((tmp_path / "data" / "manifest.json").read_text())["classes"] == [*FOUR, "smoke_detector"]
    code, out = cli("data", "check", str(tmp_path / "data"))
    assert code == 0 and "declared but never labelled: smoke_detector" in out, out
    # one test page of 400 px: each class has a few test boxes, named with their capped weight (issue 47)
    assert "(test split): 4 class(es) with fewer than 10 test instances: thermostat (" in out, out


def test_orphan_labels_are_warned_not_refused(coco, exports, tmp_path):
    def orphan(doc: dict) -> None:
        doc["annotations"].append({"id": 999, "image_id": 77, "category_id": 1, "bbox": [1, 1, 5, 5]})
    edit(coco, orphan)
    done = import_data(coco, tmp_path / "a")
    assert [str(w) for w in done.warnings if "no listed image" in w.what] == [
        f"{coco}: 1 annotation(s) of no listed image ignored (the first: annotations.json annotation id 999 "
        f"(image_id 77 is not an image of annotations.json)); put their images into the export if they belong to it"]
    yolo = tmp_path / "yolo"
    shutil.copytree(exports / "yolo", yolo)
    (yolo / "images" / "train" / "IMG_0002.png").unlink()
    (yolo / "labels" / "train" / "classes.txt").write_text("thermostat\n")  # LabelImg's class list: not a label
    done = import_data(yolo, tmp_path / "b")
    assert done.pages["train"] == 2
    assert [w.what for w in done.warnings if "label file" in w.what] == [
        "1 label file(s) with no image ignored (the first: labels/train/IMG_0002.txt)"]


def test_images_are_found_where_cvat_puts_them_or_named_once_with_the_images_hint(coco, tmp_path):
    """CVAT: annotations/instances_default.json, the images in images/ beside the annotations folder."""
    export = coco.parent
    (export / "annotations").mkdir()
    ann = export / "annotations" / "instances_default.json"
    coco.rename(ann)

    def bare(doc: dict) -> None:
        for im in doc["images"]:
            im["file_name"] = im["file_name"].removeprefix("images/")
    edit(ann, bare)
    assert import_data(ann, tmp_path / "a").pages == {"train": 4, "val": 1, "test": 1}
    shutil.move(export / "images", tmp_path / "elsewhere")
    with pytest.raises(FormatError) as err:
        import_data(ann, tmp_path / "b")
    assert str(err.value) == (f"{ann}: none of its 6 images found beside it, in images/ beside it, beside its folder "
                              "or in images/ beside its folder (the first: 'sheet-1.png'); name the folder their "
                              "file_names are relative to with --images DIR")
    code, out = cli("data", "import", str(ann), "--out", str(tmp_path / "c"), "--images", str(tmp_path / "elsewhere"))
    assert code == 0, out
    code, out = cli("data", "import", str(ann), "--out", str(tmp_path / "d"), "--images", str(export))
    assert code == 2 and "none of its 6 images found in" in out and "(--images)" in out and out.count("\n") <= 3, out
    assert not (tmp_path / "b").exists() and not (tmp_path / "d").exists()


@pytest.mark.parametrize("seed", range(8))
def test_a_rare_class_on_one_page_imports_whatever_the_split_seed(coco, tmp_path, seed):
    """Issue 47: the drawn split put the rare class's only page into val or test for some seeds, and the import
    refused (no training instance). It stays in training; the test split's lack of it is a warning."""
    def rare(doc: dict) -> None:
        doc["categories"].append({"id": 5, "name": "smoke_detector", "supercategory": ""})
        on_page_3 = [a for a in doc["annotations"] if a["image_id"] == 3]
        on_page_3[0]["category_id"] = 5
    edit(coco, rare)
    done = import_data(coco, tmp_path / "data", seed=seed)
    assert done.instances["smoke_detector"] == 1
    assert any("(test split): no instance of 1 class(es): smoke_detector" in str(w) for w in done.warnings)
    labels = "".join(p.read_text() for p in (tmp_path / "data" / "tiles" / "train" / "labels").glob("*.txt"))
    assert any(line.split()[0] == "4" for line in labels.splitlines())  # the class trains


def test_a_data_error_still_lists_every_problem(coco, tmp_path):
    (coco.parent / "images" / "sheet-2.png").unlink()
    with pytest.raises(DataError, match="sheet-2.png: image missing"):
        import_data(coco, tmp_path / "out")
