"""The record of a run: a scratch checkout to re-run a recorded train.py, and the one rule that writes a run
(its score, evidence, phases and the hash of the weights it left) to the store."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from looper.executors.base import FIXED_FILES
from looper.night.clock import now_iso
from looper.night.context import Context
from looper.night.measure import Measurement, weights_sha256


# ---------------------------------------------------------------------- the record of a run
@contextlib.contextmanager
def best_checkout(ctx: Context, src: Path, source: str, prefix: str) -> Iterator[Path]:
    """A scratch checkout for re-running a recorded train.py (``source``) beside ``src``'s fixed files,
    under ``.looper/``, removed afterwards: the best gaining a seed, the morning's confirmation."""
    ck = Path(tempfile.mkdtemp(prefix=prefix, dir=ctx.root / ".looper"))
    try:
        for name in FIXED_FILES:
            shutil.copy2(src / name, ck / name)
        (ck / "train.py").write_text(source)
        yield ck
    finally:
        shutil.rmtree(ck, ignore_errors=True)


def record_best_run(ctx: Context, best_id: int, m: Measurement) -> None:
    """Record a re-run of the best as its own run (role rerun); one the wall clock cut short is on record
    but never a score of the best (no metrics)."""
    record_run(ctx, best_id, "rerun", dataclasses.replace(m, metrics=None) if m.cut_short else m)


#: What a run's record keeps of the GPU sampler's summary (looper.executors.gpu), as ``train.harness_gpu``:
#: train.py's own train.json is the candidate's word; these figures are the harness's.
RUN_GPU_KEYS = ("index", "name", "mean_utilization_pct", "busy_pct", "peak_memory_mb", "samples", "lost")


def record_run(ctx: Context, exp_id: int, role: str, m: Measurement) -> None:
    score = m.metrics.get(ctx.cfg.gate.score) if m.metrics is not None else None
    tail = (m.train.log_tail if m.train else "")[-4000:]
    weights = m.run_dir / "out" / "weights.pt" if m.run_dir is not None and m.metrics is not None else None
    digest = weights_sha256(m) if weights is not None else None  # the scored weights, hashed as recorded
    train = None if m.train_json is None else {k: v for k, v in m.train_json.items() if k != "harness_gpu"}
    if train is not None and m.train is not None and m.train.gpu:  # the harness's own NVML figures of the run
        train["harness_gpu"] = {k: m.train.gpu[k] for k in RUN_GPU_KEYS if k in m.train.gpu}
    ctx.store.add_run(exp_id, role=role, seed=m.seed,
                      exit_code=m.train.exit_code if m.train else None, score=score,
                      metrics=m.metrics, train=train, log_tail=ctx.journal.redact(tail),
                      started_at=m.started_at, finished_at=now_iso(), train_started_at=m.train_started_at,
                      train_ended_at=m.train_ended_at, eval_ended_at=m.eval_ended_at,
                      weights_path=_relative(ctx.root, weights) if digest else None, weights_sha256=digest)


def _relative(root: Path, path: Path | None) -> str | None:
    """``path`` relative to the workspace root (as the store keeps it), or None outside it."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix() if path is not None else None
    except ValueError:
        return None
