"""`looper data import` and `looper data check` on exports written the way the labelling tools write
them (tests/data/exports.py), and every bad input of issue 38, point 2, refused naming its file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from looper.cli import app
from looper.core.data.memory import CACHE_BYTES_PER_PIXEL, PROCESS_MB
from looper.data.check import check_data
from looper.data.formats import FormatError, guess_format
from looper.data.importer import DataError, import_data
from looper.data.tiles import TILE, verify
from tests.data.exports import FOUR, write_with_supervision


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_coco_export_imports_into_looper_layout_and_again_into_the_same_bytes(coco, tmp_path):
    done = import_data(coco, tmp_path / "a")
    assert done.format == "coco" and done.classes == tuple(FOUR) and done.pages == {"train": 3, "val": 1, "test": 1}
    again = import_data(coco, tmp_path / "b")
    assert tree(tmp_path / "a") == tree(tmp_path / "b") and again.hash == done.hash
    assert verify(tmp_path / "a") == [] and check_data(tmp_path / "a", "a").ok
    m = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert m["classes"] == FOUR and m["tile"] == TILE and m["source"] == {"format": "coco", "name": "annotations.json"}
    (test_page,) = sorted((tmp_path / "a" / "pages" / "test").glob("*.json"))
    truth = json.loads(test_page.read_text())
    assert truth["width"] == 400 and truth["source"].startswith("images/sheet-") and truth["boxes"]
    assert not (tmp_path / "a" / "pages" / "train").exists()  # train pages: tiles only, as prepare.py
    assert import_data(coco, tmp_path / "c", seed=1).hash != done.hash  # another seed, another split


def test_a_yolo_export_keeps_its_own_splits(yolo, tmp_path):
    assert guess_format(yolo) == "yolo" and guess_format(yolo / "data.yaml") == "yolo"
    done = import_data(yolo, tmp_path / "out")
    assert done.pages == {"train": 3, "val": 1, "test": 1} and done.classes == tuple(FOUR)
    truth = json.loads(next((tmp_path / "out" / "pages" / "test").glob("*.json")).read_text())
    assert truth["source"] == "images/test/IMG_0005.png"
    labels = "".join(p.read_text() for p in (tmp_path / "out" / "tiles" / "train" / "labels").glob("*.txt"))
    assert {ln.split()[0] for ln in labels.splitlines()} == {"0", "1", "2", "3"}


def test_a_looper_folder_is_checked_and_copied(coco, tmp_path):
    import_data(coco, tmp_path / "a")
    (tmp_path / "a" / "tiles" / "train" / "labels.cache").write_text("x")
    done = import_data(tmp_path / "a", tmp_path / "b")
    assert done.format == "looper" and not (tmp_path / "b" / "tiles" / "train" / "labels.cache").exists()
    assert verify(tmp_path / "b") == []


def refused(source: Path, out: Path, *match: str) -> str:
    with pytest.raises(DataError) as err:
        import_data(source, out)
    text = str(err.value)
    assert all(m in text for m in match), text
    assert not out.exists()  # nothing written
    return text


def edit(coco: Path, fn) -> None:  # noqa: ANN001
    doc = json.loads(coco.read_text())
    fn(doc)
    coco.write_text(json.dumps(doc))


def test_a_missing_image_is_refused_naming_it(coco, tmp_path):
    (coco.parent / "images" / "sheet-2.png").unlink()
    refused(coco, tmp_path / "out", "sheet-2.png: image missing", "import it again")


def test_an_unreadable_image_is_refused_naming_it(coco, tmp_path):
    (coco.parent / "images" / "sheet-3.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    refused(coco, tmp_path / "out", "sheet-3.png: image unreadable")


def test_an_unknown_category_and_a_bad_box_are_refused_naming_the_annotation(coco, tmp_path):
    def bad(doc: dict) -> None:
        doc["annotations"][0]["category_id"] = 30
        doc["annotations"][1]["bbox"] = [410.0, 10.0, 40.0, 20.0]  # wholly off the page: refused, not clipped
        doc["annotations"][2]["bbox"] = [10.0, 10.0, 0.0, 20.0]
    edit(coco, bad)
    refused(coco, tmp_path / "out", "annotations.json annotation id 1: class 'category_id 30' is not one of the data's",
            "annotation id 2: box [410.0, 10.0, 450.0, 30.0] is outside the 400 x 400 px image",
            "annotation id 3: box [10.0, 10.0, 10.0, 30.0] has zero area")


def test_a_yolo_class_id_outside_the_names_is_refused_naming_the_label_line(yolo, tmp_path):
    label = yolo / "labels" / "train" / "IMG_0002.txt"
    lines = label.read_text().splitlines()
    lines[2] = "30 " + lines[2].split(" ", 1)[1]
    label.write_text("\n".join(lines) + "\n")
    refused(yolo, tmp_path / "out", "labels/train/IMG_0002.txt line 3: class id 30 is outside the data's 4 classes")


def test_an_empty_test_split_and_a_page_in_two_splits_are_refused(yolo, tmp_path):
    shutil.copy(yolo / "images" / "train" / "IMG_0001.png", yolo / "images" / "val" / "dup.png")
    shutil.copy(yolo / "labels" / "train" / "IMG_0001.txt", yolo / "labels" / "val" / "dup.txt")
    for p in (yolo / "images" / "test").iterdir():
        p.unlink()
    refused(yolo, tmp_path / "out", "(test split): the test split is empty",
            "images/val/dup.png: the same page (sha256", "is in the train split as")


def test_an_unreadable_export_and_an_unknown_format_are_named(tmp_path):
    (tmp_path / "x.json").write_text("{")
    with pytest.raises(FormatError, match="x.json is not readable JSON"):
        import_data(tmp_path / "x.json", tmp_path / "out")
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(FormatError, match="cannot tell its format"):
        import_data(tmp_path / "notes.txt", tmp_path / "out")


def test_data_check_names_tiles_of_another_size_and_a_manifest_that_does_not_verify(coco, tmp_path):
    data = tmp_path / "data"
    import_data(coco, data)
    tile = sorted((data / "tiles" / "train" / "images").glob("*.png"))[0]
    from PIL import Image

    Image.new("L", (640, 640), 255).save(tile)
    v = check_data(data, "data")
    assert v.status.value == "fail"
    text = "\n".join(v.blocking)
    assert f"{tile}: tile of 640 x 640 px, train.py's input is 256 x 256 px" in text
    assert f"manifest.json: tiles/train/images/{tile.name}: content changed" in text
    v = check_data(data, "data", "IMGSZ = 640\n")
    assert not any("tile of 640" in b for b in v.blocking)


def test_data_check_and_import_on_the_command_line(coco, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    got = runner.invoke(app, ["data", "import", str(coco), "--out", "data"])
    assert got.exit_code == 0 and "imported coco export: 4 classes" in got.output, got.output
    got = runner.invoke(app, ["data", "check"])  # the workspace's [data] dir: data
    assert got.exit_code == 0 and got.output.strip().endswith("pass: " + str(tmp_path / "data")), got.output
    tiles = len(list((tmp_path / "data" / "tiles" / "train" / "images").glob("*.png")))
    per_run = PROCESS_MB + tiles * 256 * 256 * CACHE_BYTES_PER_PIXEL / 2**20
    assert f'memory: about {per_run:.0f} MB a training run' in got.output  # no train.py
    assert f'CACHE = "auto" holds ram ({tiles} tiles decoded in memory' in got.output  # its shipped CACHE, "auto"
    (tmp_path / "train.py").write_text('CACHE = "auto"\nCACHE_LIMIT_MB = 0  # held by none\n')
    got = runner.invoke(app, ["data", "check"])
    assert f'train.py\'s CACHE = "auto" holds none: the {tiles} tiles are read from disk' in got.output, got.output
    (tmp_path / "train.py").write_text('CACHE = "none"  # read from disk\n')
    got = runner.invoke(app, ["data", "check"])
    assert f'train.py\'s CACHE = "none": the {tiles} tiles are read from disk, not held' in got.output, got.output
    (tmp_path / "train.py").unlink()
    (tmp_path / "data" / "pages" / "test").joinpath("page_000.png").unlink()
    got = runner.invoke(app, ["data", "check", "data"])
    assert got.exit_code == 1 and "page_000.png: image missing" in got.output, got.output
    got = runner.invoke(app, ["data", "check", str(coco)])
    assert got.exit_code == 2 and "names a file" in got.output, got.output
    got = runner.invoke(app, ["data", "import", str(coco), "--out", "data"])
    assert got.exit_code == 2 and "exists and is not an empty folder" in got.output


def test_evaluate_names_the_page_file_of_a_truth_class_outside_the_data(coco, tmp_path, capsys):
    """Issue 38: an unknown class name in the test truth gave a ValueError that named no file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("evaluate_fixed", Path(__file__).resolve().parents[2] / "evaluate.py")
    evaluate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(evaluate)
    data = tmp_path / "data"
    import_data(coco, data)
    assert len(evaluate.read_pages(data, "test", FOUR)) == 1
    truth = data / "pages" / "test" / "page_000.json"
    doc = json.loads(truth.read_text())
    doc["boxes"][0]["class"] = "chiller"
    truth.write_text(json.dumps(doc))
    with pytest.raises(SystemExit):
        evaluate.read_pages(data, "test", FOUR)
    assert f"page truth {truth}: class 'chiller' is not one of the data's classes" in capsys.readouterr().err


@pytest.mark.e2e
def test_pages_prepare_py_drew_exported_as_coco_import_into_the_same_tiles_and_pages(tmp_path):
    """Issue 38's goal "imported pages score like the same pages built by prepare.py", held at its root: the
    tiny data set's pages, exported as a Roboflow-style COCO folder (train/valid/test) with prepare.py's own
    split, import into byte-identical tiles and test/val page images and the same truth boxes."""
    import numpy as np

    import prepare

    built = tmp_path / "built"
    prepare.build(built, "tiny", seed=0, test_seed=5)
    sc = prepare.SCALES["tiny"]
    export = tmp_path / "export"
    for split, folder in (("train", "train"), ("val", "valid"), ("test", "test")):
        base = prepare._seed_words(5) if split == "test" else [0]
        code = prepare.SPLIT_CODES[split]
        quota = prepare.class_quota(split, sc, np.random.RandomState([*base, code, 0]))
        doc = {"images": [], "annotations": [],
               "categories": [{"id": i, "name": c, "supercategory": "drawings"} for i, c in enumerate(prepare.CLASSES)]}
        (export / folder).mkdir(parents=True)
        for i, classes in enumerate(quota):
            img, truth = prepare.make_page(np.random.RandomState([*base, code, i + 1]), sc.page, classes, sc)
            img.save(export / folder / f"page_{i:03d}.png")
            doc["images"].append({"id": i, "file_name": f"page_{i:03d}.png", "width": img.width, "height": img.height})
            for t in truth:
                x1, y1, x2, y2 = t["box"]
                doc["annotations"].append({"id": len(doc["annotations"]), "image_id": i, "iscrowd": 0,
                                           "category_id": prepare.CLASSES.index(t["class"]), "bbox": [x1, y1, x2 - x1, y2 - y1]})
        (export / folder / "_annotations.coco.json").write_text(json.dumps(doc))
    assert guess_format(export) == "coco"
    done = import_data(export, tmp_path / "imported")
    assert done.pages == dict(sc.pages)
    ours, theirs = tree(tmp_path / "imported"), tree(built)
    same = [k for k in theirs if k.startswith("tiles/") or k.endswith(".png")]
    assert same and all(ours.get(k) == theirs[k] for k in same), [k for k in same if ours.get(k) != theirs[k]][:5]
    for k in theirs:
        if k.startswith("pages/") and k.endswith(".json"):
            a, b = json.loads(ours[k]), json.loads(theirs[k])
            assert a["boxes"] == b["boxes"] and a["width"] == b["width"], k


def test_exports_supervision_writes_as_coco_and_as_yolo_import_into_the_same_tiles_and_truth(tmp_path):
    """Issue 38's third-party exports: the same pages written by supervision (Roboflow's library), once as
    Roboflow's COCO folders and once as its YOLO folders, import with no other step, pass every check, and
    give byte-identical tiles and page images and the same truth boxes (only each page's source name differs)."""
    splits = {"train": 3, "val": 1, "test": 2}
    coco = write_with_supervision(tmp_path / "coco", "coco", splits, FOUR, side=400)
    yolo = write_with_supervision(tmp_path / "yolo", "yolo", splits, FOUR, side=400)
    assert (guess_format(coco), guess_format(yolo)) == ("coco", "yolo")
    a = import_data(coco, tmp_path / "from-coco")
    b = import_data(yolo, tmp_path / "from-yolo")
    assert a.pages == b.pages == splits and a.classes == b.classes == tuple(FOUR) and not a.warnings
    assert a.instances == b.instances and min(a.instances.values()) > 0
    for out in (a.out, b.out):
        v = check_data(out, out.name)
        assert v.ok and v.blocking == [], v.blocking
    ta, tb = tree(a.out), tree(b.out)
    assert set(ta) == set(tb)
    pictures = [k for k in ta if k.endswith(".png")]
    assert len(pictures) == 3 * 4 + 4 + 3 and all(ta[k] == tb[k] for k in pictures)  # train and val tiles, val and test pages
    truths = [k for k in ta if k.startswith("pages/") and k.endswith(".json")]
    assert len(truths) == 3  # the val and test pages
    for k in truths:
        x, y = json.loads(ta[k]), json.loads(tb[k])
        assert x.pop("source") != y.pop("source") and x == y, k
