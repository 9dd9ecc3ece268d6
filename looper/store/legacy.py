"""The store's first API: positional writes and dict reads, kept for the loop's remaining
call sites. Each method is a thin wrapper over the typed one it names; a dict is
``record.to_dict()``. Delete this mixin once nothing calls it (``git grep`` the names).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping
from typing import Any

from looper.core.verdict import Outcome, Verdict

__all__ = ["DictMethods"]


class DictMethods:
    """Mixed into :class:`looper.store.Store`; every method delegates to the typed API."""

    __slots__ = ()

    def create_experiment(
        self,
        tag: str,
        kind: str,
        parent: str | None,
        seed: int | None,
        config: Mapping[str, Any],
        description: str = "",
        rationale: str = "",
        source: str = "",
        diff: str = "",
        worker: str = "",
    ) -> int:
        """Older positional form of :meth:`start_experiment`."""
        return self.start_experiment(tag=tag, kind=kind, config=config, parent=parent, seed=seed,
                                     description=description, rationale=rationale, source=source, diff=diff,
                                     worker=worker)

    def finish_experiment(
        self,
        exp_id: int,
        status: Outcome | str,
        score: float | None,
        metrics: Mapping[str, Any] | None,
        class_metrics: Mapping[str, Mapping[str, Any]] | None,
        verdict: Verdict | Mapping[str, Any] | None,
        blocking: Iterable[str],
        **fields: Any,
    ) -> None:
        """Older positional form of :meth:`record_outcome` that refuses (rather than drops) a
        score on an unmeasured outcome."""
        self._finish(exp_id, Outcome(status), score, metrics, class_metrics, verdict, blocking, fields)

    def get_experiment(self, exp_id: int) -> dict[str, Any]:
        return self.experiment(exp_id).to_dict()

    def class_metrics(self, exp_id: int) -> dict[str, dict[str, Any]]:
        return {name: cm.figures() for name, cm in self.class_scores(exp_id).items()}

    def experiments(
        self,
        tag: str | None = None,
        status: Outcome | str | Iterable[Outcome | str] | None = None,
        since: str | _dt.datetime | None = None,
        until: str | _dt.datetime | None = None,
        kind: str | Iterable[str] | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """:meth:`find_experiments` as dicts."""
        return [r.to_dict() for r in self.find_experiments(tag=tag, status=status, since=since, until=until,
                                                           kind=kind, limit=limit)]

    def best_experiment(self, tag: str) -> dict[str, Any] | None:
        best = self.best(tag)
        return None if best is None else best.to_dict()

    def running_experiments(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.open_experiments()]

    def runs(self, experiment_id: int) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.run_records(experiment_id)]

    def events(
        self,
        tag: str | None = None,
        since: str | _dt.datetime | None = None,
        kind: str | Iterable[str] | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """:meth:`journal` as dicts."""
        return [e.to_dict() for e in self.journal(tag=tag, since=since, kind=kind, limit=limit)]

    def get_tag(self, tag: str) -> dict[str, Any] | None:
        rec = self.tag_record(tag)
        return None if rec is None else rec.to_dict()
