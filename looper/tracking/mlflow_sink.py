"""MLflow through its own client: one MLflow run per settled experiment (key: the tag
``looper.experiment_id``), its recorded runs nested (``mlflow.parentRunId``), idempotently.

A run is written whole or not at all as far as a reader can tell: its tag ``looper.complete`` is
set last; a run found without it (a write cut off by a crash or a timeout) is deleted and written
again. A run found complete is left alone: writing a database twice changes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from looper.core.verdicts import trackname
from looper.tracking.tracked import KEY, RUN_KEY, Tracked, as_text, experiment_run, seed_runs

COMPLETE = "looper.complete"
SKIPPED = "looper.skipped_names"  # names no key MLflow accepts could be made for (said on the run)


def resolve_uri(uri: str, root: Path) -> str:
    """A relative ``sqlite:///file.db`` is relative to the workspace, not the process's folder."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        return prefix + str((root / uri[len(prefix):]).resolve())
    return uri


def bound_http(timeout: float) -> None:
    """MLflow's HTTP client: one try, at most ``timeout`` seconds a request (set before it is used;
    a value the person set in the environment wins)."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, int(timeout))))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")


class MlflowSink:
    """Writes experiments of one store to one MLflow tracking URI."""

    def __init__(self, uri: str, root: Path, experiment_name: str = "", timeout: float = 5.0) -> None:
        self.uri = resolve_uri(uri, root)
        self.root = root
        self.experiment_name = experiment_name
        bound_http(timeout)
        try:
            from mlflow import MlflowClient
        except ImportError as exc:
            raise RuntimeError(f"MLflow is not installed here ({exc}): pip install 'looper[tracking]'") from exc

        self.client = MlflowClient(tracking_uri=self.uri)
        self._experiments: dict[str, str] = {}

    def experiment_id(self, tag: str) -> str:
        name = self.experiment_name or f"looper/{tag}"
        if name not in self._experiments:
            found = self.client.get_experiment_by_name(name)
            if found is not None:
                self._experiments[name] = found.experiment_id
            else:
                where = None
                if self.uri.startswith("sqlite:///"):  # artifacts beside the database, not in the process's folder
                    where = (Path(self.uri[len("sqlite:///"):]).parent / "mlartifacts" / name.replace("/", "_")).as_uri()
                self._experiments[name] = self.client.create_experiment(name, artifact_location=where)
        return self._experiments[name]

    def _find(self, eid: str, key: str, value: str, parent: str | None = None) -> list[Any]:
        flt = f"tags.`{key}` = '{value}'" + (f" and tags.`mlflow.parentRunId` = '{parent}'" if parent else "")
        return list(self.client.search_runs([eid], filter_string=flt, max_results=10))

    def write(self, store: Any, exp_id: int) -> bool:
        """Write experiment ``exp_id`` and its runs; False when nothing was missing (written before, complete,
        with every run it has now)."""
        exp = store.experiment(exp_id)
        eid = self.experiment_id(exp.tag)
        found = [r for r in self._find(eid, KEY, str(exp_id)) if "mlflow.parentRunId" not in r.data.tags]
        done = [r for r in found if r.data.tags.get(COMPLETE) == "1"]
        if done:  # there already: only runs recorded since (the best re-run on a seed it lacked, a confirmation)
            parent = done[0].info.run_id
            have = {r.data.tags.get(RUN_KEY) for r in self.client.search_runs(
                [eid], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'", max_results=5000)}
            new = [t for t in seed_runs(store, exp) if t.tags[RUN_KEY] not in have]
            for t in new:
                self._run(eid, t, parent)
            return bool(new)
        for r in found:  # a write that was cut off: start it again
            self.client.delete_run(r.info.run_id)
        parent = self._run(eid, experiment_run(store, self.root, exp))
        for seed in seed_runs(store, exp):
            self._run(eid, seed, parent)
        self.client.set_tag(parent, COMPLETE, "1")
        return True

    def _run(self, eid: str, t: Tracked, parent: str | None = None) -> str:
        from mlflow.entities import Metric, Param

        tags = dict(t.tags)
        if parent:
            tags["mlflow.parentRunId"] = parent
        # a name MLflow refuses (a class "valve (2-way)") is cleaned, or skipped and named: never a refused
        # batch that would stop this experiment's tracking and every one queued after it (issue 48)
        metrics, skipped = trackname.keys(t.metrics)
        params, skipped_params = trackname.keys(t.params)
        if skipped or skipped_params:
            tags[SKIPPED] = ", ".join([*skipped, *skipped_params])[:4000]
        run = self.client.create_run(eid, start_time=t.start_ms or None, tags=tags, run_name=t.name)
        rid = run.info.run_id
        ts = t.end_ms or t.start_ms or 0
        self.client.log_batch(rid, metrics=[Metric(k, v, ts, 0) for k, v in sorted(metrics.items())],
                              params=[Param(k, v[:6000]) for k, v in sorted(params.items())])
        for name, value in sorted(t.artifacts.items()):
            self.client.log_text(rid, as_text(value), name)
        self.client.set_terminated(rid, status=t.status, end_time=t.end_ms)
        return rid
