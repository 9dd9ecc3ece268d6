"""The evaluator's stage, the same for every executor that runs it on this machine's side of a job.

After training's sandbox is gone: the candidate's weights are refused unless they are a plain file
(:func:`plain_file`: a link planted by train.py could point at the test truth or block a reader),
the verified evaluate.py is copied fresh into a folder training never could write
(:func:`prepare_evaluator`), and after the sandboxed evaluator ran, its METRICS.json (and
MATCHES.json) are moved to where the loop reads them (:func:`collect_metrics`). :func:`stage` and
:func:`collect` are those steps for one :class:`EvalJob`; :func:`stage_stream` and :func:`collect_stream`
the same for the threshold evaluation, evaluate.py run through looper/executors/streameval.py (STREAM.json
too), which only the report reads.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

from looper.executors.base import EvalJob, RunResult
from looper.executors.sandbox import WEIGHTS_REFUSED_EXIT
from looper.workspace import trees


def stage(job: EvalJob) -> RunResult | None:
    """Before a sandboxed evaluation: the refusal of weights that are not a plain file (a crash of the
    change, :data:`WEIGHTS_REFUSED_EXIT`), or None once a fresh copy of evaluate.py is in place."""
    refused = plain_file(job.weights)
    if refused and os.path.lexists(job.weights):
        return RunResult(exit_code=WEIGHTS_REFUSED_EXIT, log_tail=f"evaluate.py: weights refused: {refused}")
    prepare_evaluator(job.checkout / "evaluate.py", job.metrics_path.parent / "eval")
    return None


def collect(job: EvalJob) -> bool:
    """After a sandboxed evaluation: its METRICS.json moved to ``job.metrics_path`` (False: none written)."""
    return collect_metrics(job.metrics_path.parent / "eval" / "out", job.metrics_path)


STREAM_SCRIPT = Path(__file__).with_name("streameval.py")
STREAM_COPY = "stream_eval.py"  # its name beside the copy of evaluate.py it loads
STREAM_NAME = "STREAM.json"


def stage_stream(job: EvalJob) -> RunResult | None:
    """Like :func:`stage`, whether or not a sandbox runs it, and the stream script copied beside evaluate.py."""
    refused = plain_file(job.weights)
    if refused:
        return RunResult(exit_code=WEIGHTS_REFUSED_EXIT, log_tail=f"evaluate.py: weights refused: {refused}")
    copy, _ = prepare_evaluator(job.checkout / "evaluate.py", job.metrics_path.parent / "eval")
    script = copy.with_name(STREAM_COPY)
    shutil.copyfile(STREAM_SCRIPT, script)
    script.chmod(0o444)
    return None


def collect_stream(job: EvalJob) -> bool:
    """:func:`collect` plus STREAM.json, moved beside ``job.metrics_path``."""
    out = job.metrics_path.parent / "eval" / "out"
    if plain_file(out / STREAM_NAME) is None:
        os.replace(out / STREAM_NAME, job.metrics_path.with_name(STREAM_NAME))
    return collect_metrics(out, job.metrics_path)


def prepare_evaluator(evaluate_py: Path, eval_dir: Path) -> tuple[Path, Path]:
    """A harness-owned copy of evaluate.py in a fresh ``eval_dir`` and its empty output folder.

    Called after the training sandbox is gone; ``eval_dir`` is outside anything training could
    write. Returns (the copy, the output folder).
    """
    eval_dir = Path(eval_dir)
    if os.path.lexists(eval_dir) and trees.remove_tree(eval_dir):
        os.rename(eval_dir, eval_dir.with_name(f"{eval_dir.name}.left-{time.time_ns()}"))
    out = eval_dir / "out"
    out.mkdir(parents=True)
    copy = eval_dir / "evaluate.py"
    shutil.copyfile(evaluate_py, copy)
    copy.chmod(0o444)
    return copy, out


def plain_file(path: Path) -> str | None:
    """None when ``path`` is a regular file (not a link, FIFO or device); a reason otherwise.

    The harness reads training's outputs (weights, train.json) only through this check: a
    link planted by train.py could point at the test truth or block a reader forever.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return f"{Path(path).name} does not exist"
    if stat.S_ISLNK(st.st_mode):
        return f"{Path(path).name} is a symbolic link (to {os.readlink(path)}); training outputs must be plain files"
    if not stat.S_ISREG(st.st_mode):
        return f"{Path(path).name} is not a regular file"
    return None


def collect_metrics(out_dir: Path, metrics_path: Path) -> bool:
    """Move the sandboxed evaluator's METRICS.json to where the loop reads it; False when it wrote none."""
    src = Path(out_dir) / "METRICS.json"
    if plain_file(src) is not None:
        return False
    matches = Path(out_dir) / "MATCHES.json"  # the matched boxes beside it (for the report), when written
    if plain_file(matches) is None:
        os.replace(matches, Path(metrics_path).with_name("MATCHES.json"))
    os.replace(src, metrics_path)
    return True
