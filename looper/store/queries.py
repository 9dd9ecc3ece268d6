"""Read-only queries of the report, the history, the status and the planner.

Each is one or two SELECTs over ``experiments.db`` returning frozen records
(:mod:`looper.store.records`), built from the same filter as :meth:`Store.find_experiments`
(:func:`looper.store.values.experiment_filter`). Nothing here writes.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqlalchemy import func, select

import looper.store.models as m
from looper.core.verdicts.verdict import Outcome
from looper.store.records import ConfirmationRecord, EventRecord, ExperimentRecord, ExperimentRow
from looper.store.repo import Store, experiment_filter

__all__ = ["confirmations", "json_fields", "kept_texts", "latest_start", "lean_experiments", "running_best",
           "tag_baseline", "used_seeds"]

#: The plain columns of an :class:`ExperimentRow` (never ``source``, ``config`` or ``metrics``).
_LEAN = ("id", "tag", "kind", "commit", "parent", "status", "score", "description", "started_at",
         "finished_at", "failure_signature", "exit_code", "agent_seconds", "train_seconds", "eval_seconds",
         "harness_seconds", "worker", "phase")
#: Free text a ``clean`` function is applied to.
_TEXTS = ("description", "failure_signature")
_KEPT_CHUNK = 500


def _same(text: str) -> str:
    return text


def _main_run_peak(t: Any) -> Any:
    """train.py's peak memory from the experiment's first main run (train.json is stored once, there)."""
    r = m.runs
    return (select(func.json_extract(r.c.train_json, "$.peak_memory_mb"))
            .where(r.c.experiment_id == t.c.id, r.c.role == "main").order_by(r.c.id).limit(1).scalar_subquery())


def lean_experiments(
    store: Store,
    *,
    tag: str | None = None,
    status: Outcome | str | Iterable[Outcome | str] | None = None,
    since: str | _dt.datetime | None = None,
    until: str | _dt.datetime | None = None,
    kind: str | Iterable[str] | None = None,
    figures: bool = True,
    clean: Callable[[str], str] | None = None,
) -> list[ExperimentRow]:
    """Experiments by id as lean rows, in one query: 10,000 stay well under a second.

    Filters as :meth:`Store.find_experiments`. ``figures=False`` leaves out ``gpu``, the
    gate's ``verdict_diff`` and ``train_peak_memory_mb`` (pulled out of their JSON by
    SQLite). ``clean`` is applied to every free text (description, failure signature,
    blocking reasons) on its way out, e.g. a redaction.
    """
    t = m.experiments
    cols = [t.c[name] for name in _LEAN] + [t.c.blocking_json]
    if figures:
        cols += [t.c.gpu_json,
                 func.json_extract(t.c.verdict_json, "$.metrics.diff").label("verdict_diff"),
                 func.coalesce(func.json_extract(t.c.train_json, "$.peak_memory_mb"),  # older databases
                               _main_run_peak(t)).label("train_peak_memory_mb")]
    q = experiment_filter(select(*cols), tag=tag, status=status, since=since, until=until, kind=kind)
    with store._ro() as conn:  # noqa: SLF001 - queries are part of the store package
        result = conn.execute(q.order_by(t.c.id))
        names = list(result.keys())
        rows = result.all()
    fix = clean or _same
    loads = json.loads
    outcomes = {o.value: o for o in Outcome}
    out = []
    for r in rows:
        d = dict(zip(names, r, strict=True))
        b = d.pop("blocking_json")
        d["blocking"] = tuple(fix(str(x)) for x in loads(b)) if b and b != "[]" else ()
        d["status"] = outcomes[d["status"]]
        if figures:
            g = d.pop("gpu_json")
            d["gpu"] = loads(g) if g else None
        for k in _TEXTS:
            if d[k] is not None:
                d[k] = fix(d[k])
        out.append(ExperimentRow(**d))
    return out


#: The JSON columns :func:`json_fields` reads, by their record names.
_JSON_COLUMNS = {"config": "config_json", "metrics": "metrics_json", "verdict": "verdict_json"}
_PAD = "$.__looper_pad__"


def json_fields(
    store: Store,
    fields: Mapping[str, tuple[str, str]],
    *,
    tag: str | None = None,
    since: str | _dt.datetime | None = None,
    kind: str | Iterable[str] | None = None,
) -> dict[int, dict[str, Any]]:
    """``{id: {name: value}}`` for every experiment the filter selects: ``fields`` maps a name to
    ``(column, JSON path)``, e.g. ``"band": ("verdict", "$.metrics.noise_band")``; a path that is
    absent gives None. SQLite pulls the values out (one multi-path ``json_extract`` per column
    and row), so 10,000 experiments are read without decoding their whole verdicts or
    configurations; values come back as stored (numbers exact, objects and arrays decoded)."""
    t = m.experiments
    by_column: dict[str, list[tuple[str, str]]] = {}
    for name, (column, path) in fields.items():
        if column not in _JSON_COLUMNS or not path.startswith("$"):
            raise ValueError(f"{name}: read a JSON path ($...) of {', '.join(_JSON_COLUMNS)}, got {column!r} {path!r}")
        by_column.setdefault(column, []).append((name, path))
    groups = list(by_column.items())
    # with two or more paths json_extract answers a JSON array, one element per path, in order;
    # one more path that is never there makes even a single field take that form
    cols = [func.json_extract(t.c[_JSON_COLUMNS[c]], *[p for _, p in named], _PAD) for c, named in groups]
    q = experiment_filter(select(t.c.id, *cols), tag=tag, since=since, kind=kind)
    with store._ro() as conn:  # noqa: SLF001
        rows = conn.execute(q.order_by(t.c.id)).all()
    out: dict[int, dict[str, Any]] = {}
    loads = json.loads
    for row in rows:
        values: dict[str, Any] = {}
        for (_, named), text in zip(groups, row[1:], strict=True):
            got = loads(text) if text is not None else [None] * (len(named) + 1)  # a NULL column
            values.update(zip((n for n, _ in named), got, strict=False))  # the pad is left over
        out[int(row[0])] = values
    return out


def running_best(store: Store, tag: str) -> list[tuple[int, float]]:
    """``(id, score)`` of every kept, scored baseline or candidate of ``tag``, by id: the
    steps of the tag's running best (each keep beat the one before it)."""
    t = m.experiments
    q = (select(t.c.id, t.c.score)
         .where(t.c.tag == tag, t.c.status == Outcome.KEEP.value,
                t.c.kind.in_(("baseline", "candidate")), t.c.score.is_not(None))
         .order_by(t.c.id))
    with store._ro() as conn:  # noqa: SLF001
        return [(int(i), float(v)) for i, v in conn.execute(q)]


def kept_texts(store: Store, ids: Iterable[int]) -> dict[int, tuple[str, str]]:
    """``{id: (rationale, diff)}`` of the given experiments (only these two big columns)."""
    t = m.experiments
    wanted = list(ids)
    out: dict[int, tuple[str, str]] = {}
    with store._ro() as conn:  # noqa: SLF001
        for start in range(0, len(wanted), _KEPT_CHUNK):
            q = select(t.c.id, t.c.rationale, t.c.diff).where(t.c.id.in_(wanted[start:start + _KEPT_CHUNK]))
            out.update({int(i): (r or "", d or "") for i, r, d in conn.execute(q)})
    return out


def latest_start(store: Store) -> EventRecord | None:
    """The latest ``start`` event (the beginning of the last daemon run), or None."""
    starts = store.journal(kind="start", limit=1)
    return starts[-1] if starts else None


def night_note(store: Store, prefix: str) -> EventRecord | None:
    """The latest ``note`` beginning with ``prefix`` journaled since the last daemon run began (None before any, or
    where that night has none: an earlier night's note, of other keys perhaps, is not this one's)."""
    start = latest_start(store)
    if start is None:
        return None
    notes = store.journal(kind="note", since=start.at, startswith=prefix, limit=1)
    return notes[-1] if notes and notes[-1].id > start.id else None


def tag_baseline(store: Store, tag: str) -> ExperimentRecord | None:
    """The tag-start baseline: the tag's latest kept baseline experiment, or None."""
    rows = store.find_experiments(tag=tag, kind="baseline", status=Outcome.KEEP, limit=1)
    return rows[-1] if rows else None


def confirmations(store: Store, tag: str | None = None, since: str | None = None) -> list[ConfirmationRecord]:
    """The confirmations of a tag (every tag when None), oldest first; ``since``: finished at or after."""
    t = m.confirmations
    q = select(t).order_by(t.c.id)
    if tag is not None:
        q = q.where(t.c.tag == tag)
    if since is not None:
        q = q.where(t.c.finished_at >= since)
    with store._ro() as conn:  # noqa: SLF001
        return [ConfirmationRecord.from_row(r._mapping) for r in conn.execute(q)]


def used_seeds(store: Store, tag: str) -> list[int]:
    """Every seed any run of the tag's experiments used (decisions and confirmations), ascending."""
    r, e = m.runs, m.experiments
    q = (select(r.c.seed).distinct().join(e, e.c.id == r.c.experiment_id)
         .where(e.c.tag == tag, r.c.seed.is_not(None)).order_by(r.c.seed))
    with store._ro() as conn:  # noqa: SLF001
        return [int(s) for (s,) in conn.execute(q)]


def transfers(store: Store, tag: str | None = None) -> list[Any]:
    """The transfer checks of a tag (every tag when None), oldest first (looper.store.transfers)."""
    from looper.store.transfers import transfer_records

    return transfer_records(store, tag)


def gpu_run_peak_mb(store: Store, tag: str) -> float | None:
    """The largest GPU memory one run of the tag took (train.py's ``peak_memory_mb`` of runs on cuda); None
    before any run of the tag trained on a GPU."""
    r, t = m.runs, m.experiments
    peak = func.json_extract(r.c.train_json, "$.peak_memory_mb")
    q = (select(func.max(peak)).select_from(r.join(t, r.c.experiment_id == t.c.id))
         .where(t.c.tag == tag, func.json_extract(r.c.train_json, "$.device") == "cuda"))
    with store._ro() as conn:  # noqa: SLF001 - queries are part of the store package
        value = conn.execute(q).scalar()
    return float(value) if value is not None else None


def run_gpu_names(store: Store, exp_id: int) -> set[str]:
    """The names of the GPUs an experiment's runs trained on, as the harness's NVML sampler read them
    (``harness_gpu.name`` of runs on cuda); empty where none was read (CPU runs, a SLURM node's)."""
    r = m.runs
    name = func.json_extract(r.c.train_json, "$.harness_gpu.name")
    q = select(name).where(r.c.experiment_id == exp_id, func.json_extract(r.c.train_json, "$.device") == "cuda",
                           name.is_not(None)).distinct()
    with store._ro() as conn:  # noqa: SLF001 - queries are part of the store package
        return {str(n) for (n,) in conn.execute(q) if n}


def run_figures(store: Store, tag: str | None = None, since: str | None = None) -> dict[int, list[dict[str, Any]]]:
    """Each experiment's runs as plain rows, in one query: role, seed, score, the device train.py trained on,
    train.py's own peak memory, and the harness's GPU figures of the run (utilisation, busy share, the
    device's peak memory while it ran; None on a CPU)."""
    r, t = m.runs, m.experiments
    j = func.json_extract
    cols = (r.c.experiment_id, r.c.role, r.c.seed, r.c.score, j(r.c.train_json, "$.device"),
            j(r.c.train_json, "$.peak_memory_mb"), j(r.c.train_json, "$.harness_gpu.mean_utilization_pct"),
            j(r.c.train_json, "$.harness_gpu.busy_pct"), j(r.c.train_json, "$.harness_gpu.peak_memory_mb"))
    q = select(*cols).select_from(r.join(t, r.c.experiment_id == t.c.id))
    if tag is not None:
        q = q.where(t.c.tag == tag)
    if since is not None:
        q = q.where(t.c.started_at >= since)
    out: dict[int, list[dict[str, Any]]] = {}
    with store._ro() as conn:  # noqa: SLF001 - queries are part of the store package
        for eid, role, seed, score, device, train_peak, util, busy, gpu_peak in conn.execute(q.order_by(r.c.id)):
            out.setdefault(int(eid), []).append({
                "role": role, "seed": seed, "score": score, "device": device, "train_peak_memory_mb": train_peak,
                "gpu_utilization_pct": util, "gpu_busy_pct": busy, "gpu_peak_memory_mb": gpu_peak})
    return out


def run_clock(store: Store, tag: str | None = None, since: str | None = None,
              until: str | None = None) -> list[tuple[str | None, ...]]:
    """The clock readings of ``tag``'s runs that started in ``since`` .. ``until`` (one daemon's night: a later
    command's runs are not its), in one query: (started, training started, training ended, its last reading:
    evaluated, else finished), ISO times or None (looper.core.run.phases.night_cover reads them)."""
    r, t = m.runs, m.experiments
    q = (select(r.c.started_at, r.c.train_started_at, r.c.train_ended_at, func.coalesce(r.c.eval_ended_at, r.c.finished_at))
         .select_from(r.join(t, r.c.experiment_id == t.c.id)))
    if tag is not None:
        q = q.where(t.c.tag == tag)
    if since is not None:
        q = q.where(r.c.started_at >= since)
    if until is not None:
        q = q.where(r.c.started_at < until)
    with store._ro() as conn:  # noqa: SLF001 - queries are part of the store package
        return [tuple(row) for row in conn.execute(q.order_by(r.c.id))]
