"""Does a starting checkpoint fit the train.py that will load it? (pure: no files, no torch)

A workspace's ``pretrained/`` folder holds the weights train.py fine-tunes from (its knob
``PRETRAINED`` names the file; ``""`` trains from scratch). The file is a safetensors file in
looper-weights/1 form: an 8-byte little-endian header length, a JSON header naming every tensor
(dtype, shape, byte offsets) with a ``__metadata__`` entry holding the model yaml and the class
names. A file that is missing, unreadable, of another architecture than train.py's
MODEL/WIDTH/DEPTH would make every run crash the same way;
the harness says so once, at preflight, naming the file and what is wrong (a harness error, not
a candidate's crash). A checkpoint of other classes than the data's fits: train.py fine-tunes it
as a transfer (:func:`class_transfer` says what differs). :func:`header_problems` reads the header bytes; :func:`start_problems`
compares what it holds with train.py's knobs and the family's architecture yaml.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

FORMAT = "looper-weights/1"
MAX_HEADER = 100 << 20  # safetensors' own limit on the JSON header (100 MB)
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1}
ARCH_KEYS = ("backbone", "head")


def read_header(prefix: bytes, size: int) -> tuple[dict[str, Any] | None, list[str]]:
    """The JSON header of a safetensors file from its first bytes (at least 8 + header length) and
    its size in bytes: (header, []) or (None, [what is wrong])."""
    if size < 8 or len(prefix) < 8:
        return None, [f"{size} bytes: too short for a safetensors file"]
    n = int.from_bytes(prefix[:8], "little")
    if n < 2 or n > MAX_HEADER or 8 + n > size:
        return None, [f"not a safetensors file (header length {n} in a file of {size} bytes)"]
    if len(prefix) < 8 + n:
        return None, [f"header of {n} bytes, only {len(prefix) - 8} read"]
    try:
        header = json.loads(prefix[8:8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, [f"safetensors header is not JSON ({exc})"]
    if not isinstance(header, dict):
        return None, ["safetensors header is not a JSON object"]
    problems: list[str] = []
    end = 0
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        try:
            lo, hi = (int(x) for x in spec["data_offsets"])
            count = 1
            for d in spec["shape"]:
                count *= int(d)
            width = DTYPE_BYTES[spec["dtype"]]
        except (KeyError, TypeError, ValueError):
            problems.append(f"tensor {name!r}: no readable dtype, shape and data_offsets")
            continue
        if hi - lo != count * width or lo < 0:
            problems.append(f"tensor {name!r}: {hi - lo} bytes for shape {spec['shape']} {spec['dtype']}")
        end = max(end, hi)
    if not problems and 8 + n + end != size:
        problems.append(f"truncated or padded: tensors end at byte {8 + n + end}, the file has {size}")
    return (None, problems) if problems else (header, [])


def _names(meta: Mapping[str, Any]) -> Any:
    try:
        return json.loads(str(meta.get("names")))
    except json.JSONDecodeError:
        return None


def class_transfer(header: Mapping[str, Any], data_names: Sequence[str]) -> str | None:
    """None when the checkpoint holds the data's classes in the data's order; else what differs. That
    is no refusal: train.py fine-tunes it as a transfer (every tensor that fits is loaded, the head's
    class layer starts fresh), as YOLO users fine-tune a COCO-pretrained checkpoint on their classes."""
    meta = header.get("__metadata__")
    names = _names(meta) if isinstance(meta, Mapping) else None
    if not isinstance(names, list) or list(names) == list(data_names):
        return None
    extra = [n for n in names if n not in data_names]
    missing = [n for n in data_names if n not in names]
    detail = (f"missing {', '.join(map(str, missing[:5]))}" if missing else "") + \
             ("; " if missing and extra else "") + (f"not in the data: {', '.join(map(str, extra[:5]))}" if extra else "")
    return (f"other classes than the data's: {len(names)} classes vs {len(data_names)} "
            f"({detail or 'same names in another order'}): a transfer, the head's class layer starts fresh")


def start_problems(header: Mapping[str, Any], data_names: Sequence[str], family: Mapping[str, Any] | None,
                   model: str, width: float, depth: float, max_channels: int = 1024) -> list[str]:
    """What keeps train.py (MODEL ``model`` at ``width`` x ``depth``, on classes ``data_names``) from
    loading a checkpoint whose safetensors header is ``header``; [] when it fits.

    ``family`` is the architecture yaml ``<model>.yaml`` that train.py builds from (its backbone and
    head lists); None when the harness could not read it (then only the multiples are compared).
    """
    meta = header.get("__metadata__")
    if not isinstance(meta, Mapping):
        return ["no metadata in its header (not a looper-weights/1 file: convert it with "
                "`python -m looper.convert_weights`)"]
    problems: list[str] = []
    if meta.get("format") != FORMAT:
        problems.append(f"header format {meta.get('format')!r}, expected {FORMAT!r}")
    if not isinstance(_names(meta), list):
        problems.append("header holds no class-name list ('names')")
    try:
        cfg = yaml.safe_load(str(meta.get("model_yaml", "")))
    except yaml.YAMLError:
        cfg = None
    if not isinstance(cfg, dict):
        return [*problems, "header holds no readable model yaml ('model_yaml')"]
    arch = f"MODEL={model} WIDTH={width} DEPTH={depth}"
    for key, want in (("width_multiple", width), ("depth_multiple", depth), ("max_channels", max_channels)):
        got = cfg.get(key)
        if not isinstance(got, (int, float)) or isinstance(got, bool) or abs(float(got) - float(want)) > 1e-9:
            problems.append(f"another architecture than train.py's {arch}: {key} {got!r}, train.py {want!r}")
    if family is not None:
        for key in ARCH_KEYS:
            if json.dumps(cfg.get(key)) != json.dumps(family.get(key)):
                problems.append(f"another architecture than train.py's {arch}: its {key} layers are not "
                                f"those of {model}.yaml")
    return problems
