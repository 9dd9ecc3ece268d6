"""A run's phases from the harness's four clock readings (looper.core.run.phases)."""

from __future__ import annotations

import pytest

from looper.core.run import phases
from looper.core.run.phases import Split

T0 = "2026-12-03T10:00:00.000+00:00"


def at(seconds: float) -> str:
    return f"2026-12-03T10:{int(seconds // 60):02d}:{seconds % 60:06.3f}+00:00"


@pytest.mark.parametrize(("readings", "expected"), [
    ((T0, at(6.5), at(66.5), at(80.0)), Split(6.5, 60.0, 13.5)),
    ((T0, None, at(66.5), at(80.0)), Split(None, None, 13.5)),          # first step never seen
    ((T0, at(6.5), at(66.5), None), Split(6.5, 60.0, None)),            # never evaluated (a crash)
    ((None, at(6.5), at(66.5), at(80.0)), Split(None, 60.0, 13.5)),
    ((T0, at(70.0), at(66.5), at(80.0)), Split(70.0, None, 13.5)),      # out of order: unknown, never negative
    ((T0, "not a time", at(66.5), at(80.0)), Split(None, None, 13.5)),  # unreadable: unknown
    (("", "", "", ""), Split(None, None, None)),
    (("2026-12-03T11:00:00+01:00", at(6.5), at(66.5), at(80.0)), Split(6.5, 60.0, 13.5)),  # zones compared as times
])
def test_split_of_one_run(readings: tuple, expected: Split) -> None:
    assert phases.split(*readings) == expected


@pytest.mark.parametrize(("splits", "expected"), [
    ([Split(6.0, 60.0, 14.0), Split(4.0, 40.0, 6.0)], Split(10.0, 100.0, 20.0)),
    ([Split(6.0, 60.0, 14.0), Split(None, 40.0, 6.0)], Split(None, 100.0, 20.0)),  # unknown anywhere: unknown
    ([Split(None, 60.0, 14.0), Split(4.0, 40.0, 6.0)], Split(None, 100.0, 20.0)),
    ([], Split(0.0, 0.0, 0.0)),
])
def test_add(splits: list[Split], expected: Split) -> None:
    assert phases.add(splits) == expected


@pytest.mark.parametrize(("sp", "share"), [
    (Split(10.0, 90.0, 0.0), 0.9),
    (Split(5.4, 60.0, 16.0), 60.0 / 81.4),
    (Split(None, 90.0, 10.0), None),
    (Split(0.0, 0.0, 0.0), None),  # nothing ran: no share
])
def test_useful_share(sp: Split, share: float | None) -> None:
    assert sp.useful_share == (None if share is None else pytest.approx(share))


def test_as_dict_rounds_and_keeps_unknowns() -> None:
    assert Split(1.23456, None, 2.0).as_dict() == {"startup_seconds": 1.235, "train_seconds": None,
                                                   "eval_seconds": 2.0}
