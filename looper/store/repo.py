"""The repository over ``experiments.db``: every state change is ONE transaction.

A daemon killed at any instant leaves either the state before a call or the state after
it, never half of it (SQLite WAL, ``BEGIN IMMEDIATE`` for writes, foreign keys on).

Reads hand out frozen records (:mod:`looper.store.records`: ``experiment``,
``find_experiments``, ``best``, ``journal``, ``run_records``, ``tag_record``,
``class_scores``); writes take keyword arguments (``start_experiment``, ``record_outcome``).
JSON columns come back decoded under their name without the ``_json`` suffix
(``config_json`` -> ``config``, ``metrics_json`` -> ``metrics``, ...); the write methods take
the same names.
Timestamps are ISO-8601 UTC text (``2025-01-31T02:03:04.123456+00:00``).
The journal's methods live in :mod:`looper.store.journal` and a tag's in :mod:`looper.store.tags`,
mixed in; what goes into a row (and the engine) in :mod:`looper.store.values`.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Row, Select, and_, insert, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

import looper.store.models as m
from looper.core.verdicts.verdict import Outcome, Verdict
from looper.store.journal import JournalRows
from looper.store.migrations import LATEST_VERSION, StoreError, current_version, migrate
from looper.store.records import ClassMetrics, ExperimentRecord, RunRecord
from looper.store.tags import TagRows

__all__ = [
    "DB_NAME", "LATEST_VERSION", "UPDATABLE_FIELDS", "ExperimentNotFound", "Store", "StoreError",
    "experiment_filter", "find_secrets", "open_engine", "to_utc_iso", "utc_now",
]
from looper.store.values import (
    DB_NAME,
    UPDATABLE_FIELDS,
    ExperimentNotFound,
    _check_score,
    _class_rows,
    _dumps,
    _iso,
    _refuse_secrets,
    _verdict_blocking,
    experiment_filter,
    find_secrets,
    open_engine,
    to_utc_iso,
    utc_now,
)


class Store(JournalRows, TagRows):
    """``experiments.db``: opened and migrated to the latest schema on construction.

    ``path`` is the database file, or a workspace directory (then ``experiments.db`` in it).
    """

    def __init__(self, path: str | Path) -> None:
        p = Path(path)
        if p.is_dir():
            p = p / DB_NAME
        self.path = p
        if not p.parent.is_dir():
            raise StoreError(f"{p}: folder {p.parent} does not exist")
        try:
            self._read, self._write_engine = open_engine(p)
            self.schema_version = migrate(self._write_engine, where=str(p))
        except StoreError:
            raise
        except DBAPIError as exc:
            raise StoreError(f"{p}: cannot open the database: {exc.orig}") from exc

    # -- plumbing ----------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        return self._read

    def close(self) -> None:
        self._read.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        """One write transaction (BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any error)."""
        try:
            with self._write_engine.begin() as conn:
                yield conn
        except IntegrityError as exc:
            raise StoreError(f"{self.path}: write refused by the schema: {exc.orig}") from exc
        except OperationalError as exc:
            raise StoreError(f"{self.path}: write failed: {exc.orig}") from exc

    @contextmanager
    def _ro(self) -> Iterator[Connection]:
        try:
            with self._read.begin() as conn:
                yield conn
        except OperationalError as exc:
            raise StoreError(f"{self.path}: read failed: {exc.orig}") from exc

    def _newest(self, q: Select, id_col: Any, limit: int | None) -> list[Row]:
        """The rows of ``q``, the newest ``limit`` by ``id_col`` (all when None), in id order."""
        q = q.order_by(id_col.desc())
        if limit is not None:
            q = q.limit(limit)
        with self._ro() as conn:
            return list(reversed(conn.execute(q).all()))

    def version(self) -> int:
        with self._ro() as conn:
            return current_version(conn)

    # -- experiments -----------------------------------------------------------------

    def start_experiment(
        self,
        *,
        tag: str,
        kind: str,
        config: Mapping[str, Any],
        parent: str | None = None,
        seed: int | None = None,
        description: str = "",
        rationale: str = "",
        source: str = "",
        diff: str = "",
        worker: str = "",
    ) -> int:
        """A new experiment, status ``running``; returns its id (ids only rise)."""
        if kind not in m.EXPERIMENT_KINDS:
            raise ValueError(f"experiment kind must be one of {', '.join(m.EXPERIMENT_KINDS)}, got {kind!r}")
        if not tag:
            raise ValueError("experiment tag must not be empty")
        _refuse_secrets(config)
        values = {
            "tag": tag,
            "kind": kind,
            "parent": parent,
            "seed": seed,
            "config_json": _dumps(dict(config), "config"),
            "description": description,
            "rationale": rationale,
            "source": source,
            "diff": diff,
            "worker": worker,
            "status": Outcome.RUNNING.value,
            "phase": "",
            "blocking_json": "[]",
            "started_at": utc_now(),
        }
        with self._tx() as conn:
            result = conn.execute(insert(m.experiments).values(**values))
            return int(result.inserted_primary_key[0])

    def _encode_fields(self, fields: Mapping[str, Any], where: str) -> dict[str, Any]:
        unknown = sorted(set(fields) - UPDATABLE_FIELDS)
        if unknown:
            raise ValueError(
                f"{where}: cannot set {', '.join(unknown)}; settable fields: {', '.join(sorted(UPDATABLE_FIELDS))}"
            )
        out: dict[str, Any] = {}
        for key, value in fields.items():
            if key == "config":
                if value is None:
                    raise ValueError(f"{where}: config must be a dict, not None")
                _refuse_secrets(value)
            if key in ("started_at", "finished_at"):
                out[key] = to_utc_iso(value, f"{where}: {key}")
                continue
            column = f"{key}_json" if f"{key}_json" in m.experiments.c else key
            if column.endswith("_json"):
                if column == "blocking_json":
                    value = list(value or [])
                out[column] = _dumps(value, key)
            else:
                out[column] = value
        return out

    def _open_update(self, conn: Connection, exp_id: int, values: dict[str, Any], action: str) -> None:
        """UPDATE an experiment that is still pending/running, or raise naming why not."""
        result = conn.execute(
            update(m.experiments)
            .where(and_(m.experiments.c.id == exp_id, m.experiments.c.status.in_(m.OPEN_STATUSES)))
            .values(**values)
        )
        if result.rowcount == 1:
            return
        status = conn.execute(select(m.experiments.c.status).where(m.experiments.c.id == exp_id)).scalar()
        if status is None:
            raise ExperimentNotFound(f"{self.path}: no experiment {exp_id} (cannot {action})")
        raise StoreError(
            f"{self.path}: experiment {exp_id} already finished as {status}; refusing to {action}"
        )

    def set_phase(self, exp_id: int, phase: str) -> bool:
        """Record the live phase text; False (and nothing written) once the experiment finished."""
        with self._tx() as conn:
            result = conn.execute(
                update(m.experiments)
                .where(and_(m.experiments.c.id == exp_id, m.experiments.c.status.in_(m.OPEN_STATUSES)))
                .values(phase=phase)
            )
            if result.rowcount == 0:
                exists = conn.execute(select(m.experiments.c.id).where(m.experiments.c.id == exp_id)).scalar()
                if exists is None:
                    raise ExperimentNotFound(f"{self.path}: no experiment {exp_id} (cannot set phase)")
            return result.rowcount == 1

    def update_experiment(self, exp_id: int, **fields: Any) -> None:
        """Set fields of a running experiment (see ``UPDATABLE_FIELDS``); a finished one is final."""
        values = self._encode_fields(fields, f"experiment {exp_id}")
        if not values:
            return
        with self._tx() as conn:
            self._open_update(conn, exp_id, values, "update it")

    def record_outcome(
        self,
        exp_id: int,
        *,
        outcome: Outcome | str,
        verdict: Verdict | Mapping[str, Any] | None = None,
        score: float | None = None,
        metrics: Mapping[str, Any] | None = None,
        class_metrics: Mapping[str, Mapping[str, Any]] | None = None,
        blocking: Iterable[str] | None = None,
        **fields: Any,
    ) -> None:
        """Write how an experiment ended, in ONE transaction: the outcome, its score, metrics,
        per-class metrics, verdict, blocking reasons and any other fields (``UPDATABLE_FIELDS``,
        ``finished_at``; default now).

        The one place that decides what an outcome may carry: the score and the per-class
        rows are stored only when ``outcome.has_score`` (otherwise they are dropped: nothing
        was measured that counts); a ``keep`` without a score is refused. ``class_metrics``
        defaults to ``metrics["classes"]``; ``blocking`` defaults to the verdict's reasons.
        Refuses a second finish of the same experiment.
        """
        outcome = Outcome(outcome)
        where = f"experiment {exp_id}"
        if not outcome.is_terminal:
            raise ValueError(f"{where}: finish with a final outcome, not {outcome.value}")
        if outcome.has_score:
            if class_metrics is None and metrics is not None and isinstance(metrics.get("classes"), Mapping):
                class_metrics = metrics["classes"]
        else:
            score, class_metrics = None, None
        score = _check_score(outcome, score, where)
        blocking = [str(b) for b in (_verdict_blocking(verdict) if blocking is None else blocking)]
        fields = dict(fields)
        finished_at = fields.pop("finished_at", None)
        values = self._encode_fields(fields, where)
        values.update(
            status=outcome.value,
            score=score,
            metrics_json=_dumps(None if metrics is None else dict(metrics), "metrics"),
            verdict_json=_dumps(verdict if verdict is None or isinstance(verdict, Verdict) else dict(verdict),
                                "verdict"),
            blocking_json=_dumps(blocking, "blocking"),
            finished_at=utc_now() if finished_at is None else to_utc_iso(finished_at, f"{where}: finished_at"),
        )
        rows = _class_rows(exp_id, class_metrics or {})
        with self._tx() as conn:
            self._open_update(conn, exp_id, values, f"finish it as {outcome.value}")
            if rows:
                conn.execute(insert(m.class_metrics), rows)

    def mark_interrupted(self, exp_id: int, reason: str) -> bool:
        """Finish a pending/running experiment as ``interrupted`` (score NULL) and journal an
        ``interrupted`` event, in one transaction. False when it had already finished."""
        with self._tx() as conn:
            tag = conn.execute(select(m.experiments.c.tag).where(m.experiments.c.id == exp_id)).scalar()
            if tag is None:
                raise ExperimentNotFound(f"{self.path}: no experiment {exp_id} (cannot mark it interrupted)")
            result = conn.execute(
                update(m.experiments)
                .where(and_(m.experiments.c.id == exp_id, m.experiments.c.status.in_(m.OPEN_STATUSES)))
                .values(
                    status=Outcome.INTERRUPTED.value,
                    score=None,
                    blocking_json=_dumps([reason], "blocking"),
                    finished_at=utc_now(),
                )
            )
            if result.rowcount == 0:
                return False
            conn.execute(
                insert(m.events).values(
                    at=utc_now(), tag=tag, experiment_id=exp_id, kind="interrupted", message=reason,
                    data_json=None,
                )
            )
            return True

    # reads: frozen records

    def experiment(self, exp_id: int) -> ExperimentRecord:
        """One experiment; :class:`ExperimentNotFound` when there is none with that id."""
        with self._ro() as conn:
            row = conn.execute(select(m.experiments).where(m.experiments.c.id == exp_id)).first()
        if row is None:
            raise ExperimentNotFound(f"{self.path}: no experiment {exp_id}")
        return ExperimentRecord.from_row(row._mapping)

    def class_scores(self, exp_id: int) -> dict[str, ClassMetrics]:
        """The per-class figures of one experiment, by class name (alphabetical)."""
        with self._ro() as conn:
            rows = conn.execute(
                select(m.class_metrics)
                .where(m.class_metrics.c.experiment_id == exp_id)
                .order_by(m.class_metrics.c.class_name)
            ).all()
        return {r.class_name: ClassMetrics.from_row(r._mapping) for r in rows}

    def find_experiments(
        self,
        *,
        tag: str | None = None,
        status: Outcome | str | Iterable[Outcome | str] | None = None,
        since: str | _dt.datetime | None = None,
        until: str | _dt.datetime | None = None,
        kind: str | Iterable[str] | None = None,
        limit: int | None = None,
    ) -> list[ExperimentRecord]:
        """Experiments ordered by id. ``since``/``until`` bound ``started_at`` (inclusive /
        exclusive); ``limit`` keeps the newest N (still in id order)."""
        t = m.experiments
        q = experiment_filter(select(t), tag=tag, status=status, since=since, until=until, kind=kind)
        return [ExperimentRecord.from_row(r._mapping) for r in self._newest(q, t.c.id, limit)]

    def best(self, tag: str) -> ExperimentRecord | None:
        """The tag's latest ``keep`` (baseline or candidate), else its latest measured
        baseline, else None."""
        t = m.experiments
        base = select(t).where(t.c.tag == tag).order_by(t.c.id.desc()).limit(1)
        with self._ro() as conn:
            row = conn.execute(
                base.where(t.c.status == Outcome.KEEP.value, t.c.kind.in_(("baseline", "candidate")))
            ).first()
            if row is None:
                row = conn.execute(
                    base.where(t.c.kind == "baseline", t.c.status.in_(m.SCORED_STATUSES))
                ).first()
        return None if row is None else ExperimentRecord.from_row(row._mapping)

    def open_experiments(self) -> list[ExperimentRecord]:
        """Every pending or running experiment, all tags, by id."""
        return self.find_experiments(status=m.OPEN_STATUSES)

    def run_records(self, experiment_id: int) -> list[RunRecord]:
        """The runs of one experiment, by id."""
        with self._ro() as conn:
            rows = conn.execute(
                select(m.runs).where(m.runs.c.experiment_id == experiment_id).order_by(m.runs.c.id)
            ).all()
        return [RunRecord.from_row(r._mapping) for r in rows]

    def recent_signatures(self, tag: str, n: int) -> list[str | None]:
        """Failure signatures of the tag's last ``n`` finished candidates, newest last
        (None for one that did not fail). Interrupted ones are skipped: the daemon, not
        the change, ended them."""
        if n <= 0:
            return []
        t = m.experiments
        finished = [v for v in Outcome.values() if v not in m.OPEN_STATUSES and v != Outcome.INTERRUPTED.value]
        q = (
            select(t.c.failure_signature)
            .where(t.c.tag == tag, t.c.kind == "candidate", t.c.status.in_(finished))
            .order_by(t.c.id.desc())
            .limit(n)
        )
        with self._ro() as conn:
            rows = conn.execute(q).all()
        return [r[0] for r in reversed(rows)]

    # -- runs -------------------------------------------------------------------------

    def add_run(
        self,
        experiment_id: int,
        role: str,
        seed: int | None = None,
        exit_code: int | None = None,
        score: float | None = None,
        metrics: Mapping[str, Any] | None = None,
        train: Mapping[str, Any] | None = None,
        log_tail: str = "",
        started_at: str | _dt.datetime | None = None,
        finished_at: str | _dt.datetime | None = None,
        weights_path: str | None = None,
        weights_sha256: str | None = None,
        train_started_at: str | _dt.datetime | None = None,
        train_ended_at: str | _dt.datetime | None = None,
        eval_ended_at: str | _dt.datetime | None = None,
    ) -> int:
        """Record one training+evaluation run of an experiment; returns the run id. ``started_at``: the
        launch (default now); the phase times (None: not reached) split it (looper.core.run.phases).
        ``weights_path`` (relative to the workspace) and ``weights_sha256``: the weights the run left, as
        hashed now."""
        if role not in m.RUN_ROLES:
            raise ValueError(f"run role must be one of {', '.join(m.RUN_ROLES)}, got {role!r}")
        if score is not None and (isinstance(score, bool) or not math.isfinite(score)):
            raise ValueError(f"run score must be a finite number or None, got {score!r}")
        now = utc_now()
        values = {
            "experiment_id": experiment_id,
            "role": role,
            "seed": seed,
            "exit_code": exit_code,
            "score": score,
            "metrics_json": _dumps(None if metrics is None else dict(metrics), "metrics"),
            "train_json": _dumps(None if train is None else dict(train), "train"),
            "log_tail": log_tail,
            "started_at": _iso(started_at, "started_at") or now,
            "finished_at": _iso(finished_at, "finished_at") or now,
            "weights_path": weights_path,
            "weights_sha256": weights_sha256,
            "train_started_at": _iso(train_started_at, "train_started_at"),
            "train_ended_at": _iso(train_ended_at, "train_ended_at"),
            "eval_ended_at": _iso(eval_ended_at, "eval_ended_at"),
        }
        with self._tx() as conn:
            self._require_experiment(conn, experiment_id, "add a run")
            return int(conn.execute(insert(m.runs).values(**values)).inserted_primary_key[0])

    def _require_experiment(self, conn: Connection, exp_id: int, action: str) -> None:
        if conn.execute(select(m.experiments.c.id).where(m.experiments.c.id == exp_id)).scalar() is None:
            raise ExperimentNotFound(f"{self.path}: no experiment {exp_id} (cannot {action})")

    def add_confirmation(self, *, tag: str, experiment_id: int | None, baseline_id: int | None, trigger: str,
                         status: str, score_key: str, planned: int, seeds: list[int], scores: list[float],
                         baseline_scores: list[float], headline: str, runs: int, seconds: float,
                         started_at: str, diff: float | None = None, low: float | None = None,
                         high: float | None = None, selection_diff: float | None = None,
                         flagged: bool = False) -> int:
        """Record one confirmation of a tag's best on fresh seeds (looper.night.confirm); returns its id."""
        values = {"tag": tag, "experiment_id": experiment_id, "baseline_id": baseline_id, "trigger": trigger,
                  "status": status, "score_key": score_key, "planned": planned,
                  "seeds_json": _dumps(list(seeds), "seeds"), "scores_json": _dumps(list(scores), "scores"),
                  "baseline_scores_json": _dumps(list(baseline_scores), "baseline_scores"), "diff": diff,
                  "low": low, "high": high, "selection_diff": selection_diff, "flagged": int(bool(flagged)),
                  "headline": headline, "runs": runs, "seconds": max(0.0, float(seconds)),
                  "started_at": _iso(started_at, "started_at"), "finished_at": utc_now()}
        with self._tx() as conn:
            return int(conn.execute(insert(m.confirmations).values(**values)).inserted_primary_key[0])
