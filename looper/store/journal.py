"""The journal: one row per event of a night (``events``), mixed into :class:`looper.store.repo.Store`,
whose transactions (``_tx``, ``_ro``) and experiment check it uses."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import insert, select

import looper.store.models as m
from looper.store.records import EventRecord
from looper.store.values import _bound, _dumps, _refuse_secrets, utc_now


class JournalRows:
    """``add_event`` appends; ``journal`` reads back (frozen :class:`EventRecord`)."""

    def add_event(
        self,
        tag: str,
        kind: str,
        message: str,
        experiment_id: int | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> int:
        """Append to the journal; returns the event id."""
        if kind not in m.EVENT_KINDS:
            raise ValueError(f"event kind must be one of {', '.join(m.EVENT_KINDS)}, got {kind!r}")
        if data is not None:
            _refuse_secrets(data)
        values = {
            "at": utc_now(),
            "tag": tag,
            "experiment_id": experiment_id,
            "kind": kind,
            "message": message,
            "data_json": _dumps(None if data is None else dict(data), "data"),
        }
        with self._tx() as conn:
            if experiment_id is not None:
                self._require_experiment(conn, experiment_id, f"journal a {kind} event")
            return int(conn.execute(insert(m.events).values(**values)).inserted_primary_key[0])

    def journal(
        self,
        *,
        tag: str | None = None,
        since: str | _dt.datetime | None = None,
        kind: str | Iterable[str] | None = None,
        limit: int | None = None,
        startswith: str | None = None,
    ) -> list[EventRecord]:
        """Journal entries by id; ``since`` bounds ``at`` (inclusive); ``startswith``: only messages that begin with
        it (taken literally: ``%`` and ``_`` are no wildcards); ``limit`` keeps the newest N."""
        t = m.events
        q = select(t)
        if tag is not None:
            q = q.where(t.c.tag == tag)
        if since is not None:
            q = q.where(t.c.at >= _bound(since, "since"))
        if kind is not None:
            q = q.where(t.c.kind.in_([kind] if isinstance(kind, str) else list(kind)))
        if startswith is not None:
            q = q.where(t.c.message.startswith(startswith, autoescape=True))
        return [EventRecord.from_row(r._mapping) for r in self._newest(q, t.c.id, limit)]
