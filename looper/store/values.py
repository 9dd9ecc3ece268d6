"""What goes into a row of ``experiments.db`` and how the database is opened: times in UTC, JSON columns,
secrets refused, scores checked, class rows, the shared experiment filter, the engine (WAL, busy timeout)."""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Select, create_engine, event

import looper.store.models as m
from looper.core.verdicts.verdict import Outcome, Verdict
from looper.errors import UsageError
from looper.store.migrations import StoreError

DB_NAME = "experiments.db"
BUSY_TIMEOUT_MS = 30_000

_SECRET_KEY_RE = re.compile(r"(api[_-]?key|token|password|passwd|secret|credential)", re.IGNORECASE)

#: Experiment fields :meth:`Store.update_experiment` (and ``record_outcome``'s
#: ``**fields``) may set. Status, score, tag, kind and times have their own methods.
UPDATABLE_FIELDS: frozenset[str] = frozenset(
    {
        "commit", "parent", "description", "rationale", "source", "diff", "config", "seed",
        "metrics", "verdict", "blocking", "failure_signature", "exit_code", "phase", "worker",
        "agent_seconds", "train_seconds", "eval_seconds", "harness_seconds", "gpu", "train",
        "started_at",
    }
)
_CLASS_INT = ("tp", "fp", "fn", "support")
_CLASS_FLOAT = ("precision", "recall", "f1", "count_error")


class ExperimentNotFound(UsageError, LookupError):
    """No experiment with that id."""


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds")


def to_utc_iso(value: str | _dt.datetime, what: str) -> str:
    """A timezone-aware datetime or ISO-8601 string -> the stored form (UTC, microseconds),
    so that stored times compare correctly as text. Naive times are refused."""
    if isinstance(value, str):
        try:
            parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValueError(f"{what}: not an ISO-8601 time: {value!r}") from exc
    elif isinstance(value, _dt.datetime):
        parsed = value
    else:
        raise TypeError(f"{what}: expected an ISO-8601 string or a datetime, got {type(value).__name__}")
    if parsed.tzinfo is None:
        raise ValueError(f"{what}: a time without a timezone is ambiguous: {value!r}")
    return parsed.astimezone(_dt.UTC).isoformat(timespec="microseconds")


def _iso(value: str | _dt.datetime | None, what: str) -> str | None:
    """For stored times: None stays None, anything else must be timezone-aware."""
    return None if value is None else to_utc_iso(value, what)


def _bound(value: str | _dt.datetime, what: str) -> str:
    """For filters: an aware time is normalised; a bare date or prefix string is compared as text."""
    try:
        return to_utc_iso(value, what)
    except ValueError:
        if isinstance(value, str):
            return value
        raise


def _dumps(value: Any, column: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, Verdict):
        value = value.to_json_dict()
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{column}: cannot store as JSON: {exc}") from exc


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if hasattr(obj, "value") and isinstance(obj.value, str):  # enums
        return obj.value
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def find_secrets(value: Any, path: str = "config") -> list[str]:
    """Paths of keys named like a secret (api_key, token, password...) with a non-empty
    string value. Keys ending in ``_env`` hold a variable's NAME and are allowed."""
    found: list[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            key = str(k)
            sub = f"{path}.{key}"
            if (
                _SECRET_KEY_RE.search(key)
                and not key.lower().endswith("_env")
                and isinstance(v, str)
                and v.strip()
            ):
                found.append(sub)
            else:
                found.extend(find_secrets(v, sub))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found.extend(find_secrets(v, f"{path}[{i}]"))
    return found


def _refuse_secrets(config: Any) -> None:
    found = find_secrets(config)
    if found:
        raise ValueError(
            "refusing to store a secret in experiments.db: "
            + ", ".join(found)
            + " (store Config.redacted_dict(), which keeps only the environment variable's name)"
        )


def _check_score(status: Outcome, score: float | None, where: str) -> float | None:
    if score is None:
        if status is Outcome.KEEP:
            raise ValueError(f"{where}: a keep outcome must carry the score it was kept for")
        return None
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise TypeError(f"{where}: score must be a number or None, got {type(score).__name__}")
    if not math.isfinite(score):
        raise ValueError(f"{where}: score must be finite, got {score!r}")
    return float(score)


def open_engine(path: Path) -> tuple[Engine, Engine]:
    """(read engine, write engine) sharing one pool. Every connection: WAL, foreign keys
    on, a busy timeout; transactions begin explicitly (``BEGIN`` / ``BEGIN IMMEDIATE``)."""
    engine = create_engine(
        f"sqlite:///{path}",
        connect_args={"timeout": BUSY_TIMEOUT_MS / 1000, "isolation_level": None},
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = cur.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{path}: SQLite refused WAL mode (journal_mode is {mode!r})")
            cur.execute("PRAGMA foreign_keys = ON")
            cur.execute("PRAGMA synchronous = FULL")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(conn.get_execution_options().get("looper_begin", "BEGIN"))

    return engine, engine.execution_options(looper_begin="BEGIN IMMEDIATE")


def experiment_filter(
    q: Select[Any],
    *,
    tag: str | None = None,
    status: Outcome | str | Iterable[Outcome | str] | None = None,
    since: str | _dt.datetime | None = None,
    until: str | _dt.datetime | None = None,
    kind: str | Iterable[str] | None = None,
) -> Select[Any]:
    """``q`` restricted to experiments of a tag, outcome(s), kind(s), and ``started_at`` in
    ``[since, until)``: the one filter every experiment query shares."""
    t = m.experiments
    if tag is not None:
        q = q.where(t.c.tag == tag)
    if status is not None:
        q = q.where(t.c.status.in_(_outcome_values(status)))
    if kind is not None:
        q = q.where(t.c.kind.in_([kind] if isinstance(kind, str) else list(kind)))
    if since is not None:
        q = q.where(t.c.started_at >= _bound(since, "since"))
    if until is not None:
        q = q.where(t.c.started_at < _bound(until, "until"))
    return q


def _verdict_blocking(verdict: Verdict | Mapping[str, Any] | None) -> list[str]:
    if verdict is None:
        return []
    if isinstance(verdict, Verdict):
        return list(verdict.blocking)
    return [str(b) for b in verdict.get("blocking") or []]


def _outcome_values(status: Outcome | str | Iterable[Outcome | str]) -> list[str]:
    items = [status] if isinstance(status, (str, Outcome)) else list(status)
    return [Outcome(s).value for s in items]


def _class_rows(exp_id: int, classes: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for name, vals in classes.items():
        if not isinstance(vals, Mapping):
            raise TypeError(f"class_metrics[{name!r}]: expected a dict, got {type(vals).__name__}")
        row: dict[str, Any] = {"experiment_id": exp_id, "class_name": str(name)}
        for key in _CLASS_INT:
            if vals.get(key) is None:
                raise ValueError(f"class_metrics[{name!r}]: missing {key}")
            row[key] = vals[key]
        for key in _CLASS_FLOAT:
            v = vals.get(key)
            if v is not None and isinstance(v, float) and math.isnan(v):
                raise ValueError(f"class_metrics[{name!r}].{key}: NaN; write null for 'not defined'")
            row[key] = v
        rows.append(row)
    return rows
