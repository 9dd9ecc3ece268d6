"""The tables of ``experiments.db`` as SQLAlchemy Core objects, for building queries.

The schema itself (CHECK constraints included) is created by the versioned migrations in
:mod:`looper.store.migrations`; these objects mirror the latest version and a test keeps
the two in step. Note that ``commit`` is an SQL keyword: raw SQL must quote it
(``SELECT "commit" FROM experiments``).
"""

from __future__ import annotations

from sqlalchemy import Column, Float, ForeignKey, Integer, MetaData, Table, Text

from looper.core.verdicts.verdict import Outcome

metadata = MetaData()

#: ``experiments.kind`` values.
EXPERIMENT_KINDS: tuple[str, ...] = ("baseline", "candidate", "rerun", "canary", "verify")
#: ``runs.role`` values.
RUN_ROLES: tuple[str, ...] = ("main", "rerun", "canary")
#: ``events.kind`` values.
EVENT_KINDS: tuple[str, ...] = (
    "start", "stop", "halt", "page", "page_failed", "recover", "interrupted", "stuck", "baseline", "note",
)
#: Outcomes whose experiment is not finished.
OPEN_STATUSES: tuple[str, ...] = tuple(o.value for o in Outcome if not o.is_terminal)
#: Outcomes that may carry a score (measured results).
SCORED_STATUSES: tuple[str, ...] = tuple(o.value for o in Outcome if o.has_score)

experiments = Table(
    "experiments",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("tag", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("commit", Text),
    Column("parent", Text),
    Column("status", Text, nullable=False),
    Column("score", Float),
    Column("description", Text, nullable=False),
    Column("rationale", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("diff", Text, nullable=False),
    Column("config_json", Text, nullable=False),
    Column("seed", Integer),
    Column("metrics_json", Text),
    Column("verdict_json", Text),
    Column("blocking_json", Text, nullable=False),
    Column("failure_signature", Text),
    Column("exit_code", Integer),
    Column("phase", Text, nullable=False),
    Column("worker", Text, nullable=False),
    Column("agent_seconds", Float),
    Column("train_seconds", Float),
    Column("eval_seconds", Float),
    Column("harness_seconds", Float),
    Column("gpu_json", Text),
    Column("train_json", Text),
    Column("started_at", Text, nullable=False),
    Column("finished_at", Text),
    sqlite_autoincrement=True,
)

class_metrics = Table(
    "class_metrics",
    metadata,
    Column("experiment_id", Integer, ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True),
    Column("class_name", Text, primary_key=True),
    Column("precision", Float),
    Column("recall", Float),
    Column("f1", Float),
    Column("count_error", Float),
    Column("tp", Integer, nullable=False),
    Column("fp", Integer, nullable=False),
    Column("fn", Integer, nullable=False),
    Column("support", Integer, nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("experiment_id", Integer, ForeignKey("experiments.id", ondelete="CASCADE"), nullable=False),
    Column("role", Text, nullable=False),
    Column("seed", Integer),
    Column("exit_code", Integer),
    Column("score", Float),
    Column("metrics_json", Text),
    Column("train_json", Text),
    Column("log_tail", Text, nullable=False),
    Column("started_at", Text, nullable=False),
    Column("finished_at", Text),
    Column("weights_path", Text),  # migration 4: the weights the run left, relative to the workspace
    Column("weights_sha256", Text),  # migration 4: their sha256 when the harness recorded the run
    # the run's phases (migration 6): its first optimizer step, train.py's exit, evaluate.py's exit
    Column("train_started_at", Text),
    Column("train_ended_at", Text),
    Column("eval_ended_at", Text),
    sqlite_autoincrement=True,
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("at", Text, nullable=False),
    Column("tag", Text, nullable=False),
    Column("experiment_id", Integer, ForeignKey("experiments.id", ondelete="SET NULL")),
    Column("kind", Text, nullable=False),
    Column("message", Text, nullable=False),
    Column("data_json", Text),
    sqlite_autoincrement=True,
)

tags = Table(
    "tags",
    metadata,
    Column("tag", Text, primary_key=True),
    Column("branch", Text, nullable=False),
    Column("base_commit", Text, nullable=False),
    Column("fixed_hashes_json", Text, nullable=False),
    Column("data_hash", Text, nullable=False),
    Column("noise_json", Text),
    Column("started_at", Text, nullable=False),
)

confirmations = Table(
    "confirmations",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("tag", Text, nullable=False),
    Column("experiment_id", Integer, ForeignKey("experiments.id", ondelete="SET NULL")),
    Column("baseline_id", Integer, ForeignKey("experiments.id", ondelete="SET NULL")),
    Column("trigger", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("score_key", Text, nullable=False),
    Column("planned", Integer, nullable=False),
    Column("seeds_json", Text, nullable=False),
    Column("scores_json", Text, nullable=False),
    Column("baseline_scores_json", Text, nullable=False),
    Column("diff", Float),
    Column("low", Float),
    Column("high", Float),
    Column("selection_diff", Float),
    Column("flagged", Integer, nullable=False),
    Column("headline", Text, nullable=False),
    Column("runs", Integer, nullable=False),
    Column("seconds", Float, nullable=False),
    Column("started_at", Text, nullable=False),
    Column("finished_at", Text, nullable=False),
    sqlite_autoincrement=True,
)

schema_version = Table(
    "schema_version",
    metadata,
    Column("version", Integer, primary_key=True),
    Column("description", Text, nullable=False),
    Column("applied_at", Text, nullable=False),
)
