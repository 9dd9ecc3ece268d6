"""Benchmark: search strategies at equal compute: looper's planner, random and evolve agents vs
Ultralytics' own ``model.tune()``, each re-measured with seeds by the same evaluate.py.

    python bench/bench_search.py [--minutes 45] [--budget 180] [--remeasure-steps 169] [--scale demo]
                                 [--repeats 1] [--arms planner,random,evolve,tune] [--reseeds 3] [--jobs 1]
                                 [--out bench/out/search] [--first-repeat 0]
    python bench/bench_search.py --gpu        # full scale, 5-minute runs, 45 min per arm, require_gpu

Every arm starts from the same pretrained weights: the starting checkpoint looper ships
(``looper/pretrained/start.safetensors``, train.py's ``PRETRAINED``), and for the Tuner the same
tensors as an Ultralytics ``.pt`` passed as ``pretrained=`` (what a YOLO user fine-tuning does).
Per arm and repeat, on the same data and the same wall clock (``--minutes``):

- ``planner``, ``random``, ``evolve``: a fresh workspace (``looper init --preset demo``: its
  baseline seeds, candidate cap and score test; the arm's ``[agent] kind``, ``seed`` = the
  repeat, ``max_steps`` = ``--remeasure-steps``, one seed at a time on the arm's one core, no
  confirmation of its own), ``looper run`` stopped by SIGTERM when the arm's wall clock is spent
  (the daemon finishes cleanly: the running experiment is marked interrupted). The best is the
  last kept train.py on ``looper/<tag>``.
- ``tune``: ``YOLO(<the baseline's model yaml>).tune(..., pretrained=<start .pt>)`` from the
  baseline train.py's settings (lr0, batch, optimizer, augmentation off as in train.py), each
  iteration trained for the same ``--budget`` (``time=``), iterations until the arm's wall clock
  is spent (the tuning process is stopped from outside at the limit). Its best weights are
  scored by evaluate.py; its best hyperparameters are re-trained like every other arm.

``--jobs N`` runs N arms at a time, each in its own process pinned to its own CPU with one compute
thread (``sched_setaffinity``; training, evaluation and the Tuner's data loader inherit it), so
arms that run side by side get the same compute and never share a core. Each arm's
re-measurement runs on its arm's CPU right after it; the baseline's is one more job.

Then every arm's final best (and the baseline train.py) is re-trained ``--reseeds`` times with
fresh seeds (1000 + 100 * repeat + i: no arm decided anything on them) for exactly
``--remeasure-steps`` steps and scored by evaluate.py: the confirmed score: the mean, the seed interval (mean
+- t * sd / sqrt(n), 95 %) and the classes with recall > 0. "Beats the baseline beyond the
noise" means the arm's lower interval end is above the baseline's upper end. A keep the
re-measurement does not confirm (its re-measured mean not above the baseline's) is counted as a
false keep caught. The Tuner's answer is also re-trained by Ultralytics' own ``model.train``
(its best hyperparameters; each seed's ``best.pt`` scored by evaluate.py), beside the baseline's
settings trained the same way (``baseline_own``): the Tuner's one ``best.pt`` is the best of its
iterations on the validation tiles, and these runs say how much of it was the draw. Outputs: ``<out>/results.json``, ``<out>/best_over_time.svg`` (best score
over wall time per arm) and a markdown block printed for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from looper.core.propose.hyperblock import read_knobs, rewrite_knobs

REPO = Path(__file__).resolve().parents[1]
from looper.workspace.create import PRESETS  # noqa: E402

DEMO = PRESETS["demo"]["loop"]
BIN = Path(sys.executable).parent
LOOPER = str(BIN / "looper")
ARMS = ("planner", "random", "evolve", "tune")
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


def interval(xs: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95 % t interval of the mean."""
    from scipy import stats

    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, math.nan, math.nan
    half = stats.t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


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


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Re-measuring runs -> their mean, 95 % t interval and the most classes found."""
    scores = [r["score"] for r in runs if "score" in r]
    out: dict[str, Any] = {"runs": runs}
    if scores:
        m, lo, hi = interval(scores)
        out.update(mean=round(m, 4), low=round(lo, 4), high=round(hi, 4),
                   classes_found=max(r.get("classes_found", 0) for r in runs if "score" in r))
    return out


def scored(m: dict[str, Any]) -> int:
    """How many of a re-measurement's runs have a score."""
    return sum(1 for r in m.get("runs", []) if "score" in r)


def plot(results: dict[str, Any], path: Path) -> None:
    """Best score over wall time per arm (in the arm: the looper arms' current best, the Tuner's
    best weights at its end), and at the right each arm's re-measured mean with its 95 % interval
    (the baseline's as a band): ``path`` (SVG) and the same as PNG beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    end = float(results["args"].get("minutes") or 45)
    for rep in results["repeats"]:
        base = rep.get("baseline") or {}
        if "low" in base and math.isfinite(base["low"]):
            ax.axhspan(base["low"], base["high"], color="0.85", zorder=0,
                       label=f"baseline train.py re-measured, 95 % (repeat {rep['repeat']}, {scored(base)} seeds)")
        for i, (arm, r) in enumerate(rep["arms"].items()):
            pts = r.get("curve") or []
            line = None
            if pts:
                xs, ys = zip(*[(t / 60, s) for t, s in pts], strict=True)
                (line,) = ax.step(xs, ys, where="post", marker="o", label=f"{arm}: in the arm (repeat {rep['repeat']})")
            for j, key in enumerate(("remeasured", "remeasured_own")):
                m = r.get(key) or {}
                if "mean" in m and math.isfinite(m.get("low", math.nan)):
                    x = end + 2 + 1.5 * i + 0.5 * j
                    ax.errorbar([x], [m["mean"]], yerr=[[m["mean"] - m["low"]], [m["high"] - m["mean"]]],
                                fmt="s" if j == 0 else "D", capsize=3, color=line.get_color() if line else None,
                                label=f"{arm}: re-measured{', own training' if j else ''} ({scored(m)} seeds)")
    ax.axvline(end, color="0.5", lw=0.8, ls=":")
    ax.set_xlabel("wall time, minutes (right of the dotted line: each best re-measured on fresh seeds, 95 %)")
    ax.set_ylabel("page-level weighted F1")
    ax.legend(fontsize=6, loc="lower left")  # the curves run along the top
    fig.tight_layout()
    fig.savefig(path)
    fig.savefig(path.with_suffix(".png"), dpi=110)


def markdown(results: dict[str, Any]) -> str:
    a = results["args"]
    lines = [f"Arms at {a['minutes']} min each, {a['budget']} s per run, scale {a['scale']}, "
             f"{a['reseeds']} re-measuring seeds in the first pass, {len(results['repeats'])} repeat(s), "
             f"device {a['device']}.",
             "", "| repeat | arm | experiments | keeps | best in the arm | re-measured scores | mean [95 % interval] "
             "| steps per run | classes found | beats baseline beyond noise | Welch p (greater) | false keep caught |",
             "|---:|---|---:|---:|---:|---|---|---|---:|---|---:|---|"]

    def measured(m: dict[str, Any]) -> str:
        runs = [x for x in m.get("runs", []) if "score" in x]
        scores = " / ".join(f"{x['score']:.3f}" for x in runs)
        if m.get("training"):  # Ultralytics' own training: epochs under time=, not train.py's steps
            steps = " / ".join(str(x.get("epochs", "?")) for x in runs) + " epochs (time=)"
        else:
            steps = " / ".join(str(x.get("steps", "?")) for x in runs)
            steps += f" ({'at most ' + str(m['remeasure_steps']) if m.get('remeasure_steps') else 'wall clock'})"
        if m.get("same_as"):
            scores = f"(its best is the {m['same_as']} train.py: that re-measurement) {scores}"
        return f"{scores} | {m.get('mean')} [{m.get('low')}, {m.get('high')}] | {steps} | {m.get('classes_found')}"

    def num(x: Any) -> str:
        return f"{x:.4f}" if isinstance(x, float) else str(x)

    for rep in results["repeats"]:
        lines.append(f"| {rep['repeat']} | baseline train.py | | | | {measured(rep['baseline'])} | | | |")
        own = rep.get("baseline_own")
        if own:
            lines.append(f"| {rep['repeat']} | baseline settings, Ultralytics' own training (best.pt) | | | | "
                         f"{measured(own)} | {own.get('beats_baseline')} | {own.get('welch_p_greater')} | |")
        for arm, r in rep["arms"].items():
            lines.append(f"| {rep['repeat']} | {arm} | {r.get('experiments')} | {num(r.get('keeps'))} | "
                         f"{num(r.get('best_in_loop'))} | {measured(r.get('remeasured', {}))} | "
                         f"{r.get('beats_baseline')} | {r.get('welch_p_greater')} | {r.get('false_keep_caught')} |")
            own = r.get("remeasured_own")
            if own:
                lines.append(f"| {rep['repeat']} | {arm}: its best hyperparameters, Ultralytics' own training "
                             f"(best.pt) | | | | {measured(own)} | {own.get('beats_baseline')} | "
                             f"{own.get('welch_p_greater')} | |")
    return "\n".join(lines)


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


def _pinned(cpu: int, out: Path, fn: Any, fargs: tuple) -> None:
    """A job's process: pinned to one CPU with one compute thread (its children inherit both)."""
    os.sched_setaffinity(0, {cpu})
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    t0 = time.time()
    r = fn(*fargs)
    out.write_text(json.dumps(r | {"cpu": cpu, "job_seconds": round(time.time() - t0, 1)}, default=str))


def run_jobs(jobs: list[tuple[str, Any, tuple]], n: int, tmp: Path):
    """Run ``(name, fn, args)`` jobs, ``n`` at a time; yield ``(name, result)`` as each ends.

    ``n == 1``: in this process, in order, on every CPU. ``n > 1``: each job in its own process
    pinned to one of the first ``n`` CPUs this process may use, so concurrent arms get the same
    compute (one core each) and do not share a core."""
    if n <= 1:
        for name, fn, fargs in jobs:
            yield name, fn(*fargs)
        return
    import multiprocessing

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < n:
        raise SystemExit(f"bench_search: --jobs {n} needs {n} CPUs; this process may use {len(cpus)}")
    tmp.mkdir(parents=True, exist_ok=True)
    ctx = multiprocessing.get_context("fork")
    free, pending, running = cpus[:n], list(jobs), {}
    while pending or running:
        while pending and free:
            name, fn, fargs = pending.pop(0)
            cpu = free.pop(0)
            out = tmp / f"{name}.json"
            out.unlink(missing_ok=True)
            proc = ctx.Process(target=_pinned, args=(cpu, out, fn, fargs), name=name)
            proc.start()
            running[name] = (proc, cpu, out)
        time.sleep(2)
        for name, (proc, cpu, out) in list(running.items()):
            if proc.is_alive():
                continue
            proc.join()
            del running[name]
            free.append(cpu)
            yield name, (json.loads(out.read_text()) if out.is_file()
                         else {"error": f"job {name} exited {proc.exitcode} without a result"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=45.0, help="wall clock per arm")
    ap.add_argument("--budget", type=int, default=DEMO["budget_seconds"],
                    help="training budget per run, s (the demo preset's budget_seconds; the Tuner's time= per iteration)")
    ap.add_argument("--scale", default="demo")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--first-repeat", type=int, default=0,
                    help="number the repeats from here and add them to the results.json already in --out "
                         "(a second repeat on a later day)")
    ap.add_argument("--reseeds", type=int, default=3)
    ap.add_argument("--remeasure-steps", type=int, default=DEMO["max_steps"],
                    help="the looper arms' [loop] max_steps and the re-measuring runs' steps (the wall clock still "
                         "caps them; default the demo preset's); 0: wall clock only, and a run's steps then depend on "
                         "what else the machine is doing")
    ap.add_argument("--remeasure-again", type=int, metavar="REPEAT",
                    help="re-measure that repeat's arms and baseline again (e.g. with --remeasure-steps); the "
                         "earlier re-measurement is kept as remeasured_before")
    ap.add_argument("--remeasure-own", type=int, metavar="REPEAT",
                    help="re-train that repeat's Tuner answer with Ultralytics' own training (--reseeds seeds, "
                         "best.pt scored by evaluate.py); a bench run today does it after the tune arm")
    ap.add_argument("--add-reseeds", type=int, metavar="REPEAT",
                    help="re-measure that repeat's baseline and each arm's final best (train.py) on --reseeds more "
                         "fresh seeds, after the ones it has (the Ultralytics re-trainings keep theirs)")
    ap.add_argument("--noise-reruns", type=int, default=None,
                    help="the looper arms' [loop] noise_reruns (default: the demo preset's, with its baseline_seeds, "
                         "pooled score test and confirm cap)")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--jobs", type=int, default=1,
                    help="arms run this many at a time, each pinned to its own CPU (1 thread): equal compute")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--require-gpu", action="store_true")
    ap.add_argument("--gpu", action="store_true", help="full scale, 300 s runs, cuda, require_gpu")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "search")
    ap.add_argument("--finish", action="store_true",
                    help="compare, plot and print the results.json a stopped bench left in --out")
    ap.add_argument("--baseline-from", help="with --finish: the arm whose re-measurement is the baseline's "
                                            "(it kept nothing, so its best is train.py itself)")
    args = ap.parse_args()
    args.out = args.out.resolve()  # the arms run in their own folders: a relative --out would nest
    if args.finish:
        return finish_stopped(args.out, args.baseline_from)
    if args.remeasure_again is not None:
        return remeasure_again(args.out, args.remeasure_again, args)
    if args.remeasure_own is not None:
        return remeasure_own_again(args.out, args.remeasure_own, args)
    if args.add_reseeds is not None:
        return add_reseeds(args.out, args.add_reseeds, args)
    if args.gpu:
        args.scale, args.budget, args.device, args.require_gpu = "full", 300, "cuda", True
        args.remeasure_steps = 0  # full scale: the wall clock (the demo's 169 steps are a CPU regime)
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        ap.error(f"unknown arm(s) {', '.join(unknown)}; known: {', '.join(ARMS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                               "repeats": []}
    if args.first_repeat and (args.out / "results.json").is_file():
        earlier = json.loads((args.out / "results.json").read_text())
        results["repeats"] = [e for e in earlier["repeats"] if e["repeat"] < args.first_repeat]
    for rep in range(args.first_repeat, args.first_repeat + args.repeats):
        root = args.out / f"repeat{rep}"
        data = root / "data"
        if not (data / "dataset.yaml").is_file():
            done = sh([sys.executable, str(REPO / "prepare.py"), "--out", str(data), "--scale", args.scale])
            if done.returncode != 0:
                raise SystemExit(f"prepare.py failed: {done.stderr.strip()}")
        entry: dict[str, Any] = {"repeat": rep, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                 "baseline": {}, "arms": {}}

        def save(entry: dict[str, Any] = entry) -> None:
            (args.out / "results.json").write_text(json.dumps(results | {"repeats": [*results["repeats"], entry]},
                                                              indent=1, default=str))

        jobs = [(arm, run_arm, (arm, rep, root, data, args)) for arm in arms]
        jobs.append(("baseline", remeasure, ((REPO / "train.py").read_text(), data, root / "remeasure-baseline",
                                             rep, args)))
        if "tune" in arms:  # the Tuner's reference: the baseline's settings in Ultralytics' own training
            baseline_model_yaml(root / "remeasure-baseline-own", data, args)
            jobs.append(("baseline-own", remeasure_own, ({}, data, root / "remeasure-baseline-own", rep, args)))
        for name, r in run_jobs(jobs, args.jobs, root / "jobs"):
            if name == "baseline":
                entry["baseline"] = r
            elif name == "baseline-own":
                entry["baseline_own"] = r
            else:
                entry["arms"][name] = r
            save()
        compare(entry)
        entry["arms"] = {arm: entry["arms"][arm] for arm in arms if arm in entry["arms"]}
        results["repeats"].append(entry)
    return finish(results, args.out)


def best_sources(entry: dict[str, Any], root: Path, base: str, arms: list[str] | None = None) -> dict[str, str]:
    """The baseline's and each arm's final best as train.py source: the looper arms' last keep
    (``looper/bench:train.py`` in the arm's workspace), the Tuner's best hyperparameters written
    into the baseline train.py (:func:`tune_source`)."""
    sources = {"baseline": base}
    for arm in entry["arms"] if arms is None else arms:
        if arm == "tune":
            sources[arm] = tune_source(base, entry["arms"][arm]["best_hyperparameters"])
        elif arm != "baseline":
            sources[arm] = sh(["git", "-C", str(root / arm), "show", "looper/bench:train.py"]).stdout
    return sources


def remeasure_again(out: Path, rep: int, args: argparse.Namespace) -> int:
    """``--remeasure-again REPEAT``: each arm's final best (the looper arms' ``looper/bench:train.py``,
    the Tuner's best hyperparameters written into train.py) and the baseline re-measured anew."""
    results = json.loads((out / "results.json").read_text())
    entry = next(e for e in results["repeats"] if e["repeat"] == rep)
    root, base = out / f"repeat{rep}", (REPO / "train.py").read_text()
    sources = best_sources(entry, root, base)
    # Arms whose best is the baseline train.py byte for byte (they kept nothing): the first is
    # re-measured anyway (the bench's own A/A: under a step budget it must reproduce the
    # baseline's scores), the others take the baseline's re-measurement.
    same = [arm for arm, src in sources.items() if arm != "baseline" and src == base]
    sources = {arm: src for arm, src in sources.items() if arm not in same[1:]}
    tag = f"steps{args.remeasure_steps}" if args.remeasure_steps else "wallclock"
    jobs = [(arm, remeasure, (src, root / "data", root / f"remeasure-{tag}-{arm}", rep, args))
            for arm, src in sources.items()]
    for name, r in run_jobs(jobs, args.jobs, root / "jobs-again"):
        r["remeasure_steps"] = args.remeasure_steps
        if name == "baseline":
            entry["baseline_before"], entry["baseline"] = entry["baseline"], r
        else:
            arm = entry["arms"][name]
            arm["remeasured_before"], arm["remeasured"] = arm.get("remeasured"), r
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    for name in same[1:]:
        arm = entry["arms"][name]
        arm["remeasured_before"], arm["remeasured"] = arm.get("remeasured"), entry["baseline"] | {"same_as": "baseline"}
    for e in results["repeats"]:
        compare(e)
    return finish(results, out)


def reproduced(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> bool:
    """Whether re-measuring runs gave another's scores exactly, seed for seed, in the same order:
    every run scored (two failed runs reproduce nothing), the same seeds, the same scores."""
    pairs = [(r["seed"], r.get("score")) for r in mine]
    return (bool(pairs) and all(score is not None for _, score in pairs)
            and pairs == [(r["seed"], r.get("score")) for r in theirs])


def add_reseeds(out: Path, rep: int, args: argparse.Namespace) -> int:
    """``--add-reseeds REPEAT``: ``--reseeds`` more fresh seeds for the baseline and every arm's
    re-measurement through train.py (seed numbers after the ones each has; an arm whose
    re-measurement is the baseline's, ``same_as``, takes the baseline's new runs)."""
    results = json.loads((out / "results.json").read_text())
    entry = next(e for e in results["repeats"] if e["repeat"] == rep)
    root, base = out / f"repeat{rep}", (REPO / "train.py").read_text()
    measured = {"baseline": entry["baseline"], **{a: r["remeasured"] for a, r in entry["arms"].items()
                                                  if r.get("remeasured") and not r["remeasured"].get("same_as")}}
    sources = best_sources(entry, root, base, list(measured))
    same = [arm for arm, src in sources.items() if arm != "baseline" and src == base]  # kept nothing
    for arm in same:  # the baseline train.py byte for byte: under the step budget its seeds are the baseline's
        mine, theirs = measured.pop(arm), entry["baseline"]
        entry["arms"][arm]["reproduced_baseline"] = reproduced(mine.get("runs", []), theirs.get("runs", []))
        entry["arms"][arm]["remeasured"] = {"same_as": "baseline"}
    tag = f"steps{args.remeasure_steps}" if args.remeasure_steps else "wallclock"
    jobs = []
    for arm, m in measured.items():
        have = len(m.get("runs", []))
        if m.get("remeasure_steps") != args.remeasure_steps:
            raise SystemExit(f"bench_search: {arm} was re-measured at {m.get('remeasure_steps')} steps, not "
                             f"--remeasure-steps {args.remeasure_steps}: its new seeds would not be comparable")
        folder = root / (f"remeasure-{arm}" if (root / f"remeasure-{arm}").is_dir() else f"remeasure-{tag}-{arm}")
        jobs += [(f"{arm}-seed{s}", remeasure, (sources[arm], root / "data", folder, rep, args, [s]))
                 for s in range(have, have + args.reseeds)]
    done = dict(run_jobs(jobs, args.jobs, root / "jobs-more"))
    for arm, m in measured.items():
        new = [run for name, r in sorted(done.items()) if name.startswith(f"{arm}-seed") for run in r.get("runs", [])]
        m.update(summarize(sorted(m["runs"] + new, key=lambda run: run["seed"])) | {"remeasure_steps": args.remeasure_steps})
    for r in entry["arms"].values():
        if (r.get("remeasured") or {}).get("same_as") == "baseline":
            r["remeasured"] = entry["baseline"] | {"same_as": "baseline"}
    for e in results["repeats"]:
        compare(e)
    return finish(results, out)


def remeasure_own_again(out: Path, rep: int, args: argparse.Namespace) -> int:
    """``--remeasure-own REPEAT``: that repeat's Tuner answer, and the baseline's settings, each
    re-trained by Ultralytics' own training (:func:`remeasure_own`), one job per seed, added to
    results.json (``remeasured_own`` of the tune arm, ``baseline_own``)."""
    results = json.loads((out / "results.json").read_text())
    entry = next(e for e in results["repeats"] if e["repeat"] == rep)
    tune = entry["arms"].get("tune") or {}
    if not tune.get("best_hyperparameters"):
        raise SystemExit(f"bench_search: repeat {rep} has no tune arm with best hyperparameters in {out}")
    data = out / f"repeat{rep}" / "data"
    what = {"tune": (tune["best_hyperparameters"], out / f"repeat{rep}" / "remeasure-tune-own"),
            "baseline": ({}, out / f"repeat{rep}" / "remeasure-baseline-own")}
    for _hyp, root in what.values():
        baseline_model_yaml(root, data, args)  # once, before jobs that would all write it
    jobs = [(f"{name}-seed{s}", remeasure_own, (hyp, data, root, rep, args, [s]))
            for name, (hyp, root) in what.items() for s in range(args.reseeds)]
    done = dict(run_jobs(jobs, args.jobs, out / f"repeat{rep}" / "jobs-own"))
    for name in what:
        runs = [run for s in range(args.reseeds) for run in done[f"{name}-seed{s}"].get("runs", [])]
        own = summarize(runs) | {"training": "ultralytics model.train, best.pt"}
        if name == "tune":
            tune["remeasured_own"] = own
        else:
            entry["baseline_own"] = own
    for e in results["repeats"]:
        compare(e)
    return finish(results, out)


def compare(entry: dict[str, Any]) -> None:
    """Each arm's re-measured seeds against the baseline's: beyond the noise (interval ends apart),
    Welch's one-sided p, and a keep the re-measurement did not confirm (a false keep caught)."""
    from scipy import stats

    base = entry["baseline"]
    base_scores = [r["score"] for r in base.get("runs", []) if "score" in r]

    def against(m: dict[str, Any], into: dict[str, Any]) -> None:
        into["beats_baseline"] = bool(m["low"] > base["high"])
        scores = [x["score"] for x in m["runs"] if "score" in x]
        if len(scores) >= 2 and len(base_scores) >= 2:
            t = stats.ttest_ind(scores, base_scores, equal_var=False, alternative="greater")
            into["welch_p_greater"] = round(float(t.pvalue), 4)

    for r in entry["arms"].values():
        m = r.get("remeasured", {})
        if "mean" in m and "high" in base:
            against(m, r)
            r.pop("false_keep_caught", None)
            if r.get("keeps") is not None:  # the Tuner keeps nothing by gate: no false keep to catch, not "False"
                r["false_keep_caught"] = bool(r["keeps"] > 0 and m["mean"] <= base["mean"])
        own = r.get("remeasured_own", {})
        if "mean" in own and "high" in base:
            against(own, own)
    own = entry.get("baseline_own", {})
    if "mean" in own and "high" in base:
        against(own, own)


def finish(results: dict[str, Any], out: Path) -> int:
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    plot(results, out / "best_over_time.svg")
    print(markdown(results))
    print(f"\nresults: {out / 'results.json'}; plot: {out / 'best_over_time.svg'}")
    return 0


def _steps_from_disk(root: Path, entry: dict[str, Any]) -> None:
    """Runs recorded before results.json kept their steps: read them from each run's train.json."""
    measured = {"baseline": entry["baseline"], **{a: r.get("remeasured", {}) for a, r in entry["arms"].items()}}
    for arm, m in measured.items():
        for i, run in enumerate(m.get("runs", [])):
            tj = root / f"remeasure-{arm}" / f"seed{i}" / "run" / "train.json"
            if "steps" not in run and not m.get("remeasure_steps") and tj.is_file():
                trained = json.loads(tj.read_text())
                if trained.get("seed") == run.get("seed"):
                    run.update(steps=trained.get("steps"), stopped_by=trained.get("stopped_by"))


def finish_stopped(out: Path, baseline_from: str | None) -> int:
    """``--finish``: a bench stopped before its last job: compare, plot and print what it saved.
    ``--baseline-from ARM``: the baseline's re-measurement is that arm's, allowed only when the
    arm kept nothing and its final best is the baseline train.py byte for byte."""
    results = json.loads((out / "results.json").read_text())
    for entry in results["repeats"]:
        _steps_from_disk(out / f"repeat{entry['repeat']}", entry)
        if not entry["baseline"] and baseline_from:
            arm = entry["arms"].get(baseline_from) or {}
            ws = out / f"repeat{entry['repeat']}" / baseline_from
            best = sh(["git", "-C", str(ws), "show", "looper/bench:train.py"]).stdout
            if arm.get("keeps") != 0 or best != (REPO / "train.py").read_text():
                raise SystemExit(f"bench_search: arm {baseline_from} kept a change or its best is not the baseline "
                                 "train.py; its re-measurement is not the baseline's")
            entry["baseline"] = arm["remeasured"] | {"from_arm": baseline_from}
        compare(entry)
    return finish(results, out)


if __name__ == "__main__":
    sys.exit(main())
