"""The ``transfers`` table (migration 5): one row per transfer check (looper/night/transfer.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Float, Integer, Table, Text, insert, select

from looper.store import models as m
from looper.store.records import FreshCheckRecord
from looper.store.repo import Store, utc_now

transfers = Table(
    "transfers", m.metadata,
    Column("id", Integer, primary_key=True), Column("tag", Text, nullable=False),
    Column("confirmation_id", Integer), Column("experiment_id", Integer), Column("baseline_id", Integer),
    Column("trigger", Text, nullable=False), Column("status", Text, nullable=False),
    Column("score_key", Text, nullable=False), Column("steps", Integer, nullable=False),
    Column("night_steps", Integer, nullable=False), Column("seeds_json", Text, nullable=False),
    Column("scores_json", Text, nullable=False), Column("baseline_scores_json", Text, nullable=False),
    Column("diff", Float), Column("low", Float), Column("high", Float), Column("flagged", Integer, nullable=False),
    Column("headline", Text, nullable=False), Column("runs", Integer, nullable=False),
    Column("seconds", Float, nullable=False), Column("started_at", Text, nullable=False),
    Column("finished_at", Text, nullable=False), sqlite_autoincrement=True,
)


@dataclass(frozen=True, slots=True)
class TransferRecord(FreshCheckRecord):
    """One transfer check: the best and the baseline at ``steps`` (the night's: ``night_steps``) on fresh
    seeds, after confirmation ``confirmation_id`` (``status``: holds | shrinks | reverses | nothing;
    ``trigger``: night_end | command | cut_short)."""

    confirmation_id: int | None
    steps: int
    night_steps: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TransferRecord:
        return cls(**cls.common(row), confirmation_id=row["confirmation_id"], steps=row["steps"],
                   night_steps=row["night_steps"])


def add_transfer(store: Store, *, seeds: list[int], scores: list[float], baseline_scores: list[float],
                 flagged: bool, seconds: float, **values: Any) -> int:
    """Record one transfer check; returns its id."""
    row = {**values, "seeds_json": json.dumps(list(seeds)), "scores_json": json.dumps(list(scores)),
           "baseline_scores_json": json.dumps(list(baseline_scores)), "flagged": int(bool(flagged)),
           "seconds": max(0.0, float(seconds)), "finished_at": utc_now()}
    with store._tx() as conn:  # noqa: SLF001
        return int(conn.execute(insert(transfers).values(**row)).inserted_primary_key[0])


def transfer_records(store: Store, tag: str | None = None) -> list[TransferRecord]:
    """The transfer checks of a tag (every tag when None), oldest first."""
    q = select(transfers).order_by(transfers.c.id)
    if tag is not None:
        q = q.where(transfers.c.tag == tag)
    with store._ro() as conn:  # noqa: SLF001
        return [TransferRecord.from_row(r._mapping) for r in conn.execute(q)]
