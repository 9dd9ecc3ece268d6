"""What a tag pinned when it started, and the noise its baseline measured (``tags``), mixed into
:class:`looper.store.repo.Store`, whose transactions (``_tx``, ``_ro``) it uses."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

from sqlalchemy import insert, select, update

import looper.store.models as m
from looper.store.migrations import StoreError
from looper.store.records import TagRecord
from looper.store.values import _dumps, _iso, utc_now


class TagRows:
    """``put_tag`` and ``set_tag_noise`` write a tag's row; ``tag_record`` reads it back."""

    def put_tag(
        self,
        tag: str,
        *,
        branch: str,
        base_commit: str,
        fixed_hashes: Mapping[str, str],
        data_hash: str,
        noise: Mapping[str, Any] | None = None,
        started_at: str | _dt.datetime | None = None,
    ) -> None:
        """Record (or replace) what was pinned when the tag started. Replacing keeps the
        original ``started_at`` unless one is given."""
        values = {
            "branch": branch,
            "base_commit": base_commit,
            "fixed_hashes_json": _dumps(dict(fixed_hashes), "fixed_hashes"),
            "data_hash": data_hash,
            "noise_json": _dumps(None if noise is None else dict(noise), "noise"),
        }
        given_start = _iso(started_at, "started_at")
        with self._tx() as conn:
            exists = conn.execute(select(m.tags.c.tag).where(m.tags.c.tag == tag)).scalar() is not None
            if exists:
                if given_start:
                    values["started_at"] = given_start
                conn.execute(update(m.tags).where(m.tags.c.tag == tag).values(**values))
            else:
                conn.execute(insert(m.tags).values(tag=tag, started_at=given_start or utc_now(), **values))

    def set_tag_noise(self, tag: str, noise: Mapping[str, Any]) -> None:
        """Record the noise measured for a tag (after its baseline reruns)."""
        with self._tx() as conn:
            result = conn.execute(
                update(m.tags).where(m.tags.c.tag == tag).values(noise_json=_dumps(dict(noise), "noise"))
            )
            if result.rowcount == 0:
                raise StoreError(f"{self.path}: no tag {tag!r} (put_tag first)")

    def tag_record(self, tag: str) -> TagRecord | None:
        """What was pinned when ``tag`` started, or None for a tag never started."""
        with self._ro() as conn:
            row = conn.execute(select(m.tags).where(m.tags.c.tag == tag)).first()
        return None if row is None else TagRecord.from_row(row._mapping)
