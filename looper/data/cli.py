"""`looper data import` and `looper data check` (registered in looper/cli.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from looper.data.paths import DEFAULT_MAX_PIXELS
from looper.errors import cli_errors

data_app = typer.Typer(no_args_is_help=True, help="Your own labelled data: import an export, check a data folder.")


def imported_text(done: Any) -> str:
    pages = ", ".join(f"{n} {s}" for s, n in done.pages.items())
    lines = [f"imported {done.format} export: {len(done.classes)} classes, pages {pages}; {done.files} files "
             f"in {done.out} (hash {done.hash[:12]})"]
    lines += [f"warning: {w}" for w in done.warnings]
    return "\n".join(lines)


@data_app.command("import")
@cli_errors
def import_cmd(source: Path = typer.Argument(..., help="A COCO .json, an Ultralytics data.yaml, or a looper data folder."),
               out: Path = typer.Option(..., "--out", help="The data folder to write (new or empty)."),
               fmt: str | None = typer.Option(None, "--format", help="coco | yolo | looper (guessed when not given)."),
               images: Path | None = typer.Option(None, "--images", help="COCO: the folder its file_names are in "
                                                                        "(default: beside the .json)."),
               seed: int = typer.Option(0, "--seed", help="Seed of the page split drawn when the export has none."),
               max_pixels: int = typer.Option(DEFAULT_MAX_PIXELS, "--max-pixels", min=1,
                                              help="Pixel budget per image: a larger one is refused by name."),
               strict_bounds: bool = typer.Option(False, "--strict-bounds",
                                                  help="Refuse a box crossing a page edge (default: clip it, counted)."),
               dpi: int = typer.Option(150, "--dpi", min=18, max=2400,
                                       help="PDF pages: the resolution they are rendered at (their labels' pixels).")
               ) -> None:
    """Check a labelled export and write it in looper's layout (pages, tiles, manifest)."""
    from looper.data.importer import import_data

    typer.echo(imported_text(import_data(source, out, fmt, images, seed, max_pixels, strict_bounds, dpi)))


@data_app.command("check")
@cli_errors
def check_cmd(directory: Path | None = typer.Argument(None, help="A data folder (default: the workspace's [data] dir).")
              ) -> None:
    """Every data check the night's preflight runs: exit 0 no error, 1 problems, 2 cannot check."""
    from looper.config import load_config
    from looper.data.check import check_data

    root = Path(os.environ.get("LOOPER_WORKSPACE") or Path.cwd()).resolve()
    if directory is None:
        cfg = load_config(root / "looper.toml" if (root / "looper.toml").exists() else None)
        directory = Path(cfg.data.dir) if Path(cfg.data.dir).is_absolute() else root / cfg.data.dir
    train = root / "train.py"
    v = check_data(directory, str(directory), train.read_text() if train.is_file() else None)
    for w in v.metrics.get("data_warnings", []):
        typer.echo(f"warning: {w}")
    if v.metrics.get("memory"):
        typer.echo(v.metrics["memory"])
    for b in v.blocking:
        typer.echo(b, err=True)
    typer.echo(f"{v.status.value}: {directory}" + (f" ({len(v.blocking)} problem(s))" if v.blocking else ""))
    raise typer.Exit({"pass": 0, "fail": 1}.get(v.status.value, 2))
