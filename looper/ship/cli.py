"""``looper export``: the command (thin; the work is in looper.ship.export and looper.tracking)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from looper.errors import UsageError


def export_command(
        out: Path | None = typer.Option(None, "--out", help="The file to write (.pt, or .onnx with --format onnx)."),
        experiment: int | None = typer.Option(None, "--experiment", help="This experiment instead of the tag's best."),
        fmt: str = typer.Option("pt", "--format", help="pt (an Ultralytics checkpoint) | onnx (Ultralytics' exporter)."),
        seed: int | None = typer.Option(None, "--seed", help="The run of this seed (default: its best-scoring run)."),
        tag: str | None = typer.Option(None, "--tag", help="The tag whose best ships (default: the last night run's)."),
        mlflow: bool = typer.Option(False, "--mlflow", help="Write the whole database to MLflow instead "
                                                            "(idempotent: a second run changes nothing)."),
        mlflow_uri: str | None = typer.Option(None, "--mlflow-uri", help="MLflow tracking URI (default: "
                                                                         "\\[tracking] mlflow_uri).")) -> None:
    """Ship the detector: the best's weights as an Ultralytics checkpoint (or ONNX), or the night to MLflow."""
    from looper.config import load_config

    root = Path(os.environ.get("LOOPER_WORKSPACE") or Path.cwd()).resolve()  # as looper.cli finds it
    cfg = load_config(root / "looper.toml" if (root / "looper.toml").exists() else None)
    if mlflow:
        _to_mlflow(root, cfg, mlflow_uri)
        return
    if out is None:
        raise UsageError("looper export: --out FILE is required (or --mlflow)")
    from looper.ship.export import export, night_tag

    data_dir = (root / cfg.data.dir).resolve()
    store = _store(root)
    shipped = export(root, store, tag or night_tag(store, cfg.loop.tag), data_dir, out.resolve(), fmt, experiment, seed)
    typer.echo(f"exported experiment #{shipped.experiment_id} (run {shipped.run_id}, {shipped.why}) -> {shipped.out}")
    typer.echo(f"weights sha256 {shipped.weights_sha256} (as the harness recorded them); "
               f"load with: from ultralytics import YOLO; YOLO({str(shipped.out)!r})")


def predict_command(
        pages: list[Path] = typer.Argument(..., help="Drawing pages (PNG, JPEG, TIFF, ...)."),
        out: Path = typer.Option(..., "--out", help="The folder to write predictions.json and the drawn pages into."),
        weights: Path | None = typer.Option(None, "--weights", help="A weights file (default: the best run of the "
                                                                    "last night's tag, its hash checked)."),
        tag: str | None = typer.Option(None, "--tag", help="The tag whose best predicts (default: the last night run's)."),
        device: str = typer.Option(os.environ.get("LOOPER_DEVICE", "cpu"), "--device", help="cpu | cuda."),
        no_draw: bool = typer.Option(False, "--no-draw", help="Write predictions.json only.")) -> None:
    """Detect symbols on pages as evaluate.py does (its tiles and merge): COCO predictions and drawn pages."""
    from looper.config import load_config
    from looper.ship.export import choose, night_tag, verified_weights
    from looper.ship.predict import predict

    root = Path(os.environ.get("LOOPER_WORKSPACE") or Path.cwd()).resolve()
    why = f"weights {weights}"
    if weights is None:
        cfg = load_config(root / "looper.toml" if (root / "looper.toml").exists() else None)
        store = _store(root)
        exp, run, reason = choose(store, tag or night_tag(store, cfg.loop.tag), None, None)
        weights = verified_weights(root, run)
        why = f"experiment #{exp.id} of tag {exp.tag!r} (run {run.run_id}, {reason})"
    done = predict(pages, weights, out.resolve(), root / "evaluate.py", device, drawn=not no_draw)
    n = sum(len(p.boxes) for p in done.pages)
    typer.echo(f"predicted {n} box(es) on {len(done.pages)} page(s) with {why} -> {done.out} "
               f"({', '.join(f.name for f in done.files[:3])}{' ...' if len(done.files) > 3 else ''})")


def _store(root: Path) -> Any:
    from looper.store import Store

    return Store(root / "experiments.db")


def _to_mlflow(root: Path, cfg: object, uri: str | None) -> None:
    from looper.tracking import export_database

    target = uri or getattr(getattr(cfg, "tracking", None), "mlflow_uri", "") or ""
    if not target:
        raise UsageError("looper export --mlflow: no MLflow URI: set [tracking] mlflow_uri or pass --mlflow-uri")
    from looper.errors import HarnessError

    try:
        done = export_database(_store(root), target, root,
                               getattr(getattr(cfg, "tracking", None), "mlflow_experiment", ""))
    except Exception as exc:  # noqa: BLE001 - MLflow's own errors, named: what was written stays (idempotent)
        raise HarnessError(f"looper export --mlflow: MLflow at {target}: {type(exc).__name__}: "
                           f"{str(exc).splitlines()[0][:300] if str(exc) else ''} (run it again: runs written "
                           "so far are kept and not written twice)") from None
    typer.echo(f"mlflow {target}: {done.created} run(s) created, {done.unchanged} already there")
