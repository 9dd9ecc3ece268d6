"""Slots of cores for runs side by side (looper.core.cores): disjoint, consecutive, every core used."""

from __future__ import annotations

import pytest

from looper.core.cores import TooFewCores, slots


@pytest.mark.parametrize("cores, runs, expected", [
    ([0, 1], 1, [(0, 1)]),
    ([0, 1], 2, [(0,), (1,)]),
    ([0, 1, 2], 2, [(0, 1), (2,)]),  # the first slots take the core left over
    ([0, 1, 2, 3, 4, 5, 6, 7], 3, [(0, 1, 2), (3, 4, 5), (6, 7)]),
    ([3, 1, 2, 1], 3, [(1,), (2,), (3,)]),  # sorted and each core once, as an affinity mask reads
    ([4, 6], 2, [(4,), (6,)]),  # the cores this process may use, not 0..n-1
])
def test_slots_split_the_cores_into_disjoint_runs_of_consecutive_cores(cores, runs, expected):
    got = slots(cores, runs)
    assert got == expected
    flat = [c for s in got for c in s]
    assert sorted(flat) == sorted(set(cores)) and len(flat) == len(set(flat))  # every core, once


@pytest.mark.parametrize("cores, runs", [([0, 1], 3), ([], 1), ([5], 2)])
def test_more_runs_than_cores_is_refused_naming_both(cores, runs):
    with pytest.raises(TooFewCores, match=f"{runs} runs side by side need a core each, but this process may use "
                                          f"{len(set(cores))}"):
        slots(cores, runs)


@pytest.mark.parametrize("runs", [0, -1])
def test_no_runs_is_not_a_split(runs):
    with pytest.raises(ValueError, match="must be >= 1"):
        slots([0, 1], runs)
