"""A prestarted run (issue 46, looper/executors/prestart.py) through the real local executor and its real
bubblewrap sandbox: the box comes up and imports while the slot is held, train.py runs only after go and its
wall clock counts from there, a run whose slot is not given never runs train.py, nothing passes from one
run's box to the next, and the same seed trains the same weights, bit for bit, prestarted and cold."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from looper.executors.base import EvalJob, TrainJob
from looper.executors.local import LocalExecutor
from looper.executors.prestart import NOT_STARTED_EXIT, READY_MARK
from looper.executors.sandbox import WEIGHTS_REFUSED_EXIT

pytestmark = [pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]

# The candidate: its first line notes the clock, then whatever was left in its interpreter and its /tmp.
PROBE = '''import builtins, json, os, sys, time
t = time.time()
seen = {"t": t, "leak": hasattr(builtins, "LOOPER_LEAK"), "tmp": sorted(os.listdir("/tmp")),
        "main": __name__, "argv": sys.argv, "path0": sys.path[0], "torch": "torch" in sys.modules,
        "env": {k: v for k, v in os.environ.items() if k.startswith("LOOPER_")}}
builtins.LOOPER_LEAK = 1
open("/tmp/left-by-the-last-run", "w").write("x")
out = os.environ["LOOPER_OUT"]
json.dump(seen, open(os.path.join(out, "seen.json"), "w"))
'''


def _ws(tmp_path: Path, source: str, data: Path | None = None) -> tuple[LocalExecutor, Path]:
    root = tmp_path / "ws"
    ck = root / "ck"
    ck.mkdir(parents=True)
    (ck / "train.py").write_text(source)
    shutil.copytree(REPO / "looper" / "pretrained", root / "pretrained")
    ex = LocalExecutor(root, python=sys.executable)
    if data is None:
        data = root / "data"
        (data / "tiles").mkdir(parents=True)
        (data / "dataset.yaml").write_text("path: .\n")
    ex.use_data(str(data))
    return ex, ck


def _job(ck: Path, run: Path, seed: int = 0, steps: int = 0, gate=None, prestart: bool = True) -> TrainJob:
    (run / "out").mkdir(parents=True)
    return TrainJob(checkout=ck, out_dir=run / "out", seed=seed, budget_seconds=240, grace_seconds=30,
                    stall_seconds=120, log_path=run / "train.log", max_steps=steps, gate=gate, prestart=prestart)


def _tensors(path: Path) -> dict[str, str]:
    """Each tensor's sha256, and the header's metadata less the model yaml's own path (``yaml_file``)."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        out = {k: hashlib.sha256(f.get_tensor(k).numpy().tobytes()).hexdigest() for k in f.keys()}  # noqa: SIM118
        meta = dict(f.metadata() or {})
    meta["model_yaml"] = "\n".join(ln for ln in meta.get("model_yaml", "").splitlines() if not ln.startswith("yaml_file:"))
    return {**out, **{f"meta:{k}": v for k, v in meta.items()}}


class Gate:
    """Given once the box said it is ready and ``hold`` seconds more have passed (or refused: ``give`` False)."""

    def __init__(self, log: Path, hold: float = 1.0, give: bool = True) -> None:
        self.log, self.hold, self.give = log, hold, give
        self.at: float | None = None

    def __call__(self) -> bool:
        deadline = time.monotonic() + 120
        while READY_MARK not in (self.log.read_text() if self.log.exists() else ""):
            assert time.monotonic() < deadline, "the prestarted box never said it was ready"
            time.sleep(0.05)
        time.sleep(self.hold)
        self.at = time.time()
        return self.give


def test_train_py_runs_only_after_go_in_a_box_of_its_own_and_the_next_box_waits_ready(tmp_path: Path) -> None:
    ex, ck = _ws(tmp_path, PROBE)
    seen = []
    for n in range(3):  # runs one after the other: the second and third in boxes started during the one before
        run = tmp_path / f"run{n}"
        gate = Gate(run / "train.log")
        r = ex.train(_job(ck, run, seed=n, gate=gate), None, threading.Event())
        assert r.exit_code == 0 and r.started, r.log_tail
        s = json.loads((run / "out" / "seen.json").read_text())  # the box's $LOOPER_OUT, now the run's out/
        assert gate.at is not None and s["t"] >= gate.at  # the candidate's first line ran after go
        assert r.held_seconds >= 1.0  # the wait: the box was up before it, and it is not the run's time
        assert r.seconds < r.held_seconds + 60
        log = (run / "train.log").read_text()
        assert "CUDA initialised: False" in log  # the launcher imports; it never initialises CUDA
        seen.append(s)
    for n, s in enumerate(seen):
        assert s["torch"]  # the imports were done before go
        assert s["main"] == "__main__" and s["argv"] == ["train.py"]  # as python train.py
        assert s["env"]["LOOPER_SEED"] == str(n) and s["env"]["LOOPER_OUT"] == s["path0"].replace("/code", "/out")
        assert not s["leak"]  # a fresh interpreter per run
        assert "left-by-the-last-run" not in s["tmp"]  # a fresh /tmp per run
    assert len({s["path0"] for s in seen}) == 3  # three boxes, one a run
    boxes = ex.workspace / ".looper" / "boxes"
    deadline = time.monotonic() + 60
    while len(list(boxes.glob("box-*"))) != 1 and time.monotonic() < deadline:  # started in the background
        time.sleep(0.05)
    assert len(list(boxes.glob("box-*"))) == 1  # the next run's, asked for at the last run's first step
    ex.close()
    assert list((ex.workspace / ".looper" / "boxes").glob("box-*")) == []  # the night over: ended and removed


def test_a_run_whose_slot_is_not_given_never_runs_its_train_py(tmp_path: Path) -> None:
    ex, ck = _ws(tmp_path, PROBE)
    run = tmp_path / "run"
    gate = Gate(run / "train.log", hold=0.0, give=False)
    r = ex.train(_job(ck, run, gate=gate), None, threading.Event())
    assert not r.started and r.exit_code == NOT_STARTED_EXIT
    assert not (run / "out" / "seen.json").exists()  # train.py was never read
    assert "looper prestart: not started" in (run / "train.log").read_text()
    ex.close()


def test_the_same_seed_trains_the_same_weights_prestarted_and_cold(tmp_path: Path, tiny_data: Path) -> None:
    ex, ck = _ws(tmp_path, (REPO / "train.py").read_text(), data=tiny_data)
    tensors, jsons = [], []
    for name, gate in (("cold", None), ("prestarted", Gate(tmp_path / "prestarted" / "train.log", hold=0.5))):
        run = tmp_path / name
        r = ex.train(_job(ck, run, seed=3, steps=6, gate=gate, prestart=gate is not None), None, threading.Event())
        assert r.exit_code == 0 and r.started, r.log_tail
        tensors.append(_tensors(run / "out" / "weights.pt"))
        jsons.append(json.loads((run / "out" / "train.json").read_text()))
    assert tensors[0] == tensors[1]  # bit for bit (the header names each run's own out/ folder, nothing else differs)
    assert [j["steps"] for j in jsons] == [6, 6] and jsons[0]["final_losses"] == jsons[1]["final_losses"]
    assert jsons[1]["startup_phases"]["imports"] < 0.5 <= jsons[0]["startup_phases"]["imports"]  # done before go
    assert READY_MARK in (tmp_path / "prestarted" / "train.log").read_text()
    assert READY_MARK not in (tmp_path / "cold" / "train.log").read_text()
    ex.close()


# Inserted into the shipped train.py after its __future__ line: the modules imported from its first line on.
IMPORT_PROBE = """
import atexit as _atexit, json as _json, os as _os, sys as _sys
_BEFORE = set(_sys.modules)
_atexit.register(lambda: _json.dump(sorted(set(_sys.modules) - _BEFORE),
                                   open(_os.path.join(_os.environ["LOOPER_OUT"], "imported.json"), "w")))
"""


def test_a_prestarted_run_imports_little_after_go(tmp_path: Path, tiny_data: Path) -> None:
    """The launcher imports what Ultralytics' trainer imports before a run's first step (the optimizer's
    torch._dynamo and sympy, torchvision, the detection trainer, polars, matplotlib): without them a prestarted
    run of the shipped train.py imported 1,463 modules after go, 1.2 s of its 1.9 s to the first step."""
    head, sep, rest = (REPO / "train.py").read_text().partition("from __future__ import annotations\n")
    assert sep, "train.py's __future__ line moved"
    ex, ck = _ws(tmp_path, head + sep + IMPORT_PROBE + rest, data=tiny_data)
    run = tmp_path / "run"
    r = ex.train(_job(ck, run, seed=1, steps=2, gate=Gate(run / "train.log", hold=0.2)), None, threading.Event())
    assert r.exit_code == 0 and r.started, r.log_tail
    after_go = json.loads((run / "out" / "imported.json").read_text())
    heavy = ("torch", "torch._dynamo", "sympy", "torchvision", "polars", "matplotlib", "requests", "ultralytics",
             "ultralytics.engine.trainer", "ultralytics.models.yolo.detect.train")
    assert [m for m in after_go if m in heavy] == []
    assert len(after_go) < 50, after_go  # each run, to its end: 12 here; 1,463 before the launcher imported the trainer's
    assert "not imported" not in (run / "train.log").read_text()  # every name of the launcher's list exists here
    ex.close()


@pytest.mark.parametrize("which", ["training", "evaluation"])
def test_the_launchers_imports_never_initialise_cuda_where_a_gpu_is_there(tmp_path: Path, which: str) -> None:
    """On a GPU an import that starts CUDA (a module-level ``torch.cuda`` query behind ``is_available()``)
    would make every prestarted box fail ``make gpu-check``; on a CPU that branch is never taken. Here
    torch says a GPU is there and its CUDA start raises: the launcher (a training's, an evaluation's) imports
    all of its list without once starting CUDA, says so, and ends unstarted when told nothing."""
    import subprocess

    from looper.executors.prestart import EVAL_IMPORTS, EVAL_LAUNCHER, IMPORTS, LAUNCHER
    from looper.executors.sandbox import package_parents

    gpu_here = (
        "import sys, torch\n"
        "def start(*a, **k):\n"
        "    print('CUDA STARTED', flush=True)\n"
        "    raise RuntimeError('CUDA started at import')\n"
        "torch.cuda.is_available = lambda: True\n"
        "torch.cuda.device_count = lambda: 1\n"
        "torch.cuda._lazy_init = torch.cuda.init = start\n"
    )
    code, args, imports = ((LAUNCHER, ["train.py"], IMPORTS) if which == "training" else
                           (EVAL_LAUNCHER, [os.pathsep.join(package_parents()), "evaluate.py"], EVAL_IMPORTS))
    p = subprocess.run([sys.executable, "-c", gpu_here + code, *args], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert p.returncode == NOT_STARTED_EXIT, p.stdout + p.stderr
    assert "CUDA STARTED" not in p.stdout and "not imported" not in p.stdout, p.stdout
    assert f"{READY_MARK} in " in p.stdout and "(CUDA initialised: False)" in p.stdout
    assert len(imports) >= 9  # the lazy imports are in the list this checks


@pytest.mark.parametrize("own", [None, "3"])
def test_the_script_sees_the_box_s_own_thread_setting_not_the_one_its_imports_set(tmp_path: Path, own) -> None:
    """Ultralytics' import sets OMP_NUM_THREADS=1 where it is unset; the launcher imports it before go, so a
    prestarted train.py read 1 where a cold one (its own import later) read the environment's own: the threads
    of the two differed (train.py honours the environment's OMP_NUM_THREADS, read before its own imports)."""
    import subprocess

    from looper.executors.prestart import LAUNCHER, go_line

    (tmp_path / "train.py").write_text("import os\nprint('SEEN', os.environ.get('OMP_NUM_THREADS'), flush=True)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "YOLO_CONFIG_DIR")}
    env.update({"YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(tmp_path / "cfg")}, **({"OMP_NUM_THREADS": own} if own else {}))
    p = subprocess.run([sys.executable, "-c", LAUNCHER, "train.py"], input=go_line({"LOOPER_SEED": "0"}),
                       capture_output=True, timeout=180, cwd=tmp_path, env=env)
    out = p.stdout.decode()
    assert p.returncode == 0 and "not imported" not in out, out + p.stderr.decode()
    assert f"SEEN {own}" in out, out


def _eval(ex: LocalExecutor, ck: Path, weights: Path, rd: Path, ahead: bool):  # noqa: ANN202
    rd.mkdir()
    return ex.evaluate(EvalJob(checkout=ck, weights=weights, metrics_path=rd / "METRICS.json", log_path=rd / "eval.log",
                               timeout_seconds=300, stall_seconds=120, device="cpu", prestart=ahead),
                       None, threading.Event())


def test_an_evaluation_in_a_box_started_ahead_scores_as_a_cold_one(tmp_path: Path, tiny_data: Path) -> None:
    """An evaluation prestarted: its own fresh evaluator sandbox, started before the weights exist (the box
    imports, then waits), the weights and the harness's evaluate.py written in at go; the same METRICS.json
    and MATCHES.json as a cold evaluation; the next evaluation's box asked for as one ends, and taken by it."""
    ex, ck = _ws(tmp_path, (REPO / "train.py").read_text(), data=tiny_data)
    shutil.copyfile(REPO / "evaluate.py", ck / "evaluate.py")
    run = tmp_path / "run"
    assert ex.train(_job(ck, run, seed=3, steps=4, prestart=False), None, threading.Event()).exit_code == 0
    weights = run / "out" / "weights.pt"
    boxes = ex.workspace / ".looper" / "boxes"
    said, files = {}, {}
    for name, ahead in (("cold", False), ("ahead", True), ("taken", True)):
        if name == "taken":  # the box the last evaluation asked for as it ended, started in the background
            deadline = time.monotonic() + 120
            while len(list(boxes.glob("box-*"))) != 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert [len(list(b.iterdir())) for b in boxes.glob("box-*/code")] == [0]  # no evaluate.py before go
        ev = _eval(ex, ck, weights, tmp_path / name, ahead)
        assert ev.exit_code == 0, ev.log_tail
        said[name] = (tmp_path / name / "eval.log").read_text()
        if name == "ahead":  # no box waited for it: its start, imports included, is the evaluation's time
            ready = float(said[name].split(f"{READY_MARK} in ")[1].split(" s")[0])
            assert ev.seconds >= ready > 0
        files[name] = [json.loads((tmp_path / name / f).read_text()) for f in ("METRICS.json", "MATCHES.json")]
    assert READY_MARK not in said["cold"] and "CUDA initialised: False" in said["ahead"] + said["taken"]
    assert said["ahead"].count(READY_MARK) == said["taken"].count(READY_MARK) == 1
    assert files["cold"] == files["ahead"] == files["taken"]
    assert files["cold"][0]["macro_f1"] is not None
    ex.close()
    assert list(boxes.glob("box-*")) == []  # the box asked for after the last one: ended with the night


def test_weights_that_are_not_a_plain_file_are_refused_before_any_box(tmp_path: Path) -> None:
    ex, ck = _ws(tmp_path, PROBE)
    shutil.copyfile(REPO / "evaluate.py", ck / "evaluate.py")
    link = tmp_path / "weights.pt"
    link.symlink_to(REPO / "evaluate.py")  # train.py's link to something the evaluator may read
    ev = _eval(ex, ck, link, tmp_path / "ev", ahead=True)
    assert ev.exit_code == WEIGHTS_REFUSED_EXIT and "symbolic link" in ev.log_tail
    assert not (ex.workspace / ".looper" / "boxes").exists() or list((ex.workspace / ".looper" / "boxes").iterdir()) == []
    ex.close()


def test_a_box_that_never_says_ready_is_given_up_after_its_time(tmp_path: Path) -> None:
    from looper import proc
    from looper.executors.prestart import read_ready

    quiet = proc.launch([sys.executable, "-c", "import time; print('importing', flush=True); time.sleep(60)"],
                        cwd=tmp_path, env=None, hold=True)
    t0 = time.monotonic()
    said = read_ready(quiet, timeout=1.0)
    assert said == ["importing"] and 0.9 < time.monotonic() - t0 < 10  # no ready line: not used, not waited on
    proc.end_launched(quiet)
    assert quiet.proc.poll() is not None
    ready = proc.launch([sys.executable, "-c", f"print('x'); print('{READY_MARK} in 0.1 s', flush=True); "
                         "import time; time.sleep(60)"], cwd=tmp_path, env=None, hold=True)
    assert read_ready(ready, timeout=30) == ["x", f"{READY_MARK} in 0.1 s"]
    proc.end_launched(ready)
