"""Baseline approvals are recorded in the database with a hash; a file it does not know is an error."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))  # the report tests' seeded store
from report_seed import Seeded, build  # noqa: E402

from looper.errors import UsageError  # noqa: E402
from looper.workspace.baselines import approve, newest_baseline, recorded_approvals  # noqa: E402

DAY = date(2025, 3, 14)


@pytest.fixture
def seeded(tmp_path: Path) -> Iterator[Seeded]:
    s = build(tmp_path)
    yield s
    s.store.close()


def test_an_approval_is_journalled_with_its_hash_and_accepted(seeded: Seeded) -> None:
    folder = seeded.root / "baselines"
    p = approve(seeded.store, folder, seeded.ids["keep1"], today=DAY)
    import hashlib

    assert recorded_approvals(seeded.store) == {p.name: hashlib.sha256(p.read_bytes()).hexdigest()}
    name, data = newest_baseline(folder, store=seeded.store)  # type: ignore[misc]
    assert name == p.name and data["experiment_id"] == seeded.ids["keep1"]


def test_a_planted_baseline_is_an_error_naming_it(seeded: Seeded) -> None:
    folder = seeded.root / "baselines"
    p = approve(seeded.store, folder, seeded.ids["keep1"], today=DAY)
    planted = folder / "2999-12-31.json"
    planted.write_text(json.dumps({"metrics": {"weighted_f1": 0.0, "classes": {}}}))
    assert newest_baseline(folder)[0] == planted.name  # type: ignore[index]  # without the check: used
    with pytest.raises(UsageError, match=r"baselines/2999-12-31\.json was not approved through looper"):
        newest_baseline(folder, store=seeded.store)
    planted.unlink()
    p.write_text(p.read_text().replace('"score"', '"score_was"'))
    with pytest.raises(UsageError, match=rf"baselines/{p.name} was changed after its approval"):
        newest_baseline(folder, store=seeded.store)
