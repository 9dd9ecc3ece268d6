"""A missing, corrupt or mismatched starting checkpoint (train.py's PRETRAINED in the workspace's
pretrained/ folder; another architecture, not other classes: those are a transfer) is a harness error at preflight: the daemon halts with exit 3 and a page that
names the file and what is wrong, before any run; nothing is trained or recorded as measured.
The fixture train.py is given the real knobs PRETRAINED / MODEL / WIDTH / DEPTH; the checkpoint is
the one `looper init` copies (looper's shipped start.safetensors)."""

from __future__ import annotations

import json

import pytest
from faultkit import runs_rows

pytestmark = pytest.mark.e2e

KNOBS = 'PRETRAINED = "start.safetensors"\nMODEL = "yolov8"\nWIDTH = 0.125\nDEPTH = 0.33\n'


def _use_start(ws, knobs: str = KNOBS) -> None:
    """Give the fixture train.py the starting-checkpoint knobs (after its first knob line) and commit."""
    path = ws.root / "train.py"
    text = path.read_text()
    first = text.index("\nSCENARIO = ")
    path.write_text(text[:first + 1] + knobs + text[first + 1:])
    ws.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "train.py: from the pretrained start")


def _rewrite_names(path, names: list[str]) -> None:
    """The same tensors, the header's class names replaced (pure bytes: no torch)."""
    blob = path.read_bytes()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    header["__metadata__"]["names"] = json.dumps(names)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + blob[8 + n:])


def _halted_before_any_run(ws, pages, *needles: str) -> None:
    r = ws.looper("run", "--max-experiments", "1")
    assert r.returncode == 3, r.stdout + r.stderr
    assert len(pages.pages) == 1, pages.pages
    page = json.dumps(pages.pages[0])
    for needle in needles:
        assert needle in page, (needle, page)
    assert len(ws.events("halt")) == 1
    assert runs_rows(ws) == [], "training ran although the starting checkpoint was unusable"
    assert ws.rows("baseline") == [] and ws.rows() == [], "something was measured"


def test_the_shipped_checkpoint_passes_preflight_and_the_baseline_runs(make_ws, pages):
    ws = make_ws()
    _use_start(ws)
    ws.baseline_only()  # preflight passed: the baseline was measured and kept
    with ws.db() as con:
        fixed = json.loads(con.execute("SELECT fixed_hashes_json FROM tags").fetchone()[0])
    assert "pretrained/start.safetensors" in fixed, fixed


def test_a_missing_checkpoint_is_a_preflight_error_naming_the_file(make_ws, pages):
    ws = make_ws()
    _use_start(ws)
    (ws.root / "pretrained" / "start.safetensors").unlink()
    _halted_before_any_run(ws, pages, "pretrained/start.safetensors", "do not exist")


def test_a_truncated_checkpoint_is_a_preflight_error_naming_the_file(make_ws, pages):
    ws = make_ws()
    _use_start(ws)
    p = ws.root / "pretrained" / "start.safetensors"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    _halted_before_any_run(ws, pages, "pretrained/start.safetensors", "truncated")


def test_a_file_that_is_no_safetensors_is_a_preflight_error(make_ws, pages):
    ws = make_ws()
    _use_start(ws)
    (ws.root / "pretrained" / "start.safetensors").write_bytes(b"PK\x03\x04 a zip, say a torch .pt")
    _halted_before_any_run(ws, pages, "pretrained/start.safetensors", "not a safetensors file")


def test_a_checkpoint_of_other_classes_passes_preflight_as_a_transfer_said_once(make_ws, pages):
    """Issue 38: other classes than the data manifest's are no refusal (train.py fine-tunes them as a
    transfer, tests/e2e/test_own_data.py); the set-up says so once, as a baseline event."""
    ws = make_ws()
    _use_start(ws)
    _rewrite_names(ws.root / "pretrained" / "start.safetensors", ["person", "car"])
    ws.baseline_only()
    said = [e["message"] for e in ws.events("baseline") if "starting weights" in e["message"]]
    assert len(said) == 1 and "other classes than the data's: 2 classes vs 4" in said[0], ws.events("baseline")
    assert "a transfer" in said[0] and pages.pages == []


def test_a_checkpoint_of_another_architecture_is_a_preflight_error(make_ws, pages):
    ws = make_ws()
    _use_start(ws, KNOBS.replace("WIDTH = 0.125", "WIDTH = 0.25"))
    _halted_before_any_run(ws, pages, "pretrained/start.safetensors", "another architecture",
                           "width_multiple 0.125")


def test_a_checkpoint_changed_after_the_tag_started_is_a_halt_by_its_pinned_hash(make_ws, pages):
    """Bytes that still pass the header check but are not the pinned ones: the integrity check halts."""
    ws = make_ws()
    _use_start(ws)
    ws.baseline_only()
    p = ws.root / "pretrained" / "start.safetensors"
    blob = p.read_bytes()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    header["__metadata__"]["provenance"] = json.dumps({"by": "someone else"})  # same tensors, names, yaml
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    p.write_bytes(len(text).to_bytes(8, "little") + text + blob[8 + n:])
    ws.enqueue("never measured", knobs={"QUALITY": 0.8})
    r = ws.looper("run", "--max-experiments", "1")
    assert r.returncode == 3, r.stdout + r.stderr
    page = json.dumps(pages.pages[-1])
    assert "fixed file pretrained/start.safetensors changed" in page, page
    assert [x["role"] for x in runs_rows(ws) if x["experiment_id"] != ws.rows("baseline")[0]["id"]] == []
