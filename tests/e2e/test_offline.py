"""Nothing looper runs downloads anything, on any device: train.py (its GPU path included), evaluate.py, the
export, the launchers of boxes started ahead, ``looper predict`` and the label index, each run with every
download made to fail loudly (tests/offline_guard/sitecustomize.py).

On a GPU every sandboxed run once crashed in Ultralytics' AMP check, which builds YOLO("yolo26n.pt") and so
downloads it into ./weights (read-only in the sandbox, and offline). A CPU never takes that path, so these
tests take it on purpose: Ultralytics' own check with the model's device made to read "cuda" (the control:
the guard catches its download), and train.py's replacement for it on both of its branches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
GUARD = REPO / "tests" / "offline_guard"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(GUARD), LOOPER_GUARD_LOG=str(tmp_path / "guard.log"), YOLO_OFFLINE="1",
                YOLO_CONFIG_DIR=str(tmp_path / "ycfg"), HOME=str(tmp_path / "home"), **extra)


def _read_only_cwd(tmp_path: Path) -> Path:
    """A working folder nothing can write into, as the sandbox's checkout is (Ultralytics' ./weights went there)."""
    cwd = tmp_path / "ro"
    cwd.mkdir()
    cwd.chmod(0o555)
    return cwd


def _attempts(tmp_path: Path) -> list[str]:
    log = tmp_path / "guard.log"
    return log.read_text().splitlines() if log.exists() else []


def _run(code: str, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=_read_only_cwd(tmp_path), env=_env(tmp_path, **extra),
                          capture_output=True, text=True, timeout=300)


CUDA_MODEL = """
import types, torch
torch.cuda.get_device_name = lambda *a, **k: "NVIDIA H200"
class OnCuda(torch.nn.Module):  # a model whose parameters say they are on a GPU
    stride = torch.tensor([32.0])
    def parameters(self, recurse=True):
        return iter([types.SimpleNamespace(device=torch.device("cuda", 0))])
"""


def test_the_guard_catches_ultralytics_own_amp_check_downloading_on_a_gpu(tmp_path: Path) -> None:
    """The control: what crashed every run on the H200 is caught here on a CPU, so the tests below can fail."""
    p = _run(CUDA_MODEL + "from ultralytics.utils.checks import check_amp\ncheck_amp(OnCuda())\n", tmp_path)
    assert p.returncode != 0
    assert "DOWNLOAD ATTEMPTED" in p.stderr
    assert any("yolo26n.pt" in a for a in _attempts(tmp_path)), _attempts(tmp_path)


def _train_env(tmp_path: Path, tiny_data: Path, steps: int) -> dict[str, str]:
    return {"LOOPER_DATA": str(tiny_data), "LOOPER_OUT": str(tmp_path / "out"), "LOOPER_SEED": "0",
            "LOOPER_BUDGET_SECONDS": "150", "LOOPER_MAX_STEPS": str(steps), "LOOPER_DEVICE": "cpu",
            "LOOPER_PRETRAINED_DIR": str(REPO / "looper" / "pretrained")}


def test_train_py_decides_amp_without_a_download(tiny_data: Path, tmp_path: Path) -> None:
    """train.py asks the trainer for AMP on every device (AMP = True), so the trainer's AMP check runs on this
    CPU too: train.py's own check answers (off: a CPU) and nothing is downloaded."""
    env = _env(tmp_path, **_train_env(tmp_path, tiny_data, 3))
    p = subprocess.run([sys.executable, str(REPO / "train.py")], cwd=_read_only_cwd(tmp_path), env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "LOOPER_AMP on=False reason=device cpu" in p.stdout
    assert _attempts(tmp_path) == []
    info = json.loads((tmp_path / "out" / "train.json").read_text())
    assert info["steps"] == 3 and "amp" in info["startup_phases"]


def test_train_py_amp_check_on_its_gpu_branch(tiny_data: Path, tmp_path: Path) -> None:
    """train.py's check on a model that reads "cuda": it compares the model with itself (no file, no download);
    where that cannot run, AMP is off and the line says why. The comparison itself, run on this CPU in
    bfloat16, answers with its measured difference; outputs that are not finite turn AMP off."""
    code = (
        "import runpy, torch\n"
        f"g = runpy.run_path({str(REPO / 'train.py')!r}, run_name='train_under_test')\n"
        + CUDA_MODEL +
        "print('GPU_BRANCH', g['amp_check'](OnCuda()))\n"
        "net = g['YOLO'](str(g['model_yaml']()), task='detect').model\n"
        "ok, why = g['amp_agrees'](net, torch.device('cpu'), torch.bfloat16)\n"
        "print('CPU_BF16', ok, why)\n"
        "class Inf(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return (x * 1e30 * 1e30 if torch.is_autocast_cpu_enabled() else x,)\n"
        "print('INF', g['amp_agrees'](Inf(), torch.device('cpu'), torch.bfloat16))\n"
    )
    p = _run(code, tmp_path, **_train_env(tmp_path, tiny_data, 1))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "LOOPER_AMP on=False reason=check failed" in p.stdout
    assert "GPU_BRANCH False" in p.stdout
    line = next(x for x in p.stdout.splitlines() if x.startswith("CPU_BF16"))
    assert line.split()[1] in ("True", "False") and "max abs difference" in line
    assert "INF (False, 'torch.bfloat16 outputs not finite')" in p.stdout
    assert _attempts(tmp_path) == []


def test_evaluate_py_and_the_export_never_download(tiny_data: Path, tiny_weights: Path, tmp_path: Path) -> None:
    """The evaluator and both export formats, each with every download made to fail: each succeeds, none tried."""
    p = subprocess.run([sys.executable, str(REPO / "evaluate.py"), "--weights", str(tiny_weights / "weights.pt"),
                        "--data", str(tiny_data), "--out", str(tmp_path / "METRICS.json"), "--device", "cpu"],
                       cwd=_read_only_cwd(tmp_path), env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (tmp_path / "METRICS.json").is_file()
    from e2e.test_export import LOOPER, _workspace

    root = _workspace(tmp_path, tiny_data, tiny_weights)
    for fmt in ("pt", "onnx"):
        out = tmp_path / f"best.{fmt}"
        e = subprocess.run([str(LOOPER), "export", "--format", fmt, "--out", str(out)], cwd=root,
                           env=_env(tmp_path, LOOPER_WORKSPACE=str(root)), capture_output=True, text=True, timeout=300)
        assert e.returncode == 0, e.stdout[-1500:] + e.stderr[-1500:]
        assert out.is_file()
    assert _attempts(tmp_path) == []


def test_the_boxes_started_ahead_and_predict_never_download(tiny_data: Path, tiny_weights: Path,
                                                            tmp_path: Path) -> None:
    """The launchers of boxes started ahead (issue 46: a training's box imports Ultralytics' trainer, an
    evaluation's its model code) run to go and then their script, and ``looper predict`` on the test pages,
    each with every download made to fail: each succeeds, none tried."""
    from looper.executors.prestart import EVAL_LAUNCHER, LAUNCHER, go_line
    from looper.executors.sandbox import package_parents
    from looper.ship.predict import RESULTS_NAME
    from tests.e2e.test_export import LOOPER, _workspace

    said = tmp_path / "said.json"
    script = tmp_path / "script.py"  # what runs after go: it notes the launcher's imports were done
    script.write_text("import json, sys\n"
                      f"json.dump(sorted(m for m in sys.modules if m.startswith('ultralytics')), open({str(said)!r}, 'w'))\n")
    cwd = _read_only_cwd(tmp_path)
    for code, args in ((LAUNCHER, [str(script)]), (EVAL_LAUNCHER, [os.pathsep.join(package_parents()), str(script)])):
        said.unlink(missing_ok=True)
        p = subprocess.run([sys.executable, "-c", code, *args], input=go_line({}).decode(), cwd=cwd,
                           env=_env(tmp_path), capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 and "CUDA initialised: False" in p.stdout, p.stdout + p.stderr[-2000:]
        assert "not imported" not in p.stdout and "ultralytics.nn.tasks" in json.loads(said.read_text())
    root = _workspace(tmp_path, tiny_data, tiny_weights)
    pages = sorted((tiny_data / "pages" / "test").glob("*.png"))
    e = subprocess.run([str(LOOPER), "predict", *map(str, pages), "--out", str(tmp_path / "pred")], cwd=root,
                       env=_env(tmp_path, LOOPER_WORKSPACE=str(root)), capture_output=True, text=True, timeout=300)
    assert e.returncode == 0, e.stdout[-1500:] + e.stderr[-1500:]
    assert json.loads((tmp_path / "pred" / RESULTS_NAME).read_text())["images"]
    assert _attempts(tmp_path) == []


def test_the_label_index_never_downloads(tiny_data: Path, tmp_path: Path) -> None:
    """The data step's label index (Ultralytics' dataset, run by the harness once a data set): made, nothing tried."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    p = subprocess.run([sys.executable, str(REPO / "looper" / "data" / "labelindex.py"), str(data)],
                       cwd=_read_only_cwd(tmp_path), env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
    assert "labelindex split=train" in p.stdout and "index=made" in p.stdout, p.stdout
    assert _attempts(tmp_path) == []
