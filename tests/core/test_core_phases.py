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


@pytest.mark.parametrize(("spans", "window", "expected"), [
    # two runs overlapping, then one after a gap
    ([(0, 4), (2, 6), (8, 10)], (0, 10), phases.Cover(10.0, 8.0, 1.0, 2.0, 6.0)),
    # the window's own start and end: no run trained before 2 or after 7
    ([(2, 5), (3, 7)], (0, 10), phases.Cover(10.0, 5.0, 0.7, 3.0, 7.0)),
    # the longest gap at the start wins over a later shorter one
    ([(4, 5), (6, 10)], (0, 10), phases.Cover(10.0, 5.0, 0.5, 4.0, 0.0)),
    # one run nested inside another: counted once in training_s, twice in at_once
    ([(0, 10), (2, 4)], (0, 10), phases.Cover(10.0, 10.0, 1.2, 0.0, 0.0)),
    # intervals clipped to the window; an empty or reversed one counts for nothing
    ([(-5, 3), (9, 15), (5, 5), (7, 6)], (0, 10), phases.Cover(10.0, 4.0, 0.4, 6.0, 3.0)),
    # nothing trained: all gap
    ([], (0, 10), phases.Cover(10.0, 0.0, 0.0, 10.0, 0.0)),
    # an empty window
    ([(0, 1)], (5, 5), phases.Cover(0.0, 0.0, 0.0, 0.0, 0.0)),
])
def test_cover_of_training_intervals(spans: list, window: tuple, expected: phases.Cover) -> None:
    got = phases.cover(spans, *window)
    assert got == expected, got


def test_cover_share() -> None:
    assert phases.cover([(0, 9)], 0, 10).share == pytest.approx(0.9)
    assert phases.cover([], 3, 3).share == 0.0


def test_night_cover_from_the_runs_readings() -> None:
    """The window runs from the earliest start to the latest reading of any run; a run that never reached its
    first step adds to the window, not to the training; no run with both training ends: None, never 0 %."""
    runs = [(T0, at(2), at(10), at(12)),         # trained 2-10, evaluated until 12
            (at(1), at(4), at(11), at(14)),      # trained 4-11
            (at(13), None, None, at(20)),        # crashed before its first step: the window ends at 20
            (at(15), at(16), at(18), None)]      # trained 16-18, never evaluated
    c = phases.night_cover(runs)
    assert c is not None
    assert (c.wall_s, c.training_s, c.longest_gap_s, c.gap_starts_at) == (20.0, 11.0, 5.0, 11.0)
    assert c.at_once == pytest.approx((8 + 7 + 2) / 20)
    assert phases.night_cover([(T0, None, None, at(5))]) is None
    assert phases.night_cover([]) is None
    assert phases.night_cover([(T0, at(5), at(3), at(6))]) is None  # out of order: not a training phase
