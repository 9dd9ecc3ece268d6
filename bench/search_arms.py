"""The arms of bench/bench_search.py and the measuring: a looper arm's workspace and its
``looper run`` stopped at the wall clock, the Tuner's ``model.tune()`` in a process of its own,
one train.py (or Ultralytics ``model.train``) run trained with a seed and scored by evaluate.py,
and the re-measurement of an arm's final best on fresh seeds."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from search_results import summarize

from looper.core.propose.hyperblock import read_knobs, rewrite_knobs

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LOOPER = str(BIN / "looper")
# train.py's knobs -> Ultralytics' argument names (what the Tuner mutates and train.py also sets)
KNOB_TO_ARG = {"LR0": "lr0", "LRF": "lrf", "MOMENTUM": "momentum", "WEIGHT_DECAY": "weight_decay",
               "WARMUP_EPOCHS": "warmup_epochs", "BOX_GAIN": "box", "CLS_GAIN": "cls", "DFL_GAIN": "dfl",
               "MOSAIC": "mosaic", "SCALE": "scale", "TRANSLATE": "translate", "FLIPLR": "fliplr",
               "FLIPUD": "flipud"}


def sh(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, text=True, capture_output=True, **kw)


def set_toml(text: str, section: str, key: str, value: Any) -> str:
    """Set ``key`` in ``[section]`` of a looper.toml text (the key line must exist or is added)."""
    lit = json.dumps(value) if isinstance(value, str) else ("true" if value is True else "false" if value is False
                                                             else str(value))
    head = re.search(rf"^\[{section}\]\s*$", text, re.M)
    if head is None:
        return text + f"\n[{section}]\n{key} = {lit}\n"
    end = re.search(r"^\[", text[head.end():], re.M)
    stop = head.end() + (end.start() if end else len(text) - head.end())
    body = text[head.end():stop]
    line = re.compile(rf"^{key}\s*=.*$", re.M)
    body = line.sub(f"{key} = {lit}", body, count=1) if line.search(body) else f"\n{key} = {lit}" + body
    return text[:head.end()] + body + text[stop:]


def make_workspace(ws: Path, arm: str, seed: int, args: argparse.Namespace) -> None:
    shutil.rmtree(ws, ignore_errors=True)
    done = sh([LOOPER, "init", str(ws), "--preset", "demo"])
    if done.returncode != 0:
        raise SystemExit(f"looper init failed: {done.stderr.strip()}")
    p = ws / "looper.toml"
    text = p.read_text()
    settings = [("agent", "kind", arm), ("agent", "seed", seed), ("loop", "tag", "bench"),
                ("loop", "budget_seconds", args.budget), ("loop", "max_experiments", 0),
                ("loop", "seed_jobs", 1),  # the arm has one core: its seeds one at a time
                ("loop", "confirm_seeds", 0),  # every arm's best is re-measured alike, on the bench's fresh seeds
                ("data", "scale", args.scale), ("executor", "require_gpu", args.require_gpu)]
    if args.noise_reruns is not None:
        settings.append(("loop", "noise_reruns", args.noise_reruns))
    settings.append(("loop", "max_steps", args.remeasure_steps or "auto"))  # the bench's step budget, or measured
    for section, key, value in settings:
        text = set_toml(text, section, key, value)
    p.write_text(text)


def run_looper_arm(ws: Path, seconds: float) -> dict[str, Any]:
    t0 = time.time()
    log = (ws / "bench-run.log").open("w")
    proc = subprocess.Popen([LOOPER, "run"], cwd=ws, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        code = proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the daemon stops cleanly: the running experiment is interrupted
        try:
            code = proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
    wall = time.time() - t0
    hist = json.loads(sh([LOOPER, "history", "--json"], cwd=ws).stdout or "[]")
    curve, best = [], None
    for row in hist:
        if row.get("status") == "keep" and row.get("score") is not None:
            best = row["score"] if best is None else max(best, row["score"])
        if row.get("finished_at") and best is not None:
            curve.append((_seconds_since(row["finished_at"], t0), best))
    source = sh(["git", "-C", str(ws), "show", "looper/bench:train.py"]).stdout or (ws / "train.py").read_text()
    kinds = [r for r in hist if r.get("kind") != "baseline"]
    return {"exit_code": code, "wall_seconds": round(wall, 1), "experiments": len(kinds),
            "keeps": sum(1 for r in kinds if r.get("status") == "keep"),
            "outcomes": {s: sum(1 for r in kinds if r.get("status") == s) for s in {r.get("status") for r in kinds}},
            "curve": curve, "best_in_loop": best, "best_source": source}


def _seconds_since(iso: str, t0: float) -> float:
    from datetime import datetime

    return round(datetime.fromisoformat(iso).timestamp() - t0, 1)


def train_and_score(source: str, data: Path, out: Path, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Train ``source`` as train.py with one seed at the arm budget, then evaluate.py on the test pages."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "train.py").write_text(source)
    env = {**os.environ, "LOOPER_BUDGET_SECONDS": str(args.budget), "LOOPER_DATA": str(data),
           "LOOPER_OUT": str(out / "run"), "LOOPER_SEED": str(seed), "LOOPER_DEVICE": args.device,
           "YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(out / "ultralytics-settings"),
           "LOOPER_MAX_STEPS": str(args.remeasure_steps or ""), "LOOPER_PRETRAINED_DIR": str(pretrained_dir(out))}
    t = sh([sys.executable, str(out / "train.py")], cwd=out, env=env, timeout=args.budget + 120)
    if t.returncode != 0:
        return {"seed": seed, "error": f"train.py exit {t.returncode}: {t.stderr.strip()[-300:]}"}
    trained = json.loads((out / "run" / "train.json").read_text())
    return score_run(out / "run", data, out / "METRICS.json", args) | {
        "seed": seed, "steps": trained.get("steps"), "stopped_by": trained.get("stopped_by")}


def score_run(run: Path, data: Path, metrics: Path, args: argparse.Namespace) -> dict[str, Any]:
    e = sh([sys.executable, str(REPO / "evaluate.py"), "--weights", str(run / "weights.pt"), "--data", str(data),
            "--out", str(metrics), "--device", args.device], cwd=REPO, timeout=1800)
    if e.returncode != 0 or not metrics.is_file():
        return {"error": f"evaluate.py exit {e.returncode}: {e.stderr.strip()[-300:]}"}
    m = json.loads(metrics.read_text())
    found = sum(1 for c in m["classes"].values() if c.get("support") and c.get("recall"))
    return {"score": m["weighted_f1"], "classes_found": found,
            "classes": sum(1 for c in m["classes"].values() if c.get("support"))}


def tune_source(base_source: str, hyp: dict[str, float]) -> str:
    """train.py with the Tuner's best hyperparameters: knobs it shares with train.py set in the
    block, the rest (shear, mixup, copy-paste, hsv, ...) passed to ``model.train`` as train.py would."""
    knobs = read_knobs(base_source)
    changes = {}
    for knob, arg in KNOB_TO_ARG.items():
        if arg in hyp and knob in knobs:
            v = hyp[arg]
            changes[knob] = type(knobs[knob])(v) if not isinstance(knobs[knob], bool) else bool(v)
    src = rewrite_knobs(base_source, changes)
    anchor = "verbose=False, pretrained=False,"
    if anchor not in src:
        raise SystemExit("bench_search: train.py's model.train call changed; update tune_source()")
    extra = {}
    for k, v in hyp.items():
        if k in KNOB_TO_ARG.values():
            continue
        set_here = re.compile(rf"\b{k}=[^,()]+,")
        if set_here.search(src):  # an argument train.py passes itself (hsv_h=0.0, close_mosaic=0, ...)
            src = set_here.sub(f"{k}={v!r},", src, count=1)
        else:
            extra[k] = v
    return src.replace(anchor, anchor + f" **{extra!r},")


def yolo_args(knobs: dict[str, Any], data: Path, project: Path, name: str, seed: int,
              args: argparse.Namespace) -> dict[str, Any]:
    """The baseline train.py's settings as arguments of Ultralytics' own training, as a YOLO user
    would pass them to ``model.tune()`` or ``model.train()``: the knobs train.py sets, colour
    augmentation off, ``time=`` the run budget (Ultralytics plans the epochs and the learning-rate
    schedule from it), validation each epoch (the Tuner's fitness, and ``best.pt``)."""
    return {"data": str(data / "dataset.yaml"), "epochs": 1000, "time": args.budget / 3600.0, "patience": 0,
            "imgsz": knobs["IMGSZ"], "batch": knobs["BATCH"], "nbs": knobs["BATCH"],
            "optimizer": knobs["OPTIMIZER"], **{arg: knobs[knob] for knob, arg in KNOB_TO_ARG.items()},
            "close_mosaic": 0, "hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0, "device": args.device, "workers": 1,
            "seed": seed, "amp": False, "plots": False, "val": True, "project": str(project), "name": name,
            "exist_ok": True, "pretrained": str(start_pt(project)) if START else False, "verbose": False}


START = read_knobs((REPO / "train.py").read_text()).get("PRETRAINED") or ""  # "" = from scratch


def pretrained_dir(near: Path) -> Path:
    """The folder train.py's PRETRAINED is read from: the starting checkpoint looper ships (what
    ``looper init`` copies into a workspace), copied once next to the bench's output."""
    from looper.workspace.create import shipped_pretrained

    root = next((up for up in (near, *near.parents) if up.name.startswith("repeat")), near)
    folder = root / "pretrained"
    if START and not (folder / START).is_file():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / START).write_bytes(shipped_pretrained().read_bytes())
    return folder


def start_pt(near: Path) -> Path:
    """The same starting checkpoint as an Ultralytics ``.pt`` (a DetectionModel with its tensors and
    class names), what a YOLO user passes as ``pretrained=`` to ``model.train`` or ``model.tune``: the
    Tuner's arm starts where train.py starts."""
    import torch
    import yaml
    from safetensors import safe_open
    from ultralytics.nn.tasks import DetectionModel

    src = pretrained_dir(near) / START
    pt = src.with_suffix(".pt")
    if not pt.is_file():
        with safe_open(str(src), "pt") as f:
            meta = f.metadata()
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        names = json.loads(meta["names"])
        net = DetectionModel(yaml.safe_load(meta["model_yaml"]), nc=len(names), verbose=False)
        net.load_state_dict(tensors)
        net.names = dict(enumerate(names))
        torch.save({"model": net, "train_args": {}}, str(pt) + ".tmp")
        os.replace(str(pt) + ".tmp", pt)
    return pt


# ``YOLO(yaml).<method>(**kwargs)`` in a process of its own: argv[1] = {"yaml", "method", "kwargs"}
YOLO_SCRIPT = r"""
import json, os, sys
os.environ.setdefault("YOLO_OFFLINE", "1")
from ultralytics import YOLO
a = json.loads(sys.argv[1])
getattr(YOLO(a["yaml"]), a["method"])(**a["kwargs"])
"""


def baseline_model_yaml(ws: Path, data: Path, args: argparse.Namespace) -> Path:
    """The baseline's architecture yaml: train.py writes it into LOOPER_OUT (run it for 1 s of budget)."""
    yaml_dir = ws / "model"
    ws.mkdir(parents=True, exist_ok=True)
    if not (yaml_dir / "model.yaml").is_file():
        env = {**os.environ, "LOOPER_BUDGET_SECONDS": "1", "LOOPER_DATA": str(data), "LOOPER_OUT": str(yaml_dir),
               "LOOPER_SEED": "0", "LOOPER_DEVICE": args.device, "LOOPER_PRETRAINED_DIR": str(pretrained_dir(ws)),
               "YOLO_CONFIG_DIR": str(ws / "ultralytics-settings")}
        sh([sys.executable, str(REPO / "train.py")], cwd=ws, env=env, timeout=600)
    if not (yaml_dir / "model.yaml").is_file():
        raise SystemExit("bench_search: train.py wrote no model.yaml")
    return yaml_dir / "model.yaml"


def run_tune_arm(ws: Path, seconds: float, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """model.tune() from the baseline settings, stopped from outside at the arm's wall clock."""
    data = ws / "data"
    if not (data / "dataset.yaml").is_file():
        done = sh([sys.executable, str(REPO / "prepare.py"), "--out", str(data), "--scale", args.scale])
        if done.returncode != 0:
            raise SystemExit(f"prepare.py failed: {done.stderr.strip()}")
    base = (REPO / "train.py").read_text()
    kwargs = yolo_args(read_knobs(base), data, ws / "tune", "tune", seed, args)
    kwargs["iterations"] = max(1, int(seconds // (args.budget + 20)) + 1)
    a = {"yaml": str(baseline_model_yaml(ws, data, args)), "method": "tune", "kwargs": kwargs}
    t0 = time.time()
    log = (ws / "tune.log").open("w")
    proc = subprocess.Popen([sys.executable, "-c", YOLO_SCRIPT, json.dumps(a)], cwd=ws, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "YOLO_CONFIG_DIR": str(ws / "ultralytics-settings")})
    try:
        code = proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
    wall = time.time() - t0
    found = sorted((ws / "tune").rglob("tune_results.ndjson"))
    rows = [json.loads(line) for line in found[-1].read_text().splitlines() if line.strip()] if found else []
    best_w = found[-1].parent / "weights" / "best.pt" if found else ws / "tune" / "none"
    out: dict[str, Any] = {"exit_code": code, "wall_seconds": round(wall, 1), "experiments": len(rows),
                           "keeps": None, "curve": [], "best_in_loop": None, "best_source": None}
    if rows:
        best = max(rows, key=lambda r: r.get("fitness") or 0.0)
        hyp = best.get("hyperparameters") or {}
        out["tuner_best_fitness"] = best.get("fitness")
        out["best_hyperparameters"] = hyp
        out["best_source"] = tune_source(base, hyp)
    if best_w.is_file():
        scored = score_tuner_weights(best_w, data, ws, args)
        out["best_in_loop"] = scored.get("score")
        out["tuner_best_weights"] = scored
        out["curve"] = [(round(wall, 1), scored.get("score"))] if scored.get("score") is not None else []
    return out


def score_tuner_weights(best_pt: Path, data: Path, ws: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The Tuner's own best weights through evaluate.py, handed over as train.py hands weights
    over (tensors + model yaml + class names in a safetensors file, format looper-weights/1)."""
    import torch
    import yaml
    from safetensors.torch import save_file

    run = ws / "tune-best"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    ckpt = torch.load(best_pt, map_location="cpu", weights_only=False)  # our own Tuner's file: trusted
    net = (ckpt.get("ema") or ckpt["model"]).float()
    names = net.names
    names = [names[i] for i in sorted(names)] if isinstance(names, dict) else list(names)
    save_file({k: v.detach().clone().contiguous() for k, v in net.state_dict().items()}, str(run / "weights.pt"),
              metadata={"format": "looper-weights/1", "model_yaml": yaml.safe_dump(dict(net.yaml), sort_keys=False),
                        "names": json.dumps(names)})
    return score_run(run, data, ws / "tune-best.json", args)


def remeasure(source: str, data: Path, root: Path, rep: int, args: argparse.Namespace,
              only: list[int] | None = None) -> dict[str, Any]:
    """``--reseeds`` fresh runs of ``source`` (or the seed numbers in ``only``); seeds 1000 + 100 *
    repeat + i, so repeats do not share seeds."""
    runs = [train_and_score(source, data, root / f"seed{s}", 1000 + 100 * rep + s, args)
            for s in (range(args.reseeds) if only is None else only)]
    return summarize(runs) | {"remeasure_steps": args.remeasure_steps}


def remeasure_own(hyp: dict[str, Any], data: Path, root: Path, rep: int, args: argparse.Namespace,
                  only: list[int] | None = None) -> dict[str, Any]:
    """The Tuner's best hyperparameters re-trained ``--reseeds`` times by Ultralytics' own training
    (``model.train(**baseline settings, **hyp)``, ``time=`` the budget, the same seeds as
    :func:`remeasure`) and each run's ``best.pt`` scored by evaluate.py: what a YOLO user gets from
    the Tuner's answer, without the luck of the one iteration the Tuner picked."""
    base = read_knobs((REPO / "train.py").read_text())
    runs = []
    for s in range(args.reseeds) if only is None else only:
        seed, out = 1000 + 100 * rep + s, root / f"seed{s}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        kwargs = yolo_args(base, data, out, "train", seed, args) | dict(hyp) | {"seed": seed}
        a = {"yaml": str(baseline_model_yaml(root, data, args)), "method": "train", "kwargs": kwargs}
        t = sh([sys.executable, "-c", YOLO_SCRIPT, json.dumps(a)], cwd=out, timeout=args.budget + 600,
               env={**os.environ, "YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(out / "ultralytics-settings")})
        best = out / "train" / "weights" / "best.pt"
        if t.returncode != 0 or not best.is_file():
            runs.append({"seed": seed, "error": f"model.train exit {t.returncode}: {t.stderr.strip()[-300:]}"})
            continue
        csv = out / "train" / "results.csv"
        epochs = max(0, len(csv.read_text().splitlines()) - 1) if csv.is_file() else None
        runs.append(score_tuner_weights(best, data, out, args) | {"seed": seed, "epochs": epochs})
    return summarize(runs) | {"training": "ultralytics model.train, best.pt"}


def run_arm(arm: str, rep: int, root: Path, data: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One arm for ``--minutes`` of wall clock, then its final best re-measured with seeds."""
    ws = root / arm
    print(f"repeat {rep}: arm {arm} for {args.minutes} min (cpus {sorted(os.sched_getaffinity(0))})", flush=True)
    if arm == "tune":
        ws.mkdir(parents=True, exist_ok=True)
        r = run_tune_arm(ws, args.minutes * 60, rep, args)
    else:
        make_workspace(ws, arm, rep, args)
        r = run_looper_arm(ws, args.minutes * 60)
    if r.get("best_source"):
        r["remeasured"] = remeasure(r["best_source"], data, root / f"remeasure-{arm}", rep, args)
    if arm == "tune" and r.get("best_hyperparameters"):
        r["remeasured_own"] = remeasure_own(r["best_hyperparameters"], data, root / "remeasure-tune-own", rep, args)
    r.pop("best_source", None)
    return r
