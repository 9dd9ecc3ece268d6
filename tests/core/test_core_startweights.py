"""The starting checkpoint's check (looper.core.tag.startweights): header bytes -> header or what is
wrong; header vs train.py's MODEL/WIDTH/DEPTH and the data's classes -> [] or what is wrong."""

from __future__ import annotations

import json

import pytest
import yaml

from looper.core.tag.startweights import FORMAT, class_transfer, read_header, start_problems

NAMES = ["a", "b", "c"]
FAMILY = {"backbone": [[-1, 1, "Conv", [64, 3, 2]]], "head": [[[-1], 1, "Detect", ["nc"]]]}


def blob(header: dict, data: bytes, pad: int = 0) -> bytes:
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data + b"\0" * pad


def meta(names=NAMES, width=0.125, depth=0.33, max_channels=1024, fmt=FORMAT, family=FAMILY, **extra):
    cfg = {**family, "width_multiple": width, "depth_multiple": depth, "max_channels": max_channels, **extra}
    return {"__metadata__": {"format": fmt, "names": json.dumps(names), "model_yaml": yaml.safe_dump(cfg)}}


TENSOR = {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}


def test_a_well_formed_file_gives_its_header():
    b = blob({**TENSOR, "__metadata__": {"x": "y"}}, b"\0" * 16)
    header, problems = read_header(b, len(b))
    assert problems == [] and header is not None and header["w"]["shape"] == [2, 2]


@pytest.mark.parametrize("data, size, match", [
    (b"", 0, "too short"),
    (b"\1\0\0", 3, "too short"),
    ((10**9).to_bytes(8, "little"), 100, "not a safetensors file"),
    ((1).to_bytes(8, "little") + b"{", 9, "not a safetensors file"),  # header length < 2
    ((50).to_bytes(8, "little") + b"{}", 100, "only 2 read"),
    ((2).to_bytes(8, "little") + b"\xff\xfe", 10, "not JSON"),
    ((2).to_bytes(8, "little") + b"{x", 10, "not JSON"),
    ((2).to_bytes(8, "little") + b"[]", 10, "not a JSON object"),
])
def test_a_file_that_is_not_safetensors_says_what_it_is(data, size, match):
    header, problems = read_header(data, size)
    assert header is None and len(problems) == 1 and match in problems[0]


@pytest.mark.parametrize("tensors, data, pad, match", [
    (TENSOR, b"\0" * 8, 0, "truncated or padded: tensors end at byte"),  # cut short
    (TENSOR, b"\0" * 16, 4, "truncated or padded"),  # trailing bytes
    ({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}, b"\0" * 12, 0, "12 bytes for shape [2, 2] F32"),
    ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}}, b"", 0, "bytes for shape"),
    ({"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}, b"\0", 0, "no readable dtype"),
    ({"w": {"shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, 0, "no readable dtype"),
    ({"w": "nonsense"}, b"", 0, "no readable dtype"),
])
def test_a_corrupt_tensor_table_is_named(tensors, data, pad, match):
    b = blob(tensors, data, pad)
    header, problems = read_header(b, len(b))
    assert header is None and any(match in p for p in problems), problems


def test_a_checkpoint_that_fits_has_no_problem():
    assert start_problems(meta(), NAMES, FAMILY, "yolov8", 0.125, 0.33) == []
    assert start_problems(meta(), NAMES, None, "yolov8", 0.125, 0.33) == []  # family unread: multiples only


@pytest.mark.parametrize("names, match", [
    (["a", "b"], "other classes than the data's: 2 classes vs 3 (missing c)"),
    (["a", "b", "c", "z"], "(not in the data: z)"),
    (["a", "x", "b"], "(missing c; not in the data: x)"),
    (["c", "b", "a"], "same names in another order"),
])
def test_a_checkpoint_of_other_classes_fits_as_a_transfer_that_says_what_differs(names, match):
    header = meta(names=names)
    assert start_problems(header, NAMES, FAMILY, "yolov8", 0.125, 0.33) == []
    note = class_transfer(header, NAMES)
    assert note is not None and match in note and "a transfer" in note


def test_the_same_classes_or_no_name_list_is_no_transfer():
    assert class_transfer(meta(), NAMES) is None
    assert class_transfer({}, NAMES) is None
    assert class_transfer(meta(names="x"), NAMES) is None


@pytest.mark.parametrize("header, match", [
    ({}, "no metadata"),
    ({"__metadata__": "x"}, "no metadata"),
    (meta(fmt="other/1"), "header format 'other/1'"),
    (meta(width=0.25), "another architecture than train.py's MODEL=yolov8 WIDTH=0.125 DEPTH=0.33: width_multiple 0.25"),
    (meta(depth=0.67), "depth_multiple 0.67"),
    (meta(max_channels=512), "max_channels 512"),
    (meta(width=True), "width_multiple True"),
    (meta(family={"backbone": [], "head": FAMILY["head"]}), "its backbone layers are not those of yolov8.yaml"),
    (meta(family={"backbone": FAMILY["backbone"], "head": []}), "its head layers"),
])
def test_a_checkpoint_that_does_not_fit_says_what_differs(header, match):
    problems = start_problems(header, NAMES, FAMILY, "yolov8", 0.125, 0.33)
    assert any(match in p for p in problems), problems


@pytest.mark.parametrize("names_text", ["not json", json.dumps({"a": 1}), "null"])
def test_a_header_without_a_name_list_says_so(names_text):
    h = meta()
    h["__metadata__"]["names"] = names_text
    assert "header holds no class-name list ('names')" in start_problems(h, NAMES, FAMILY, "yolov8", 0.125, 0.33)


@pytest.mark.parametrize("yaml_text", ["", "[1, 2]", "a: [b", "just text"])
def test_a_header_without_a_model_yaml_says_so(yaml_text):
    h = meta()
    h["__metadata__"]["model_yaml"] = yaml_text
    assert start_problems(h, NAMES, FAMILY, "yolov8", 0.125, 0.33) == ["header holds no readable model yaml ('model_yaml')"]
