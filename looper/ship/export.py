"""Ship the detector: an experiment's weights as an Ultralytics checkpoint (``looper export``).

    looper export --out best.pt                 # the tag's best, as ultralytics.YOLO("best.pt") loads it
    looper export --out best.onnx --format onnx  # the same, through Ultralytics' own ONNX exporter

Weights come only from the harness's records: the run's ``weights_path`` and the sha256 the
harness took of that file when it recorded the run (``runs.weights_sha256``, right after the
evaluation that scored it). A file that is missing, a link, or hashes differently now is
refused (:class:`WeightsChanged`): nothing proves it is the model that was scored. Which run of
the experiment ships is a pure rule (:func:`looper.core.scoring.ship.pick_run`).

The file is read as data (safetensors: nothing unpickled), its model yaml passes the same
architecture check as evaluate.py's, and the network is built and loaded exactly as evaluate.py
builds it; the class names are the data's (``manifest.json``), checked against the weights'.
The output is a pickle like every Ultralytics ``.pt``: it is the person's own model, written here.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from looper.core.scoring.ship import RunView, pick_run
from looper.data.manifest import manifest_classes
from looper.errors import UsageError
from looper.workspace.hashes import file_sha256

FORMATS = ("pt", "onnx")
ONNX_NEEDS = ("onnx", "onnxslim")  # Ultralytics' ONNX exporter (simplify=True) imports these
EXPORT_EXTRA = "pip install 'looper[export]'  (onnx, onnxslim, onnxruntime)"
IMGSZ = 1024  # evaluate.py's largest tile side (TILE): the exported model's default image size


class ExportError(UsageError):
    """looper export cannot ship what was asked (exit 2); the message names the thing."""


class WeightsChanged(ExportError):
    """The run's weights file is not the one the harness hashed when it recorded the run."""


@dataclass(frozen=True)
class Shipped:
    """What ``looper export`` wrote and where it came from."""

    out: Path
    format: str
    experiment_id: int
    run_id: int
    seed: int | None
    score: float | None
    weights_sha256: str
    why: str


def run_views(store: Any, experiment_id: int) -> list[RunView]:
    return [RunView(r.id, r.role, r.seed, r.score, r.weights_path, r.weights_sha256)
            for r in store.run_records(experiment_id)]


def night_tag(store: Any, fallback: str) -> str:
    """The tag of the last night run: the latest daemon start's tag (as ``looper report`` reads the night),
    else the latest experiment's, else ``fallback`` (looper.toml's tag)."""
    from looper.store.queries import latest_start

    start = latest_start(store)
    if start is not None and start.tag:
        return str(start.tag)
    last = store.find_experiments(limit=1)
    return str(last[-1].tag) if last else fallback


def choose(store: Any, tag: str, experiment_id: int | None, seed: int | None) -> tuple[Any, RunView, str]:
    """(the experiment, the run to ship, why that run): the tag's best unless ``experiment_id``."""
    from looper.store.repo import ExperimentNotFound

    if experiment_id is None:
        exp = store.best(tag)
        if exp is None:
            raise ExportError(f"tag {tag!r} has no best yet (no baseline or kept experiment): nothing to export")
    else:
        try:
            exp = store.experiment(experiment_id)
        except ExperimentNotFound as exc:
            raise ExportError(f"--experiment {experiment_id}: no such experiment in experiments.db") from exc
    pick = pick_run(run_views(store, exp.id), seed)
    if pick.run is None:
        raise ExportError(f"experiment #{exp.id} ({exp.status.value}): cannot export: {pick.reason}")
    return exp, pick.run, pick.reason


def verified_weights(root: Path, run: RunView) -> Path:
    """The run's weights file, after checking it still hashes as the harness recorded it."""
    assert run.weights_path and run.weights_sha256
    path = root / run.weights_path
    if path.is_symlink() or not path.is_file():
        raise WeightsChanged(f"run {run.run_id} (seed {run.seed}): its weights {run.weights_path} are gone or "
                             "not a plain file any more; nothing proves another file is the model that was scored")
    if not path.resolve().is_relative_to(root.resolve()):
        raise WeightsChanged(f"run {run.run_id}: recorded weights path {run.weights_path!r} is outside the workspace")
    now = file_sha256(path)
    if now != run.weights_sha256:
        raise WeightsChanged(f"run {run.run_id} (seed {run.seed}): {run.weights_path} has sha256 {now[:12]}..., "
                             f"the harness recorded {run.weights_sha256[:12]}... when it scored the run: "
                             "the file changed since; refusing to export it")
    return path


def data_classes(data_dir: Path) -> list[str]:
    """The data's class names, in the manifest's order; an ExportError naming the manifest otherwise."""
    try:
        return manifest_classes(data_dir)
    except ValueError as exc:
        raise ExportError(str(exc)) from exc


def pinned_evaluator(root: Path, store: Any, tag: str) -> Path:
    """The workspace's evaluate.py, after checking it is the one the tag pinned (as a night checks it before
    each run, issue 48): export runs its code (the model yaml check), so an evaluate.py changed since is
    refused unrun, naming both hashes."""
    path = root / "evaluate.py"
    record = store.tag_record(tag)
    pinned = (record.fixed_hashes or {}).get("evaluate.py") if record is not None else None
    if not pinned:
        raise ExportError(f"tag {tag!r} has no pinned evaluate.py to check {path} against: nothing is run unchecked")
    now = file_sha256(path) if path.is_file() and not path.is_symlink() else None
    if now != pinned:
        raise ExportError(f"{path} has sha256 {str(now)[:12]}, the tag {tag!r} pinned {str(pinned)[:12]}: it changed "
                          "since the tag began; put it back (git checkout evaluate.py) before exporting")
    return path


def _architecture_check(root: Path) -> Any:
    """evaluate.py's own check of a model yaml (the workspace's fixed copy)."""
    spec = importlib.util.spec_from_file_location("looper_export_evaluate", root / "evaluate.py")
    if spec is None or spec.loader is None:
        raise ExportError(f"{root / 'evaluate.py'} cannot be loaded to check the model yaml")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.architecture_problem


def build_network(weights: Path, classes: list[str], root: Path) -> Any:
    """The network of a looper-weights/1 file, built and loaded as evaluate.py does, named by ``classes``."""
    import yaml
    from safetensors import safe_open
    from ultralytics.nn.tasks import DetectionModel

    with safe_open(str(weights), framework="pt", device="cpu") as f:
        meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no items()
    if meta.get("format") != "looper-weights/1":
        raise ExportError(f"{weights}: format {meta.get('format')!r}, not looper-weights/1")
    cfg = yaml.safe_load(meta.get("model_yaml", ""))
    names = json.loads(meta.get("names", "null"))
    if names != classes:
        raise ExportError(f"{weights}: the weights' classes {names!r} differ from the data's {classes!r}")
    problem = _architecture_check(root)(cfg)
    if problem:
        raise ExportError(f"{weights}: model yaml refused: {problem}")
    model = DetectionModel(cfg, ch=int(cfg.get("channels", 3)), nc=len(classes), verbose=False)
    model.load_state_dict(tensors, strict=True)
    model.names = dict(enumerate(classes))
    model = model.float().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def write_checkpoint(model: Any, out: Path, provenance: dict[str, Any]) -> Path:
    """An Ultralytics checkpoint (the EMA slot, as Ultralytics' trainer writes it), float32, atomically."""
    import torch
    import ultralytics

    ckpt = {"date": _dt.datetime.now(_dt.UTC).isoformat(), "version": ultralytics.__version__,
            "license": "AGPL-3.0 (Ultralytics)", "docs": "docs/SHIPPING.md", "epoch": -1, "best_fitness": None,
            "model": None, "ema": model, "updates": None, "optimizer": None,
            "train_args": {"task": "detect", "imgsz": IMGSZ, "single_cls": False},
            "looper": provenance}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    torch.save(ckpt, tmp)
    tmp.replace(out)
    return out


def to_onnx(pt: Path, out: Path) -> Path:
    """Ultralytics' own ONNX exporter on the checkpoint ``pt``; the .onnx moved to ``out``."""
    missing = [m for m in ONNX_NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        raise ExportError(f"--format onnx needs {', '.join(missing)}, not installed here: {EXPORT_EXTRA}")
    from ultralytics import YOLO

    made = Path(YOLO(str(pt)).export(format="onnx", imgsz=IMGSZ, simplify=True, device="cpu"))
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(made), str(out))
    return out


def export(root: Path, store: Any, tag: str, data_dir: Path, out: Path, fmt: str = "pt",
           experiment_id: int | None = None, seed: int | None = None) -> Shipped:
    """Write the experiment's detector to ``out`` (``fmt``: pt | onnx)."""
    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    exp, run, why = choose(store, tag, experiment_id, seed)
    pinned_evaluator(root, store, exp.tag)  # before anything of the workspace's is run or read
    classes = data_classes(data_dir)
    weights = verified_weights(root, run)
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_CONFIG_DIR", str(root / ".looper" / "ultralytics"))
    model = build_network(weights, classes, root)
    provenance = {"experiment_id": exp.id, "tag": exp.tag, "commit": exp.commit, "status": exp.status.value,
                  "experiment_score": exp.score, "run_id": run.run_id, "seed": run.seed, "run_score": run.score,
                  "weights_sha256": run.weights_sha256, "classes": classes, "description": exp.description}
    if fmt == "pt":
        write_checkpoint(model, out, provenance)
    else:
        with tempfile.TemporaryDirectory(prefix="looper-export-") as tmp:
            to_onnx(write_checkpoint(model, Path(tmp) / "best.pt", provenance), out)
    return Shipped(out, fmt, exp.id, run.run_id, run.seed, run.score, str(run.weights_sha256), why)
