"""Issue 13's attack table: one malicious train.py per row, each training a tiny model first and
then cheating, run inside the real training sandbox (looper/executors/sandbox.py + looper/proc.py, the
argv and choke point the executors use) and, for the pickle row, the real evaluation sandbox.

Each run must end as a crash (non-zero exit) whose log names what was attempted, with the
database, the checkout, the baselines, the data and the venv as they were, and no process left.

Note: these run the sandbox functions directly, not the daemon: tests/security/test_daemon.py
runs the daemon with its executor (the loop wiring) on the fast fixture workspace.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from looper import proc
from looper.core.fault.failure import FailureEvidence, classify_failure
from looper.core.verdicts.verdict import Outcome
from looper.executors import evaluator, sandbox

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.e2e,
]

# The honest part every attack runs first: a few real optimiser steps of a tiny YOLO detector,
# saved as looper-weights/1 (safetensors + model yaml), then train.json and the summary line.
HONEST = '''
import json, os, sys, pathlib
import torch, yaml, ultralytics
from safetensors.torch import save_file
from ultralytics.nn.tasks import DetectionModel

OUT = pathlib.Path(os.environ["LOOPER_OUT"])
DATA = pathlib.Path(os.environ["LOOPER_DATA"])
names = yaml.safe_load((DATA / "dataset.yaml").read_text())["names"]
names = [names[i] for i in sorted(names)] if isinstance(names, dict) else list(names)
cfg = yaml.safe_load((pathlib.Path(ultralytics.__file__).parent / "cfg/models/v8/yolov8.yaml").read_text())
cfg.pop("scales")
cfg.update(depth_multiple=0.33, width_multiple=0.0625, max_channels=1024, nc=len(names))
torch.manual_seed(0)
model = DetectionModel(cfg, ch=3, nc=len(names), verbose=False)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(3):
    pred = model(torch.rand(2, 3, 64, 64))
    loss = pred["boxes"].float().pow(2).mean() + pred["scores"].float().sigmoid().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
tensors = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
save_file(tensors, str(OUT / "weights.pt"), metadata={
    "format": "looper-weights/1", "model_yaml": yaml.safe_dump(dict(model.yaml), sort_keys=False),
    "names": json.dumps(names)})
(OUT / "train.json").write_text(json.dumps({"steps": 3, "epochs": 1, "seconds": 1.0, "peak_memory_mb": 1.0,
                                            "final_losses": {"box": float(loss)}, "device": "cpu"}))
print(f"LOOPER_SUMMARY steps=3 loss={float(loss):.4f}", flush=True)
ROOT = pathlib.Path.cwd()
'''

SITE = Path(next(p for p in sys.path if p.endswith("site-packages")))

# row -> (the cheat appended after the honest training, the words the crash must carry)
ATTACKS: dict[str, tuple[str, str]] = {
    "pickle_in_weights": ('''
import pickle
class Payload:  # evaluate.py used to torch.load(weights_only=False): this ran in the evaluator
    def __reduce__(self):
        return (exec, ("open(MARKER, 'w').write('pickle ran')",))
state = {k: v for k, v in tensors.items()}
torch.save({"ema": None, "model": state, "extra": Payload()}, OUT / "weights.pt")
''', "weights refused: weights.pt is not a safetensors state dict"),
    "survivor_rewrites_metrics": ('''
import time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for _ in range(600):  # replace METRICS.json a second after evaluate.py wrote it
            try:
                (OUT.parent / "METRICS.json").write_text('{"weighted_f1": 0.9996}')
            except OSError:
                pass
            time.sleep(0.1)
    os._exit(0)
time.sleep(0.3)
''', "process(es) running, ended with its sandbox"),
    "looper_package_in_checkout": ('''
import shutil, looper
(ROOT / ".git" / "info").mkdir(parents=True, exist_ok=True)
with open(ROOT / ".git" / "info" / "exclude", "a") as f:
    f.write("looper/\\n")
shutil.copytree(pathlib.Path(looper.__file__).parent, ROOT / "looper")
''', "Read-only file system: '{root}/.git'"),  # the checkout shows train.py alone, read-only
    "pth_in_venv": ('''
(pathlib.Path(SITE) / "zz_looper_boost.pth").write_text("import looper_boost\\n")
''', "Read-only file system: '{site}/zz_looper_boost.pth'"),
    "rewrite_own_row": ('''
import sqlite3
db = sqlite3.connect(ROOT / "experiments.db")
db.execute("UPDATE experiments SET status = 'keep', score = 0.97 WHERE id = 1")
db.commit()
''', "unable to open database file"),  # the database is not in the sandbox
    "plant_baseline_and_config": ('''
(ROOT / "baselines" / "2999-12-31.json").write_text('{"metrics": {"weighted_f1": 0.0, "classes": {}}}')
''', "No such file or directory: '{root}/baselines/2999-12-31.json'"),
    "plant_pid_note": ('''
(ROOT / ".looper" / "pids" / "1.pid").write_text("python train.py")
''', "No such file or directory: '{root}/.looper/pids/1.pid'"),
    "post_commit_hook": ('''
hook = ROOT / ".git" / "hooks" / "post-commit"
hook.write_text("#!/bin/sh\\ntouch /tmp/hooked\\n")
''', "No such file or directory: '{root}/.git/hooks/post-commit'"),
    "read_test_pages": ('''
truth = json.loads((DATA / "pages" / "test" / "page_000.json").read_text())
''', "No such file or directory: '{data}/pages/test/page_000.json'"),
}


def _tree(root: Path, skip: Path | None = None) -> dict[str, str]:
    """path -> sha256 (or link target) of every file under root, ``skip`` left out."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        if skip is not None and (d == skip or skip in d.parents):
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            p = d / name
            if p.is_symlink():
                found[str(p.relative_to(root))] = "-> " + os.readlink(p)
            elif p.is_file():
                found[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return found


def _venv_state() -> tuple[list[str], dict[str, str]]:
    pth = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in SITE.glob("*.pth")}
    return sorted(os.listdir(SITE)), pth


def _left_running(root: Path, marker: str) -> list[str]:
    left = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(p / "cwd")
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if (cwd == str(root) or cwd.startswith(str(root) + "/") or marker in cmd) and cmd.strip():
            left.append(f"{p.name}: {cmd[:100]}")
    return left


@pytest.fixture()
def workspace(tmp_path: Path, tiny_data: Path) -> dict[str, Path]:
    root = tmp_path / "ws"
    root.mkdir()
    for name in ("evaluate.py", "prepare.py", "program.md", "looper.toml"):
        shutil.copyfile(REPO / name, root / name)
    (root / "baselines").mkdir()
    (root / "baselines" / "2025-01-01.json").write_text('{"metrics": {"weighted_f1": 0.5, "classes": {}}}\n')
    (root / ".looper" / "pids").mkdir(parents=True)
    db = sqlite3.connect(root / "experiments.db")
    db.execute("CREATE TABLE experiments (id INTEGER PRIMARY KEY, status TEXT, score REAL)")
    db.execute("INSERT INTO experiments VALUES (1, 'discard', 0.18)")
    db.commit()
    db.close()
    (root / "train.py").write_text("print('placeholder')\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": os.environ["PATH"]}
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "-m", "init"], cwd=root, check=True, env=env)
    out = root / ".looper" / "runs" / "1" / "main" / "out"
    out.mkdir(parents=True)
    return {"root": root, "data": tiny_data, "out": out}


def train_in_sandbox(workspace: dict[str, Path]) -> proc.Supervised:
    """The workspace's train.py run once in the real training sandbox (seed 0, CPU), as the executor runs it."""
    root, data, out = workspace["root"], workspace["data"], workspace["out"]
    env = {"LOOPER_BUDGET_SECONDS": "60", "LOOPER_DATA": str(data), "LOOPER_OUT": str(out), "LOOPER_SEED": "0",
           "LOOPER_DEVICE": "cpu", "PYTHONUNBUFFERED": "1", "YOLO_OFFLINE": "1"}
    argv = sandbox.train_argv([sys.executable, "train.py"], checkout=root, out_dir=out, data_dir=data, env=env)
    return proc.supervise(argv, cwd=root, env=None, log_path=out.parent / "train.log",
                          limits=proc.Limits(budget_seconds=240, stall_seconds=120))


@pytest.mark.parametrize("row", sorted(ATTACKS))
def test_attack_ends_as_a_crash_that_names_it_and_changes_nothing(row: str, workspace: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    root, data, out = workspace["root"], workspace["data"], workspace["out"]
    cheat, words = ATTACKS[row]
    marker = tmp_path / "pickle-ran"
    source = (HONEST + f"SITE = {str(SITE)!r}\nMARKER = {str(marker)!r}\n" + textwrap.dedent(cheat))
    (root / "train.py").write_text(source)
    before = (_tree(root, skip=out.parent), _tree(data), _venv_state())

    run = train_in_sandbox(workspace)
    log = run.log_tail
    expected = words.format(root=root, site=SITE, data=data)

    if row == "pickle_in_weights":  # training "succeeds"; the evaluator refuses the pickle
        assert run.exit_code == 0, log
        copy, eval_out = evaluator.prepare_evaluator(root / "evaluate.py", out.parent / "eval")
        ev = proc.supervise(sandbox.eval_argv(sys.executable, copy, weights=out / "weights.pt", data_dir=data,
                                              out_dir=eval_out, env={"YOLO_OFFLINE": "1"}, device="cpu"),
                            cwd=out.parent, env=None, log_path=out.parent / "eval.log",
                            limits=proc.Limits(budget_seconds=240, stall_seconds=120))
        assert ev.exit_code == 65, ev.log_tail
        log = ev.log_tail
        assert not marker.exists(), "the pickled payload ran"
        assert not (eval_out / "METRICS.json").exists()
    else:
        assert run.exit_code not in (0, None), log
        assert "LOOPER_SUMMARY steps=3" in log  # it trained first
        c = classify_failure(FailureEvidence(exit_code=run.exit_code, signal=run.signal, log_tail=log,
                                             data_dir=str(data)))
        assert c.outcome is Outcome.CRASH and not c.needs_canary, c  # the change's doing, not the harness's
    assert expected in log, f"the crash does not name the attempt ({expected!r}):\n{log[-2000:]}"

    time.sleep(0.3)
    assert _left_running(root, "zz_looper") == []
    assert not (out.parent / "METRICS.json").exists()
    after = (_tree(root, skip=out.parent), _tree(data), _venv_state())
    assert after[0] == before[0], "the checkout, database, baselines or .looper changed"
    assert after[1] == before[1], "the data changed"
    assert after[2] == before[2], "the venv changed"
    assert not Path("/tmp/hooked").exists()


def test_the_honest_part_alone_passes_training_and_evaluation(workspace: dict[str, Path]) -> None:
    """The control: without a cheat the same train.py ends cleanly and its weights are scored."""
    root, data, out = workspace["root"], workspace["data"], workspace["out"]
    (root / "train.py").write_text(HONEST)
    run = train_in_sandbox(workspace)
    assert run.exit_code == 0, run.log_tail
    assert evaluator.plain_file(out / "weights.pt") is None
    copy, eval_out = evaluator.prepare_evaluator(root / "evaluate.py", out.parent / "eval")
    ev = proc.supervise(sandbox.eval_argv(sys.executable, copy, weights=out / "weights.pt", data_dir=data,
                                          out_dir=eval_out, env={"YOLO_OFFLINE": "1"}, device="cpu"),
                        cwd=out.parent, env=None, log_path=out.parent / "eval.log",
                        limits=proc.Limits(budget_seconds=400, stall_seconds=200))
    assert ev.exit_code == 0, ev.log_tail
    assert evaluator.collect_metrics(eval_out, out.parent / "METRICS.json")
    assert "weighted_f1" in (out.parent / "METRICS.json").read_text()
