"""The tuned confidence, measured once at the night's end (and after ``looper confirm``): per class, the threshold that maximises F1 on
the val split and the test F1 it gives, beside the pinned 0.25 (issue 47). The gate never sees it.

For the tag's best (and its baseline, when another experiment), one run's weights (the first ``main-``
run's, the run the report's pictures show) go through the workspace's evaluate.py twice, on the val and
the test split, by the executor's threshold evaluation (``evaluate_stream``: the same evaluation sandbox,
evaluate.py run unchanged by looper/executors/streameval.py, which also writes the ranked stream,
STREAM.json). Each stream is first recounted against its own METRICS.json at the pinned confidence; then
the pure rule (looper/core/scoring/threshold.py) picks each class's threshold on val and reads its test
F1. The outcome is ``runs/<tag>/<exp>/threshold/THRESHOLD.json``, ``measured`` or ``not measured`` with
the reason; nothing here raises, halts or touches a verdict.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from looper.core.scoring import threshold as core_threshold
from looper.core.scoring.metrics import CONFIDENCE
from looper.executors import EvalJob
from looper.night.context import Context
from looper.store import queries

THRESHOLD_NAME = "THRESHOLD.json"
FOLDER = "threshold"
MAX_STREAM_BYTES = 64 * 1024 * 1024  # a STREAM.json larger than this is not read (said in words)
SPLITS = ("val", "test")


class NotMeasured(Exception):
    """Why the threshold evaluation gave nothing to show."""


def result_path(root: Path, tag: str, exp_id: int) -> Path:
    return Path(root) / "runs" / tag / f"{exp_id:05d}" / FOLDER / THRESHOLD_NAME


def measure_thresholds(ctx: Context) -> None:
    """The tuned thresholds of the tag's best and its baseline, each written to its THRESHOLD.json.
    Never raises: a failure is that experiment's ``not measured``, with the reason."""
    try:
        best = ctx.store.best(ctx.tag.name)
        base = queries.tag_baseline(ctx.store, ctx.tag.name)
        ids = list(dict.fromkeys(e.id for e in (best, base) if e is not None))
    except Exception as exc:  # noqa: BLE001 - the database may be what broke; nothing to write then
        _say(ctx, f"tuned thresholds not measured: {type(exc).__name__}: {exc}")
        return
    for exp_id in ids:
        started = time.monotonic()
        try:
            out: dict[str, Any] = {"status": "measured", **_measure(ctx, exp_id)}
        except NotMeasured as exc:
            out = {"status": "not measured", "reason": ctx.journal.redact(str(exc))}  # it may quote a run log
        except Exception as exc:  # noqa: BLE001 - a bug here must not end the night's report
            out = {"status": "not measured", "reason": f"internal error: {type(exc).__name__}: {exc}"}
        out.update(schema=1, experiment=exp_id, confidence=CONFIDENCE, seconds=round(time.monotonic() - started, 1))
        _write(result_path(ctx.root, ctx.tag.name, exp_id), out)
        words = (f"weighted F1 {out['weighted_f1_fixed']} at {CONFIDENCE} -> {out['weighted_f1_tuned']} at the "
                 "val-tuned thresholds" if out["status"] == "measured" else f"not measured: {out['reason']}")
        _say(ctx, f"tuned thresholds of #{exp_id}: {words}", exp_id)


def _say(ctx: Context, text: str, exp_id: int | None = None) -> None:
    """On the display and, with an experiment, in the journal; neither may end the night's end."""
    try:
        ctx.display.note(text)
        if exp_id is not None:
            ctx.journal.event("note", f"{text} (report only)"[:500], exp_id)
    except Exception:  # noqa: BLE001, S110 - the file says it; a broken display or journal is the night's own matter
        pass


def _write(path: Path, obj: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)
    except OSError:
        pass  # a full disk: the report says "not measured" for a missing file


def run_weights(root: Path, tag: str, exp_id: int) -> Path | None:
    """The weights of the experiment's first run that left them (a ``main-`` run first, canaries never)."""
    folder = Path(root) / "runs" / tag / f"{exp_id:05d}"
    found = [w for w in folder.glob("*/out/weights.pt") if not w.parent.parent.name.startswith("canary")]
    found.sort(key=lambda w: (not w.parent.parent.name.startswith("main-"), w.parent.parent.name))
    return found[0] if found else None


def _measure(ctx: Context, exp_id: int) -> dict[str, Any]:
    run = getattr(ctx.executor, "evaluate_stream", None)
    if run is None:
        raise NotMeasured(f"the {ctx.executor.name} executor has no threshold evaluation (the local executor only)")
    weights = run_weights(ctx.root, ctx.tag.name, exp_id)
    if weights is None:
        raise NotMeasured(f"no weights of #{exp_id} are left in runs/{ctx.tag.name}/{exp_id:05d}")
    w = ctx.main_worker()
    folder = result_path(ctx.root, ctx.tag.name, exp_id).parent
    streams: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    for split in SPLITS:
        if ctx.night.cancel.is_set():
            raise NotMeasured("the daemon was stopped before it finished")
        metrics_path = folder / split / "METRICS.json"
        metrics_path.parent.mkdir(parents=True, exist_ok=True)
        ev = run(EvalJob(checkout=w.wt.path, weights=weights, metrics_path=metrics_path,
                         log_path=metrics_path.with_name("eval.log"),
                         timeout_seconds=max(600.0, 2.0 * ctx.cfg.loop.budget_seconds),
                         stall_seconds=ctx.cfg.loop.stall_seconds, device=w.device), split)
        seconds[split] = round(ev.seconds, 1)
        if not ev.clean_exit or not metrics_path.is_file():
            last = (ev.log_tail.strip().splitlines()[-1:] or ["(no output)"])[0][:200]
            raise NotMeasured(f"the {split} evaluation failed (exit {ev.exit_code}): {last}")
        streams[split] = _read_stream(ctx, metrics_path, split)
    return {"weights": str(weights.relative_to(ctx.root)), "eval_seconds": seconds,
            **summary(streams["val"], streams["test"])}


def summary(val: dict[str, Any], test: dict[str, Any]) -> dict[str, Any]:
    """THRESHOLD.json's figures from the two checked streams (the pure rule's rows and weighted F1s)."""
    rows = core_threshold.class_rows(val, test)
    fixed, tuned = core_threshold.weighted(rows)
    return {"classes": [r.as_json() for r in rows],
            "weighted_f1_fixed": None if fixed is None else round(fixed, 6),
            "weighted_f1_tuned": None if tuned is None else round(tuned, 6)}


def _read_stream(ctx: Context, metrics_path: Path, split: str) -> dict[str, Any]:
    """The split's STREAM.json, refused unless its shape is right and it bears out its METRICS.json."""
    from looper.night.guard import read_json

    lim = ctx.cfg.limits
    stream, problem = read_json(metrics_path.with_name("STREAM.json"), MAX_STREAM_BYTES, lim.json_max_depth)
    metrics, problem2 = read_json(metrics_path, lim.json_max_bytes, lim.json_max_depth)
    if stream is None or metrics is None:
        raise NotMeasured(f"the {split} evaluation left no readable STREAM.json and METRICS.json "
                          f"({problem or problem2 or 'missing'})")
    bad = core_threshold.problems(stream, split) or core_threshold.disagreements(stream, metrics)
    if bad:
        raise NotMeasured(f"the {split} stream does not bear out its METRICS.json: {'; '.join(bad[:3])}")
    return stream
