"""The data set's label index, made once per data set (issue 47, looper/data/labelindex.py), through the real
local executor and its bubblewrap sandbox, with the shipped train.py: the night's data step makes it, a second
night keeps it, a sandboxed run (data read-only) reads it instead of scanning every label and image again, and a
run that reads it trains the same weights, bit for bit, as one that scanned."""

from __future__ import annotations

import json
import shutil
import sys
import threading
from pathlib import Path

import pytest

from looper.executors.common import label_index, prepare_local_data
from tests.executors.test_prestart import REPO, _job, _tensors, _ws

pytestmark = [pytest.mark.e2e]

SCANNED = "labels... "  # Ultralytics scanning the labels folder ("Scanning .../train/labels... 64 images")
UNWRITABLE = "is not writable, cache not saved"  # ... and not keeping what it found (the box's read-only data)
READ = "labels.cache... "  # Ultralytics reading an index ("Scanning .../train/labels.cache... 64 images")


def _data(tmp_path: Path, tiny_data: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data, ignore=shutil.ignore_patterns("*.cache"))
    return data


def test_the_night_makes_the_index_once_and_keeps_it(tmp_path: Path, tiny_data: Path) -> None:
    data = _data(tmp_path, tiny_data)
    env = {"YOLO_CONFIG_DIR": str(tmp_path / "ycfg"), "PATH": "/usr/bin:/bin"}
    v = prepare_local_data(sys.executable, REPO / "prepare.py", data, "data", "tiny", 0, tmp_path, env)
    assert v.ok and v.metrics["hash"], v.blocking
    first = v.metrics["label_index"]
    assert "split=train tiles=" in first and "index=made" in first and "split=val" in first, first
    assert (data / "tiles" / "train" / "labels.cache").is_file()
    again = prepare_local_data(sys.executable, REPO / "prepare.py", data, "data", "tiny", 0, tmp_path, env)
    assert again.metrics["hash"] == v.metrics["hash"]  # derived, not data: the data set's hash is unchanged
    assert "index=made" not in again.metrics["label_index"] and "index=kept" in again.metrics["label_index"]
    broken = label_index("/nonexistent/python", data, tmp_path, env)
    assert broken.startswith("not made (exit "), broken  # said, never raised: the runs scan as before


def test_a_sandboxed_run_reads_the_index_and_trains_what_a_scan_trains(tmp_path: Path, tiny_data: Path) -> None:
    data = _data(tmp_path, tiny_data)
    ex, ck = _ws(tmp_path, (REPO / "train.py").read_text(), data=data)
    logs, tensors, jsons = [], [], []
    for name in ("scanned", "indexed"):
        if name == "indexed":
            assert "index=made" in label_index(sys.executable, data, tmp_path, {"PATH": "/usr/bin:/bin"})
        run = tmp_path / name
        r = ex.train(_job(ck, run, seed=3, steps=6, prestart=False), None, threading.Event())
        assert r.exit_code == 0, r.log_tail
        logs.append((run / "train.log").read_text())
        tensors.append(_tensors(run / "out" / "weights.pt"))
        jsons.append(json.loads((run / "out" / "train.json").read_text()))
    assert SCANNED in logs[0] and UNWRITABLE in logs[0]  # without it: scanned in the box and lost again
    assert READ not in logs[0]
    assert SCANNED not in logs[1] and UNWRITABLE not in logs[1] and READ in logs[1]  # read, not scanned
    listed = tmp_path / "indexed" / "out" / "data"
    assert sorted(p.name for p in listed.iterdir()) == ["train.txt", "val.txt"]  # a list, no links or copies
    assert all(line.startswith(str(data)) for line in (listed / "train.txt").read_text().splitlines())
    assert tensors[0] == tensors[1] and jsons[0]["final_losses"] == jsons[1]["final_losses"]
    assert [j["steps"] for j in jsons] == [6, 6]
    ex.close()
