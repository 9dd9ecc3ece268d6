"""`looper init WORKSPACE --data SOURCE`: the export imported into the new workspace's data/, its
classes in program.md's domain facts, and an export with errors leaving no workspace behind."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from looper.config import load_config
from looper.data.importer import DataError
from looper.workspace.create import init_workspace, program_data_facts
from tests.data.exports import write_coco

FOUR = ["thermostat", "vav_box", "exhaust_fan", "fire_damper"]


def test_init_with_data_imports_it_and_names_its_classes_in_program_md(tmp_path):
    coco = write_coco(tmp_path / "export", n=5, classes=FOUR, side=400)
    ws = init_workspace(tmp_path / "ws", "tiny", data=coco)
    assert load_config(ws / "looper.toml").data.dir == "data"
    assert json.loads((ws / "data" / "manifest.json").read_text())["classes"] == FOUR
    program = (ws / "program.md").read_text()
    assert "- 4 classes, imported from a labelled export" in program and re.search(r"thermostat \d+, vav_box", program)
    assert "26 symbol classes of HVAC drawings" not in program
    assert "starts the class layer fresh, a transfer" in program


def test_init_with_bad_data_leaves_no_workspace(tmp_path):
    coco = write_coco(tmp_path / "export", n=5, classes=FOUR, side=400)
    (coco.parent / "images" / "sheet-1.png").unlink()
    with pytest.raises(DataError, match="sheet-1.png: image missing"):
        init_workspace(tmp_path / "ws", data=coco)
    assert not (tmp_path / "ws").exists()


def test_program_facts_keep_the_checkpoint_sentence_for_the_26_classes_and_a_foreign_program():
    from looper.core.scoring.classes import CLASSES

    text = (Path(__file__).resolve().parents[2] / "program.md").read_text()
    same = program_data_facts(text, CLASSES, None, {"train": 3, "val": 1, "test": 1})
    assert "the same 26\n  classes)" in same and "- 26 classes, imported" in same
    assert program_data_facts("# mine\n", ("a",), {"a": 1}, {}) == "# mine\n"
