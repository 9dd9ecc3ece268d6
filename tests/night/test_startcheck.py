"""The harness side of the starting-checkpoint check (looper.night.startweights): train.py's knobs, the
file in <workspace>/pretrained/, the installed Ultralytics' architecture yaml. Fast: the files are
written as bytes here (a safetensors header is JSON), nothing imports torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from looper.core.scoring.classes import CLASSES
from looper.core.verdicts.verdict import Status
from looper.night.startweights import check_pretrained, family_yaml

TRAIN = 'PRETRAINED = "start.safetensors"\nMODEL = "yolov8"\nWIDTH = 0.125\nDEPTH = 0.33\n'


def write_start(root: Path, names=CLASSES, width=0.125, model="yolov8") -> Path:
    fam = family_yaml(model)
    assert fam is not None
    cfg = {"backbone": fam["backbone"], "head": fam["head"], "depth_multiple": 0.33, "width_multiple": width,
           "max_channels": 1024, "nc": len(names)}
    header = {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "__metadata__": {"format": "looper-weights/1", "names": json.dumps(list(names)),
                               "model_yaml": yaml.safe_dump(cfg)}}
    text = json.dumps(header).encode()
    path = root / "pretrained" / "start.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(len(text).to_bytes(8, "little") + text + b"\0" * 16)
    return path


def test_the_installed_ultralytics_yaml_is_found_without_importing_it():
    fam = family_yaml("yolov8")
    assert fam is not None and fam["backbone"] and fam["head"]
    assert family_yaml("no_such_family") is None
    assert family_yaml("../yolov8") is None


def test_a_fitting_checkpoint_passes_and_names_itself(tmp_path):
    write_start(tmp_path)
    v = check_pretrained(tmp_path, TRAIN)
    assert v.status is Status.PASS and v.metrics == {"pretrained": "start.safetensors"}


def test_from_scratch_needs_no_checkpoint(tmp_path):
    for source in (TRAIN.replace('"start.safetensors"', '""'), 'MODEL = "yolov8"\n'):
        v = check_pretrained(tmp_path, source)
        assert v.status is Status.PASS and v.metrics == {"pretrained": None}


@pytest.mark.parametrize("name", ["../start.safetensors", "sub/start.safetensors", ".."])
def test_a_pretrained_value_outside_the_folder_is_refused(tmp_path, name):
    v = check_pretrained(tmp_path, TRAIN.replace('"start.safetensors"', repr(name)))
    assert v.status is Status.ERROR and "must be a file name in" in v.blocking[0]


def test_each_mismatch_is_named_with_the_file(tmp_path):
    path = write_start(tmp_path, width=0.25)
    v = check_pretrained(tmp_path, TRAIN)
    assert v.status is Status.ERROR and str(path) in v.blocking[0] and "width_multiple 0.25" in v.blocking[0]
    write_start(tmp_path, model="yolo11")
    v = check_pretrained(tmp_path, TRAIN)
    assert v.status is Status.ERROR and any("backbone layers are not those of yolov8.yaml" in b for b in v.blocking)
    path.write_bytes(path.read_bytes()[:-4])
    v = check_pretrained(tmp_path, TRAIN)
    assert v.status is Status.ERROR and "truncated" in v.blocking[0]
    v = check_pretrained(tmp_path, "PRETRAINED = (\n")
    assert v.status is Status.ERROR and "knobs do not read" in v.blocking[0]


def test_the_data_classes_come_from_its_manifest_and_other_classes_pass_as_a_transfer(tmp_path):
    """Issue 38: a 4-class data set with a 4-class checkpoint passes (the check once compared with the
    26 HVAC classes); the shipped 26-class checkpoint on 4-class data is a transfer, said in the metrics;
    another architecture is still refused."""
    four = ["duct", "vent", "valve", "fan"]
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps({"classes": four}))
    write_start(tmp_path, names=four)
    v = check_pretrained(tmp_path, TRAIN, data)
    assert v.status is Status.PASS and v.metrics == {"pretrained": "start.safetensors"}
    write_start(tmp_path)  # the 26 HVAC classes
    v = check_pretrained(tmp_path, TRAIN, data)
    assert v.status is Status.PASS and "26 classes vs 4" in v.metrics["transfer"], v.metrics
    assert check_pretrained(tmp_path, TRAIN).metrics == {"pretrained": "start.safetensors"}  # no data: the 26
    write_start(tmp_path, names=four, width=0.25)
    v = check_pretrained(tmp_path, TRAIN, data)
    assert v.status is Status.ERROR and "width_multiple 0.25" in v.blocking[0]
