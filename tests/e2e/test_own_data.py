"""Your own data, for real (issue 38): train.py fine-tunes a checkpoint of other classes (a transfer:
every tensor that fits is loaded, the class layer starts fresh, the log says which), evaluate.py scores
a 4-class import; a night refuses bad data before anything trains, naming the file; and one tiny night
runs on a COCO export with nothing but `looper init --data` and `looper run`."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from looper.core.verdicts.verdict import Status
from looper.data.importer import import_data
from looper.night.startweights import check_pretrained
from looper.workspace.create import shipped_pretrained
from tests.data.exports import write_coco, write_with_supervision
from tests.e2e.test_pretrained import _env, _train

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
FOUR = ["thermostat", "vav_box", "exhaust_fan", "fire_damper"]
LOOPER = str(Path(sys.executable).with_name("looper"))


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-class COCO export (6 pages of 512 px), imported."""
    root = tmp_path_factory.mktemp("four")
    coco = write_coco(root / "export", n=6, classes=FOUR, side=512)
    import_data(coco, root / "data")
    return root / "data"


def test_a_checkpoint_of_other_classes_fine_tunes_as_a_transfer_both_ways(tmp_path: Path, four: Path) -> None:
    """The shipped 26-class checkpoint on 4-class data, then the real 4-class checkpoint that run wrote on
    the 26-class synthetic data and on its own 4 classes (no transfer: every tensor loaded)."""
    pre = tmp_path / "pretrained"
    pre.mkdir()
    shutil.copy(shipped_pretrained(), pre / "start.safetensors")
    out = _train(tmp_path / "to4", four, 2, {"PRETRAINED": "start.safetensors"}, pre)
    log = (tmp_path / "to4" / "train.log").read_text()
    assert "LOOPER_START weights=start.safetensors tensors=" in log and "(26 classes -> the data's 4)" in log, log[-3000:]
    fresh = log.split("fresh: ", 1)[1].splitlines()[0].split(", ")
    assert fresh and all(".cv3." in k for k in fresh), fresh  # only the head's class layers start fresh
    m = re.search(r"tensors=(\d+) transferred of (\d+)", log)
    assert m, log[-2000:]
    transferred, total = int(m.group(1)), int(m.group(2))
    assert transferred == total - len(fresh) and transferred > 0.9 * total
    from safetensors import safe_open

    with safe_open(str(out / "weights.pt"), framework="pt") as f:
        assert json.loads(f.metadata()["names"]) == FOUR
    shutil.copy(out / "weights.pt", pre / "four.safetensors")
    source = (ROOT / "train.py").read_text().replace('PRETRAINED = "start.safetensors"', 'PRETRAINED = "four.safetensors"')
    v = check_pretrained(tmp_path, source, four)
    assert v.status is Status.PASS and "transfer" not in v.metrics, v.metrics
    _train(tmp_path / "same", four, 1, {"PRETRAINED": "four.safetensors"}, pre)
    log = (tmp_path / "same" / "train.log").read_text()
    assert "LOOPER_START weights=four.safetensors tensors=" in log and "transferred" not in log, log[-2000:]
    tiny = tmp_path / "tiny"
    subprocess.run([sys.executable, str(ROOT / "prepare.py"), "--out", str(tiny), "--scale", "tiny", "--seed", "0",
                    "--test-seed", "1"], check=True, capture_output=True, timeout=300)
    v = check_pretrained(tmp_path, source, tiny)
    assert v.status is Status.PASS and "4 classes vs 26" in v.metrics["transfer"], v.metrics
    _train(tmp_path / "to26", tiny, 1, {"PRETRAINED": "four.safetensors"}, pre)
    assert "(4 classes -> the data's 26)" in (tmp_path / "to26" / "train.log").read_text()
    # evaluate.py scores the 4-class model on the 4-class import's whole test pages
    metrics = tmp_path / "eval" / "METRICS.json"
    r = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--weights", str(out / "weights.pt"), "--data",
                        str(four), "--out", str(metrics)], capture_output=True, text=True, timeout=600,
                       env=_env(YOLO_CONFIG_DIR=str(tmp_path / "ycfg")))
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(json.loads(metrics.read_text())["classes"]) == sorted(FOUR)


def _run(*argv: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPER_")}
    return subprocess.run([LOOPER, *argv], cwd=cwd, env={**env, "YOLO_OFFLINE": "1"}, capture_output=True,
                          text=True, timeout=timeout)


def test_a_night_refuses_bad_data_before_anything_trains_naming_the_file(tmp_path: Path) -> None:
    coco = write_coco(tmp_path / "export", n=5, classes=FOUR, side=400)
    ws = tmp_path / "ws"
    r = _run("init", str(ws), "--preset", "tiny", "--data", str(coco), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    gone = ws / "data" / "pages" / "test" / "page_000.png"
    gone.unlink()
    r = _run("run", "--max-experiments", "1", cwd=ws)
    said = r.stdout + r.stderr
    assert r.returncode == 3, said
    assert f"{gone}: image missing" in said and "data data is not usable" in said, said[-3000:]
    assert "looper data check" in said and "--tag" in said, said[-3000:]
    assert "could not produce a result" not in said and not list(ws.glob("runs/*/*/baseline-s*")), said[-2000:]
    # [data] dir naming the export's JSON file: a named error, not an internal one
    toml = ws / "looper.toml"
    toml.write_text(toml.read_text().replace('dir = "data"', f'dir = "{coco}"'))
    r = _run("run", "--max-experiments", "1", cwd=ws)
    said = r.stdout + r.stderr
    assert r.returncode == 3 and "names a file" in said and f"looper data import {coco}" in said, said[-3000:]
    assert "internal error" not in said and "NotADirectoryError" not in said, said[-3000:]


def test_one_tiny_night_on_a_coco_export_with_init_data_and_run(tmp_path: Path) -> None:
    """Nothing but `looper init --preset tiny --data EXPORT` and `looper run --max-experiments 1`, on a COCO
    export supervision wrote in Roboflow's split folders (its YOLO export of the same pages imports into the
    same tiles and truth: tests/data/test_import.py): 4 classes of another list than the shipped checkpoint's
    26, fine-tuned as a transfer in the sandbox."""
    coco = write_with_supervision(tmp_path / "export", "coco", {"train": 5, "val": 1, "test": 2}, FOUR, side=768)
    ws = tmp_path / "ws"
    r = _run("init", str(ws), "--preset", "tiny", "--data", str(coco), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _run("run", "--max-experiments", "1", cwd=ws, timeout=1500)
    said = f"exit {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    assert r.returncode == 0, said
    con = sqlite3.connect(ws / "experiments.db")
    base = con.execute("SELECT id, status, score FROM experiments WHERE kind='baseline' ORDER BY id").fetchone()
    classes = {c for (c,) in con.execute("SELECT class_name FROM class_metrics WHERE experiment_id=?", (base[0],))}
    cands = con.execute("SELECT status FROM experiments WHERE kind='candidate'").fetchall()
    events = [m for (m,) in con.execute("SELECT message FROM events WHERE kind='baseline'")]
    con.close()
    assert any("starting weights: other classes than the data's: 26 classes vs 4" in m for m in events), events
    assert base[1] == "keep" and base[2] is not None and base[2] > 0, (base, said)
    assert classes == set(FOUR) and len(cands) == 1, (classes, cands, said)
    logs = sorted(ws.glob("runs/tiny/*/baseline-s*/train.log"))
    assert logs and all("(26 classes -> the data's 4)" in p.read_text() for p in logs), logs
    report = _run("report", cwd=ws)
    assert report.returncode == 0 and "thermostat" in report.stdout, report.stdout[-2000:] + report.stderr
