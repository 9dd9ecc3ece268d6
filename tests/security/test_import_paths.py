"""Issue 48, item 5: `looper data import` reads only what lies inside the export, within a pixel budget, and
quotes no file's content. Every case is a refused import through the real command line naming the file (and
the id), the destination left absent (no partial data), and no secret in the output."""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from looper.cli import app
from looper.data.importer import import_data

SECRET = "API_TOKEN=hunter2-s3cr3t"


@pytest.fixture
def secret(tmp_path) -> Path:
    path = tmp_path / "home" / ".secrets"
    path.parent.mkdir()
    path.write_text(f"{SECRET}\n0 0.5 0.5 0.1 0.1\n")
    return path


def refused(tmp_path: Path, *args: str, match: tuple[str, ...]) -> str:
    out = tmp_path / "out"
    got = CliRunner().invoke(app, ["data", "import", *args, "--out", str(out)])
    assert got.exit_code == 2, got.output
    assert all(m in got.output for m in match), got.output
    assert "hunter2" not in got.output and "API_TOKEN" not in got.output, got.output
    assert not out.exists()  # nothing written, not even an empty folder
    return got.output


def edit(coco: Path, fn) -> None:  # noqa: ANN001
    doc = json.loads(coco.read_text())
    fn(doc)
    coco.write_text(json.dumps(doc))


def test_an_image_over_the_pixel_budget_is_refused_naming_it_and_the_budget(coco, tmp_path):
    """400 x 400 px pages: over a 100,000-px budget (where Pillow's own guard would warn) and over a 50,000-px
    one (past twice it, where Pillow would raise DecompressionBombError): both the same refusal naming the
    file and its size, from its header, never Pillow's "image unreadable"."""
    refused(tmp_path, str(coco), "--max-pixels", "100000",
            match=("images/sheet-1.png: image of 400 x 400 px (160,000 px) is over the pixel budget of 100,000 px",
                   "--max-pixels N"))
    text = refused(tmp_path, str(coco), "--max-pixels", "50000", match=("images/sheet-3.png: image of 400 x 400 px",))
    assert "image unreadable" not in text
    got = CliRunner().invoke(app, ["data", "import", str(coco), "--out", str(tmp_path / "ok"), "--max-pixels", "160000"])
    assert got.exit_code == 0, got.output


def png_bomb(path: Path, width: int, height: int) -> None:
    """A valid 1-bit PNG of ``width`` x ``height`` white pixels, its rows deflated as they are made (what
    Pillow's ``Image.new("1", ...).save`` writes, in a fifth of the time: no image held in memory)."""
    row = b"\x00" + b"\xff" * ((width + 7) // 8)  # filter type 0, then the row's bits
    rows_at_once = 400
    deflate = zlib.compressobj(6)
    idat = b"".join([*(deflate.compress(row * min(rows_at_once, height - y)) for y in range(0, height, rows_at_once)),
                     deflate.flush()])

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
                     + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def test_a_decompression_bomb_beyond_pillows_own_limit_is_refused_by_the_budget(coco, tmp_path):
    """A small file that decodes to 20000 x 20000 px: refused from its header, before it is decoded."""
    from PIL import Image

    png_bomb(tmp_path / "small.png", 37, 5)  # the same writer, small enough to decode: all white, as Pillow's
    with Image.open(tmp_path / "small.png") as small:
        assert small.mode == "1" and small.tobytes() == Image.new("1", (37, 5), 1).tobytes()
    png_bomb(coco.parent / "images" / "sheet-2.png", 20000, 20000)
    assert (coco.parent / "images" / "sheet-2.png").stat().st_size < 200_000
    with pytest.raises(Image.DecompressionBombError, match=r"Image size \(400000000 pixels\)"):
        Image.open(coco.parent / "images" / "sheet-2.png")  # a real PNG, beyond Pillow's own limit
    refused(tmp_path, str(coco), "--max-pixels", "100000000",
            match=("images/sheet-2.png: image of 20000 x 20000 px (400,000,000 px) is over the pixel budget",))


@pytest.mark.parametrize("name, said", [
    ("../outside.png", "image id 2: names '../outside.png', which leads out of the export"),
    ("images/../../outside.png", "image id 2: names 'images/../../outside.png', which leads out"),
    ("/etc/passwd", "image id 2: names an absolute path '/etc/passwd'"),
])
def test_a_coco_file_name_leading_out_of_the_export_is_refused_naming_the_image_id(coco, tmp_path, name, said):
    shutil.copy(coco.parent / "images" / "sheet-2.png", coco.parent.parent / "outside.png")

    def out_of_it(doc: dict) -> None:
        doc["images"][1]["file_name"] = name
    edit(coco, out_of_it)
    refused(tmp_path, str(coco), match=("annotations.json " + said,))


def test_a_coco_image_linked_out_of_the_export_is_refused_naming_it(coco, tmp_path):
    page = coco.parent / "images" / "sheet-2.png"
    target = tmp_path / "elsewhere.png"
    shutil.move(page, target)
    page.symlink_to(target)
    refused(tmp_path, str(coco), match=("images/sheet-2.png: is a symbolic link (or lies) outside the export",))
    page.unlink()
    shutil.copy(target, page)  # a link inside the export, or the file itself: imported
    assert import_data(coco, tmp_path / "fine").pages["train"] == 3


def test_duplicate_coco_image_ids_are_refused_naming_the_id(coco, tmp_path):
    def twice(doc: dict) -> None:
        doc["images"][3]["id"] = doc["images"][1]["id"]
    edit(coco, twice)
    refused(tmp_path, str(coco), match=("annotations.json: image id 2 is listed twice", "sheet-2.png", "sheet-4.png"))


def test_a_yolo_label_linked_to_a_secrets_file_is_refused_unread(yolo, tmp_path, secret):
    label = yolo / "labels" / "train" / "IMG_0002.txt"
    label.unlink()
    label.symlink_to(secret)
    refused(tmp_path, str(yolo), match=("labels/train/IMG_0002.txt: is a symbolic link (or lies) outside the export",))


def test_a_yolo_image_folder_linked_out_of_the_export_is_refused(yolo, tmp_path):
    shutil.move(yolo / "images" / "val", tmp_path / "val-elsewhere")
    (yolo / "images" / "val").symlink_to(tmp_path / "val-elsewhere")
    refused(tmp_path, str(yolo), match=("data.yaml: 'images/val' is a symbolic link (or lies) outside the export",))


def test_a_label_line_that_does_not_read_is_described_never_quoted(yolo, tmp_path):
    label = yolo / "labels" / "train" / "IMG_0002.txt"
    label.write_text(f"{SECRET}\n0 0.5 zero 0.1 0.1\n" + label.read_text())
    refused(tmp_path, str(yolo), match=("labels/train/IMG_0002.txt line 1: has 1 fields, not the 5 of 'class cx cy w h'",
                                        "labels/train/IMG_0002.txt line 2: its field 3 is not a number"))


def test_an_unreadable_yaml_names_its_line_not_its_content(yolo, tmp_path):
    (yolo / "data.yaml").write_text(f"names: [a, b\n{SECRET}: {{\n")
    refused(tmp_path, str(yolo), match=("data.yaml is not readable YAML", "at line"))


def test_a_link_in_a_looper_folder_is_refused_and_its_target_never_copied(coco, tmp_path, secret):
    data = tmp_path / "data"
    import_data(coco, data)
    label = sorted((data / "tiles" / "train" / "labels").glob("*.txt"))[0]
    label.unlink()
    label.symlink_to(secret)
    refused(tmp_path, str(data), match=(f"{label}: is a symbolic link (the import copies files, never a link's target)",))
    label.unlink()
    (data / "tiles" / "more").symlink_to(secret.parent, target_is_directory=True)
    refused(tmp_path, str(data), match=(f"{data / 'tiles' / 'more'}: is a symbolic link",))
    assert os.path.islink(data / "tiles" / "more")
