"""``looper baseline approve``: dated files, never overwritten, only measured results."""

from __future__ import annotations

import json
import os
from datetime import date

import pytest
from report_seed import Seeded

from looper.errors import UsageError
from looper.workspace.baselines import approve, baseline_files, newest_baseline, next_name

DAY = date(2025, 3, 14)


def test_approving_twice_the_same_day_gives_two_files(seeded: Seeded) -> None:
    folder = seeded.root / "baselines"
    a = approve(seeded.store, folder, seeded.ids["keep1"], today=DAY)
    b = approve(seeded.store, folder, seeded.ids["keep2"], today=DAY)
    assert (a.name, b.name) == ("2025-03-14.json", "2025-03-14-2.json")
    first, second = json.loads(a.read_text()), json.loads(b.read_text())
    assert first["experiment_id"] == seeded.ids["keep1"] and second["experiment_id"] == seeded.ids["keep2"]
    exp = seeded.store.experiment(seeded.ids["keep2"])
    assert second["score"] == exp.score and second["metrics"] == exp.metrics
    assert second["commit"] == exp.commit and second["status"] == "keep"
    c = approve(seeded.store, folder, seeded.ids["keep1"], today=DAY)
    assert c.name == "2025-03-14-3.json"
    assert json.loads(a.read_text()) == first  # untouched


def test_never_overwrites_even_when_the_name_is_taken_behind_its_back(seeded: Seeded, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    folder = seeded.root / "baselines"
    folder.mkdir()
    (folder / "2025-03-14.json").write_text('{"metrics": {}, "mine": true}')
    # a racing approval that computed the same name must fail, not overwrite
    import looper.workspace.baselines as b

    monkeypatch.setattr(b, "next_name", lambda _folder, _today: "2025-03-14.json")
    with pytest.raises(FileExistsError):
        approve(seeded.store, folder, seeded.ids["keep1"], today=DAY)
    assert json.loads((folder / "2025-03-14.json").read_text()) == {"metrics": {}, "mine": True}


@pytest.mark.parametrize("name", ["crash_oom1", "vacuous", "error", "interrupted"])
def test_approving_an_unmeasured_experiment_is_refused(seeded: Seeded, name: str) -> None:
    folder = seeded.root / "baselines"
    status = seeded.store.experiment(seeded.ids[name]).status.value
    with pytest.raises(UsageError, match=rf"experiment {seeded.ids[name]} is {status}: only a finished, measured"):
        approve(seeded.store, folder, seeded.ids[name], today=DAY)
    assert baseline_files(folder) == []


def test_approving_a_missing_experiment_is_refused(seeded: Seeded) -> None:
    with pytest.raises(UsageError, match="no experiment 999"):
        approve(seeded.store, seeded.root / "baselines", 999, today=DAY)


def test_near_miss_and_inconclusive_can_be_approved(seeded: Seeded) -> None:
    folder = seeded.root / "baselines"
    p = approve(seeded.store, folder, seeded.ids["near_miss"], today=DAY)
    q = approve(seeded.store, folder, seeded.ids["inconclusive"], today=DAY)
    assert json.loads(p.read_text())["status"] == "discard"
    assert json.loads(q.read_text())["status"] == "inconclusive"


def test_newest_baseline_orders_by_date_then_sequence(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert newest_baseline(tmp_path / "baselines") is None
    folder = tmp_path / "baselines"
    folder.mkdir()
    names = ["2025-03-14.json", "2025-03-14-2.json", "2025-03-14-10.json", "2025-02-28-5.json",
             "2024-12-31.json", "notes.json", "2025-03-15.txt"]
    for i, n in enumerate(names):
        (folder / n).write_text(json.dumps({"metrics": {"weighted_f1": i}}))
    # 10 sorts after 2 numerically, not as text; unrelated files are ignored
    assert newest_baseline(folder) == ("2025-03-14-10.json", {"metrics": {"weighted_f1": 2}})
    (folder / "2025-03-20.json").write_text(json.dumps({"metrics": {"weighted_f1": 99}}))
    assert newest_baseline(folder)[0] == "2025-03-20.json"  # type: ignore[index]
    assert next_name(folder, date(2025, 3, 14)) == "2025-03-14-3.json"
    assert next_name(folder, date(2025, 3, 21)) == "2025-03-21.json"


def test_newest_baseline_that_is_broken_is_a_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "baselines"
    folder.mkdir()
    (folder / "2025-03-14.json").write_text("{not json")
    with pytest.raises(UsageError, match="2025-03-14.json is not valid JSON"):
        newest_baseline(folder)
    os.remove(folder / "2025-03-14.json")
    (folder / "2025-03-14.json").write_text('{"score": 1}')
    with pytest.raises(UsageError, match="has no 'metrics' object"):
        newest_baseline(folder)
