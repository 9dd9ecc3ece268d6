"""The pretrained start, for real: `python -m looper.pretrain` regenerates a checkpoint bit for
bit, `python -m looper.convert_weights` turns an Ultralytics .pt (made here by a real training
run) into a checkpoint train.py fine-tunes from, and train.py's warm-up, freezing and threads
under a step budget. That a night's runs fine-tune the checkpoint `looper init` copied, inside the real
sandbox, is checked on the e2e tier's one real night (tests/e2e/test_installed.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tiers

from looper.core.propose.hyperblock import rewrite_knobs
from looper.core.verdicts.verdict import Status
from looper.night.startweights import check_pretrained
from looper.workspace.create import shipped_pretrained

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"YOLO_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}, **extra)
    return env


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "data"
    subprocess.run([sys.executable, str(ROOT / "prepare.py"), "--out", str(out), "--scale", "tiny", "--seed", "0"],
                   check=True, capture_output=True, text=True, timeout=300)
    return out


def _train(folder: Path, data: Path, steps: int, knobs: dict, pretrained_dir: Path | None = None,
           cpus: set[int] | None = None, omp: str | None = "") -> Path:
    """train.py (the workspace's, knobs rewritten) for ``steps`` steps in ``folder``, on ``cpus`` (default:
    the cores this process may use), with ``OMP_NUM_THREADS`` ``omp`` ("": as this process has it; None:
    unset); its LOOPER_OUT."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(rewrite_knobs((ROOT / "train.py").read_text(), knobs))
    out = folder / "out"
    env = _env(LOOPER_DATA=str(data), LOOPER_OUT=str(out), LOOPER_SEED="0", LOOPER_DEVICE="cpu",
               LOOPER_MAX_STEPS=str(steps), LOOPER_BUDGET_SECONDS="600",
               YOLO_CONFIG_DIR=str(folder / "ultralytics"))
    if omp is None:
        env.pop("OMP_NUM_THREADS", None)
    elif omp:
        env["OMP_NUM_THREADS"] = omp
    if pretrained_dir is not None:
        env["LOOPER_PRETRAINED_DIR"] = str(pretrained_dir)
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    r = subprocess.run([sys.executable, "train.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=600,
                       preexec_fn=pin)
    (folder / "train.log").write_text(r.stdout + r.stderr)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return out


def test_pretrain_regenerates_a_checkpoint_bit_for_bit(tmp_path: Path) -> None:
    outs = []
    for i in (1, 2):
        out = tmp_path / f"start{i}.safetensors"
        r = subprocess.run([sys.executable, "-m", "looper.pretrain", "--scale", "tiny", "--steps", "4", "--out",
                            str(out), "--work", str(tmp_path / f"work{i}")], capture_output=True, text=True,
                           timeout=600, env=_env())
        assert r.returncode == 0, r.stdout + r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    from safetensors import safe_open

    with safe_open(str(tmp_path / "start1.safetensors"), framework="pt") as f:
        prov = json.loads(f.metadata()["provenance"])
    assert prov["steps"] == 4 and prov["data_seed"] == 1000 and prov["scale"] == "tiny"
    assert prov["recipe"]["PRETRAINED"] == ""  # the checkpoint itself was trained from scratch
    ws = tmp_path / "ws"
    (ws / "pretrained").mkdir(parents=True)
    shutil.copy(tmp_path / "start1.safetensors", ws / "pretrained" / "start.safetensors")
    assert check_pretrained(ws, (ROOT / "train.py").read_text()).status is Status.PASS


def test_an_ultralytics_pt_converts_and_train_py_fine_tunes_from_it(tmp_path: Path, tiny_data: Path) -> None:
    import torch
    from safetensors.torch import load_file

    scratch = _train(tmp_path / "scratch", tiny_data, 3, {"PRETRAINED": ""})
    pt = scratch / "ultralytics" / "weights" / "last.pt"  # a real Ultralytics checkpoint
    ws = tmp_path / "ws"
    out = ws / "pretrained" / "mine.safetensors"
    r = subprocess.run([sys.executable, "-m", "looper.convert_weights", str(pt), "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "26 classes" in r.stdout
    ckpt = torch.load(str(pt), map_location="cpu", weights_only=False)
    want = ckpt["ema"].state_dict()
    got = load_file(str(out))
    assert set(got) == set(want) and all(torch.equal(got[k], want[k].float()) for k in want)
    source = rewrite_knobs((ROOT / "train.py").read_text(), {"PRETRAINED": "mine.safetensors"})
    assert check_pretrained(ws, source).status is Status.PASS
    tuned = _train(tmp_path / "tuned", tiny_data, 2, {"PRETRAINED": "mine.safetensors", "LR0": 0.01, "LRF": 0.2,
                                                      "WARMUP_EPOCHS": 0.0, "COS_LR": False}, ws / "pretrained")
    assert "LOOPER_START weights=mine.safetensors" in (tmp_path / "tuned" / "train.log").read_text()
    tj = json.loads((tuned / "train.json").read_text())
    assert tj["steps"] == 2 and tj["pretrained"] == "mine.safetensors"
    # the step budget's LR schedule spans exactly its steps: LR0 at the first, LR0 * LRF at the last
    assert tj["lr_first"] == pytest.approx(0.01) and tj["lr_last"] == pytest.approx(0.01 * 0.2)
    # a .pt that is not one: a clear error naming the file, nothing written
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    r = subprocess.run([sys.executable, "-m", "looper.convert_weights", str(bad), "--out", str(tmp_path / "x.st")],
                       capture_output=True, text=True, timeout=300, env=_env())
    assert r.returncode != 0 and "bad.pt is not a readable Ultralytics checkpoint" in r.stderr
    assert not (tmp_path / "x.st").exists()


def test_train_py_refuses_a_checkpoint_of_another_width_and_says_how_to_start_from_scratch(
        tmp_path: Path, tiny_data: Path) -> None:
    folder = tmp_path / "wide"
    folder.mkdir()
    (folder / "train.py").write_text(rewrite_knobs((ROOT / "train.py").read_text(), {"WIDTH": 0.25}))
    pre = tmp_path / "pretrained"
    pre.mkdir()
    shutil.copy(str(shipped_pretrained()), pre / "start.safetensors")
    r = subprocess.run([sys.executable, "train.py"], cwd=folder, capture_output=True, text=True, timeout=300,
                       env=_env(LOOPER_DATA=str(tiny_data), LOOPER_OUT=str(folder / "out"), LOOPER_MAX_STEPS="2",
                                LOOPER_PRETRAINED_DIR=str(pre), YOLO_CONFIG_DIR=str(folder / "u")))
    assert r.returncode != 0
    assert "another architecture than MODEL=yolov8 WIDTH=0.25" in r.stderr and 'PRETRAINED = ""' in r.stderr


def test_warm_up_and_freezing_under_a_step_budget(tmp_path: Path, tiny_data: Path) -> None:
    """WARMUP_EPOCHS becomes that many epochs' worth of steps inside the step budget (tiny data: 13
    steps an epoch, 0.25 -> 3 steps: the first step at LR0 / 4); FREEZE = 10 freezes the backbone."""
    pre = tmp_path / "pretrained"
    pre.mkdir()
    shutil.copy(str(shipped_pretrained()), pre / "start.safetensors")
    out = _train(tmp_path / "run", tiny_data, 4, {"LR0": 0.01, "LRF": 0.1, "COS_LR": False, "WARMUP_EPOCHS": 0.25,
                                                  "FREEZE": 10}, pre)
    tj = json.loads((out / "train.json").read_text())
    assert tj["steps"] == 4 and tj["lr_first"] == pytest.approx(0.01 / 4) and tj["lr_last"] == pytest.approx(0.001)
    log = (tmp_path / "run" / "train.log").read_text()
    frozen = {int(x.split(".", 1)[0]) for x in log.split("Freezing layer 'model.")[1:]}
    assert frozen == set(range(10)) | {22}, frozen  # layers 0-9, and Ultralytics' own DFL (22.dfl)


def test_train_py_steps_on_the_cores_it_may_use(tmp_path: Path, tiny_data: Path) -> None:
    """THREADS = 0: torch's threads are the cores train.py may use, so a run pinned to one core (as
    bench_search pins its arms) steps on one thread, and THREADS = 1 on a free machine on one too; an
    environment's own OMP_NUM_THREADS is honoured (torch's default; train.py once overrode it with every core)."""
    cores = os.sched_getaffinity(0)
    if len(cores) < 2:
        pytest.skip("machine condition: one CPU core here; a pinned run cannot be told from a free one")
    pinned = _train(tmp_path / "pinned", tiny_data, 2, {"PRETRAINED": ""}, cpus={min(cores)}, omp=None)
    assert json.loads((pinned / "train.json").read_text())["threads"] == 1
    free = _train(tmp_path / "free", tiny_data, 2, {"PRETRAINED": ""}, omp=None)
    assert json.loads((free / "train.json").read_text())["threads"] == len(cores)
    one = _train(tmp_path / "one", tiny_data, 2, {"PRETRAINED": "", "THREADS": 1}, omp=None)
    assert json.loads((one / "train.json").read_text())["threads"] == 1
    told = _train(tmp_path / "told", tiny_data, 2, {"PRETRAINED": ""}, omp="1")
    assert json.loads((told / "train.json").read_text())["threads"] == 1


@tiers.NEEDS_NO_GPU
def test_make_calibrate_gpu_refuses_a_machine_without_a_gpu_before_it_builds_anything(tmp_path: Path) -> None:
    # the one command for a lent GPU (`make calibrate-gpu`, docs/CONTRIBUTING.md): on this CPU it must stop at once, say why,
    # and leave no pool and no result behind (a CPU "calibration" at full scale would run for days)
    pool = tmp_path / "pool"
    result = ROOT / "bench" / "calibration" / "gpu-full.json"
    before = result.stat().st_mtime_ns if result.exists() else None
    r = subprocess.run(["make", "-s", "calibrate-gpu", f"GPU_POOL={pool}", f"PY={sys.executable}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env=_env())
    assert r.returncode != 0, r.stdout + r.stderr
    assert "--require-gpu but torch sees no CUDA GPU" in r.stderr
    assert not pool.exists()
    assert (result.stat().st_mtime_ns if result.exists() else None) == before
